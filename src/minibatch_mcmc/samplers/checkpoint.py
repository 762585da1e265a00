"""Resumable runs: every finished block of draws is one netCDF file, written to a temporary name and renamed.

A checkpoint directory holds ``settings.json`` (what the run was: seed, model, test and proposal
configuration, number of chains, data size, parameter layout) and files ``chunk-START-END.nc`` with
the draws and per-step records of steps ``[START, END)``, the temperatures used, and the chain
states after step ``END - 1``. Since the key of step ``t`` is ``fold_in(key, t)``, the last chunk's
states and ``END`` are all a resumed run needs to continue exactly where the killed one stopped; a
run killed mid-block loses only that block (its temporary file is ignored and removed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

PyTree = Any

SETTINGS_FILE = "settings.json"
CHUNK_PATTERN = re.compile(r"^chunk-(\d{9})-(\d{9})\.nc$")
FORMAT_VERSION = 2


class Chunk(NamedTuple):
    """One finished block: steps ``[start, end)`` in the driver's ``(draw, chain, ...)`` layout."""

    start: int
    end: int
    positions: list[np.ndarray]
    """Leaves of the position pytree, each ``(draw, chain, *shape)``."""
    records: dict
    """Per-step records, each ``(draw, chain)``."""
    temperature: np.ndarray
    """Temperature of each step, ``(draw,)``."""
    state: list[np.ndarray]
    """Leaves of the chain-state pytree after step ``end - 1``, each ``(chain, ...)``."""
    wall_time: float


