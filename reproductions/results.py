"""Results files: the figures a run reports, with the command, machine and date that made them.

Every experiment (``minibatch-mcmc reproduce NAME``) and benchmark writes one JSON file::

    {"experiment": "gmm", "command": "minibatch-mcmc reproduce gmm --results docs/results/gmm.json",
     "machine": "...", "versions": {...}, "date": "...", "load_average": [...],
     "config": {...}, "tables": {"gmm_table1": {"columns": [...], "rows": [[...], ...]}},
     "values": {"gmm.mhminibatch_mean": "168.1"}, "figures": ["docs/figures/..."]}

Cells and values are already formatted strings. The docs quote a table only through a
``<!-- results:NAME -->`` block and a single figure in prose only through
``<!-- value:KEY -->...<!-- /value -->``; ``benchmarks/render_results.py`` fills both from
``docs/results/*.json`` and ``tests/test_docs_results.py`` fails when a documented figure and its
file disagree. A run always writes ``OUT/NAME/results.json``; ``--results FILE`` writes a copy
(``docs/results/NAME.json`` for the runs the docs quote).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

RESULTS_NAME = "results.json"
"""File name of the results file inside a run folder."""


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict:
    """A results table: ``columns`` and ``rows`` of cells as strings (every row as long as ``columns``)."""
    cols = [str(c) for c in columns]
    cells = [[str(c) for c in row] for row in rows]
    for i, row in enumerate(cells):
        if len(row) != len(cols):
            raise ValueError(f"row {i} has {len(row)} cells, expected {len(cols)} (columns {cols}): {row}")
    return {"columns": cols, "rows": cells}


def machine() -> str:
    """The processor, CPU count and JAX's devices, in one line."""
    import jax

    dev = jax.devices()[0]
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {jax.device_count()} x {dev.platform}:{dev.device_kind}"


def versions() -> dict[str, str]:
    """Versions of Python, JAX and this library."""
    import importlib.metadata

    import jax

    try:
        ours = importlib.metadata.version("minibatch-mcmc")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree on PYTHONPATH, not installed
        ours = "source tree (not installed)"
    return {"python": platform.python_version(), "jax": jax.__version__, "minibatch_mcmc": ours}


def command_line(experiment: str, argv: Sequence[str]) -> str:
    """The ``minibatch-mcmc reproduce`` command that reruns the experiment with these options."""
    return shlex.join(["minibatch-mcmc", "reproduce", experiment, *argv])


def jsonable(value: Any) -> Any:
    """``value`` with NamedTuples, tuples, paths and NumPy scalars/arrays turned into plain JSON values."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: jsonable(v) for k, v in zip(value._fields, value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return value


def results_payload(
    experiment: str,
    command: str,
    *,
    config: Any = None,
    tables: Mapping[str, dict] | None = None,
    values: Mapping[str, str] | None = None,
    figures: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict:
    """The results file's content: provenance (command, machine, versions, date, load), then the figures."""
    load = list(os.getloadavg())
    payload = {
        "experiment": experiment,
        "command": command,
        "machine": machine(),
        "versions": versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "load_average": [round(x, 2) for x in load],
        "config": jsonable(config),
        "tables": dict(tables or {}),
        "values": {str(k): str(v) for k, v in (values or {}).items()},
        "figures": list(figures),
    }
    if extra:
        payload.update(jsonable(dict(extra)))
    return payload


def save_results(path: str | Path, payload: dict) -> Path:
    """Write ``payload`` as JSON to ``path`` (folders created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def write_results(out: Path, payload: dict, copy_to: str | Path | None = None) -> list[Path]:
    """Write ``payload`` to ``out/results.json`` and, if given, to ``copy_to``; return the paths written."""
    paths = [Path(out) / RESULTS_NAME] + ([Path(copy_to)] if copy_to else [])
    return [save_results(p, payload) for p in paths]
