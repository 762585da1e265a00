"""The results file of a benchmark script: ``reproductions.results``'s payload written to ``--results FILE``.

A benchmark builds its printed tables with ``table(columns, rows)`` (cells as strings) and the figures its
section of ``docs/benchmarks.md`` quotes in prose as ``values``; ``save`` adds the exact command line,
machine, versions, date and load average, and writes ``FILE`` (nothing without ``--results``, so a casual
run does not overwrite the committed ``docs/results/NAME.json``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping

import repository  # noqa: F401  (the repository root on sys.path, for reproductions/)

from reproductions.results import jsonable, results_payload, save_results, table

__all__ = ["add_results_option", "command", "machine_line", "save", "save_rows", "table"]


def add_results_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--results FILE`` (default: write no results file)."""
    parser.add_argument(
        "--results",
        default=None,
        metavar="FILE",
        help="write the tables and figures to this JSON results file (e.g. docs/results/NAME.json)",
    )


def machine_line() -> str:
    """The machine a run used: processor, cores, JAX's first device, JAX's version and the load average at start."""
    import platform

    import jax

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].device_kind}, "
        f"jax {jax.__version__}, load average at start {os.getloadavg()[0]:.1f}"
    )


def command(argv: list[str] | None = None) -> str:
    """The command line that reruns this script with the same options, quoted for a shell."""
    return shlex.join(["python", *(sys.argv if argv is None else argv)])


def save(
    path: str | Path | None,
    name: str,
    *,
    config: Any,
    tables: Mapping[str, dict],
    values: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    argv: list[str] | None = None,
) -> Path | None:
    """Write the results payload of benchmark ``name`` to ``path`` and return it (nothing when ``path`` is empty)."""
    if not path:
        return None
    cfg = vars(config) if isinstance(config, argparse.Namespace) else config
    payload = results_payload(name, command(argv), config=jsonable(cfg), tables=tables, values=values, extra=extra)
    out = save_results(path, payload)
    print(f"results written to {out}")
    return out


def save_rows(
    args: argparse.Namespace, columns: list[str], rows: list, values: Mapping[str, Any], machine: str, complete: bool
) -> Path | None:
    """``save`` the one table ``args.name`` so far: after each configuration with ``complete=False`` (a run cut off
    keeps its finished rows), at the end with ``complete=True`` and the load average."""
    extra: dict[str, Any] = {"machine": machine, "complete": complete}
    if complete:
        extra["load average at end"] = os.getloadavg()[0]
    return save(
        args.results, args.name, config=args, tables={args.name: table(columns, rows)}, values=values, extra=extra
    )