def fingerprint(obj: Any, depth: int = 6) -> Any:
    """A JSON-able description of a configuration: NamedTuples field by field, arrays hashed, callables
    by name plus the values they close over (a proposal's step size or a model's prior scale live there)."""
    if depth <= 0:
        return type(obj).__name__
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return {"type": type(obj).__name__, **{f: fingerprint(getattr(obj, f), depth - 1) for f in obj._fields}}
    if isinstance(obj, (list, tuple)):
        return [fingerprint(v, depth - 1) for v in obj]
    if isinstance(obj, dict):
        return {str(k): fingerprint(v, depth - 1) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return repr(obj)
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        if isinstance(obj, jax.Array) and jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
            obj = jax.random.key_data(obj)
        arr = np.ascontiguousarray(np.asarray(obj))
        return {"dtype": str(arr.dtype), "shape": list(arr.shape), "sha1": hashlib.sha1(arr.tobytes()).hexdigest()}
    if callable(obj):
        name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
        cells = getattr(obj, "__closure__", None) or ()
        if not cells:
            return name
        return {"callable": name, "closure": [_cell_fingerprint(c, depth - 1) for c in cells]}
    return repr(obj)


def _cell_fingerprint(cell: Any, depth: int) -> Any:
    """Fingerprint of one closure cell (an empty cell, not yet assigned, has none)."""
    try:
        return fingerprint(cell.cell_contents, depth)
    except ValueError:
        return "<empty>"


def run_settings(
    *, key: jax.Array, model: Any, test: Any, proposal: Any, num_chains: int, n_data: int, positions: PyTree, estimator: Any = None
) -> dict:
    """What must agree between a checkpoint and the call that resumes it (the estimator only when one is given)."""
    leaves, treedef = jax.tree_util.tree_flatten(positions)
    extra = {} if estimator is None else {"estimator": estimator.name, "estimator_config": fingerprint(estimator)}
    return extra | {
        "format_version": FORMAT_VERSION,
        "seed": np.asarray(jax.random.key_data(key)).ravel().tolist(),
        "key_impl": str(jax.random.key_impl(key)),
        "model": model.name,
        "test": test.name,
        "test_config": fingerprint(test),
        "model_config": fingerprint(model),
        "proposal": proposal.name,
        "proposal_config": fingerprint(proposal),
        "num_chains": int(num_chains),
        "n_data": int(n_data),
        "position_layout": [str(treedef)] + [[list(np.shape(x))[1:], str(np.asarray(x).dtype)] for x in leaves],
    }


def _fsync_replace(tmp: Path, final: Path) -> None:
    """Flush ``tmp`` to disk and atomically rename it to ``final``."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)


def _describe(value: Any) -> str:
    """Short text of a setting for error messages."""
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def open_checkpoint(directory: str | os.PathLike, settings: dict, resume: bool) -> list[Chunk]:
    """Prepare ``directory`` for a run with ``settings``; return the finished chunks when resuming."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob(".chunk-*.tmp"):
        stale.unlink()  # a block that was being written when the run died
    settings_path = path / SETTINGS_FILE
    chunk_files = sorted(p for p in path.iterdir() if CHUNK_PATTERN.match(p.name))
    if not settings_path.exists():
        if chunk_files:
            raise ValueError(f"checkpoint directory {path} has chunk files but no {SETTINGS_FILE}; it cannot be resumed")
        tmp = path / f".{SETTINGS_FILE}.tmp"
        tmp.write_text(json.dumps(settings, indent=1, sort_keys=True))
        _fsync_replace(tmp, settings_path)
        return []
    saved = json.loads(settings_path.read_text())
    if not resume:
        raise ValueError(
            f"checkpoint directory {path} already holds a run ({len(chunk_files)} finished chunk(s)); "
            "pass resume=True (CLI: --resume) to continue it, or choose an empty directory"
        )
    stored = json.loads(json.dumps(settings, sort_keys=True))  # normalise tuples to lists as on disk
    diffs = [k for k in sorted(set(saved) | set(stored)) if saved.get(k) != stored.get(k)]
    if diffs:
        lines = "; ".join(f"{k}: checkpoint has {_describe(saved.get(k))}, this call has {_describe(stored.get(k))}" for k in diffs)
        raise ValueError(f"cannot resume the run in {path} with different settings ({lines})")
    chunks = [read_chunk(p) for p in chunk_files]
    expected = 0
    for c in chunks:
        if c.start != expected:
            raise ValueError(f"checkpoint {path} is missing steps [{expected}, {c.start}); chunks must be contiguous from step 0")
        expected = c.end
    return chunks


def write_chunk(directory: str | os.PathLike, chunk: Chunk) -> Path:
    """Write one finished block as ``chunk-START-END.nc`` (crash-safe: temporary file, fsync, rename)."""
    import xarray as xr

    data_vars = {}
    for i, leaf in enumerate(chunk.positions):
        data_vars[f"position_{i}"] = (("draw", "chain") + tuple(f"position_{i}_dim_{d}" for d in range(leaf.ndim - 2)), leaf)
    for name, rec in chunk.records.items():
        data_vars[f"record_{name}"] = (("draw", "chain"), np.asarray(rec))
    data_vars["temperature"] = (("draw",), np.asarray(chunk.temperature, np.float64))
    for i, leaf in enumerate(chunk.state):
        leaf = np.asarray(leaf)
        data_vars[f"state_{i}"] = (("chain",) + tuple(f"state_{i}_dim_{d}" for d in range(leaf.ndim - 1)), leaf)
    ds = xr.Dataset(data_vars, attrs={"start": int(chunk.start), "end": int(chunk.end), "wall_time": float(chunk.wall_time)})
    path = Path(directory)
    final = path / f"chunk-{chunk.start:09d}-{chunk.end:09d}.nc"
    tmp = path / f".{final.name}.tmp"
    ds.to_netcdf(tmp, engine="h5netcdf")
    _fsync_replace(tmp, final)
    return final


def read_chunk(path: str | os.PathLike) -> Chunk:
    """Load one chunk file written by :func:`write_chunk`."""
    import xarray as xr

    with xr.open_dataset(path, engine="h5netcdf") as ds:
        ds = ds.load()
    n_pos = sum(1 for k in ds.data_vars if k.startswith("position_"))
    n_state = sum(1 for k in ds.data_vars if k.startswith("state_"))
    return Chunk(
        start=int(ds.attrs["start"]),
        end=int(ds.attrs["end"]),
        positions=[ds[f"position_{i}"].values for i in range(n_pos)],
        records={k[len("record_") :]: ds[k].values for k in ds.data_vars if k.startswith("record_")},
        temperature=ds["temperature"].values,
        state=[ds[f"state_{i}"].values for i in range(n_state)],
        wall_time=float(ds.attrs.get("wall_time", 0.0)),
    )
