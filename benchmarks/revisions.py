"""Two versions of the library side by side: each git revision's ``src`` extracted by ``git archive``, and a benchmark's
worker run on each in a fresh process (``PYTHONPATH`` its ``src``), all at the same time so that they share the load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
"""The repository checkout whose revisions are read."""


def extract_sources(refs: Mapping[str, str], into: Path) -> dict[str, Path]:
    """``{"LABEL (short hash)": its src}`` for each ``LABEL -> revision`` of ``refs``, each tree under ``into / LABEL``."""
    versions = {}
    for label, ref in refs.items():
        short = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True)
        archive = subprocess.run(["git", "archive", ref, "src"], cwd=ROOT, capture_output=True, check=True)
        (into / label).mkdir()
        subprocess.run(["tar", "-x", "-C", str(into / label)], input=archive.stdout, check=True)
        versions[f"{label} ({short.stdout.strip()})"] = into / label / "src"
    return versions


def run_workers(script: str, versions: Mapping[str, Path], args: list[str]) -> dict[str, dict]:
    """``script --worker ARGS --out FILE`` on each version at once; each worker's JSON (an error naming a failed one)."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for name, src in versions.items():
            out = Path(tmp) / f"{len(procs)}.json"
            cmd = [sys.executable, str(Path(script).resolve()), "--worker", *args, "--out", str(out)]
            procs[name] = (subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(src)}), out)
        for name, (proc, _) in procs.items():
            if proc.wait() != 0:
                raise RuntimeError(f"the {name} worker failed (exit {proc.returncode})")
        return {name: json.loads(out.read_text()) for name, (_, out) in procs.items()}


def mode_gap(results: Mapping[str, dict]) -> float:
    """The largest distance between two versions' ``mode``s, in the first version's ``sd``s."""
    first, second = results.values()
    return float(np.max(np.abs(np.asarray(first["mode"]) - np.asarray(second["mode"])) / np.asarray(first["sd"])))
