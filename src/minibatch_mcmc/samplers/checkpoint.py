"""Resumable runs: every finished block of draws is one netCDF file, written to a temporary name and renamed.

A checkpoint directory holds ``settings.json`` (what the run was: seed, model, test and proposal
configuration, number of chains, data size, parameter layout) and files ``chunk-START-END.nc`` with
the draws and per-step records of steps ``[START, END)``, the temperatures used, and the chain
states after step ``END - 1``. Since the key of step ``t`` is ``fold_in(key, t)``, the last chunk's
states and ``END`` are all a resumed run needs to continue exactly where the killed one stopped; a
run killed mid-block loses only that block (its temporary file is ignored and removed).

Nothing is resumed silently wrong: every chunk carries a SHA-256 of its contents and of the run's
``settings.json`` (a corrupt, truncated or foreign chunk is refused with its file named), and the
settings hold a fingerprint of the data (``N``, every leaf's dtype and row shape, and a hash of
``FINGERPRINT_ROWS`` rows at fixed positions), so a resume on other data of the same size is refused.
The run id a chunk carries is the SHA-256 of the settings' canonical JSON (parsed, keys sorted, compact), so
re-saving ``settings.json`` with other formatting orphans nothing (a chunk carrying the hash of the file's bytes, as
earlier versions wrote, is still read). A resume of a directory without ``settings.json`` but with a saved warm-up or a
lock (a run killed in its warm-up) starts at step 0.

The directory holds data only: nothing in it is imported or unpickled. Files are written through exclusive temporaries
and a run holds the directory's lock for its whole length (``safe_files``); a failed write (a full disk) is one
``CheckpointWriteError`` that names what is still intact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.host import is_host_data
from minibatch_mcmc.samplers import safe_files

PyTree = Any

SETTINGS_FILE = "settings.json"
WARMUP_SETTINGS = "warmup.json"
"""The saved warm-up's settings (``warmup.saved``): with ``SETTINGS_FILE`` and the lock, the files that mark a started run."""
CHUNK_PATTERN = re.compile(r"^chunk-(\d{9})-(\d{9})\.nc$")
FORMAT_VERSION = 3
FINGERPRINT_ROWS = 64
"""Rows read (at evenly spaced fixed positions) to fingerprint the data of a checkpointed run."""
INFORMATIONAL = ("data_source",)
"""Settings written for the reader only: a resume may differ in them (a data file moved elsewhere)."""


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
        if arr.size <= 16 and arr.dtype.kind in "biuf":  # small arrays (a step size) by value, so a refusal can show it
            return {"dtype": str(arr.dtype), "shape": list(arr.shape), "values": arr.ravel().tolist()}
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


def data_fingerprint(data: PyTree, n_data: int, rows: int = FINGERPRINT_ROWS) -> dict:
    """``N``, each leaf's name, dtype and row shape, and a SHA-256 of ``rows`` rows at fixed evenly spaced positions.

    The rows are read through ``take`` (a host read for an out-of-core source), so this costs
    ``rows`` row reads whatever ``N`` is.
    """
    idx = np.unique(np.linspace(0, n_data - 1, min(rows, n_data)).round().astype(np.int64))
    sample = take(data, jnp.asarray(idx, jnp.int32))
    digest = hashlib.sha256(idx.tobytes())
    leaves = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(sample)[0]:
        arr = np.ascontiguousarray(np.asarray(leaf))
        leaves.append([jax.tree_util.keystr(path) or "data", str(arr.dtype), list(arr.shape[1:])])
        digest.update(arr.tobytes())
    return {"n": int(n_data), "leaves": leaves, "rows": len(idx), "rows_sha256": digest.hexdigest()}


def describe_data(data: PyTree) -> str:
    """A short name of a data set for messages: the file of an out-of-core source, else the arrays' shapes."""
    if is_host_data(data):
        return repr(data)
    shapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), data)
    return f"in-memory arrays {shapes}"


def run_settings(
    *,
    key: jax.Array,
    model: Any,
    test: Any,
    proposal: Any,
    num_chains: int,
    n_data: int,
    positions: PyTree,
    estimator: Any = None,
    data: PyTree = None,
) -> dict:
    """What must agree between a checkpoint and the call that resumes it (the estimator and data only when given)."""
    leaves, treedef = jax.tree_util.tree_flatten(positions)
    extra = {} if estimator is None else {"estimator": estimator.name, "estimator_config": fingerprint(estimator)}
    if data is not None:
        extra |= {"data": data_fingerprint(data, n_data), "data_source": describe_data(data)}
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


def _describe(value: Any) -> str:
    """Text of a setting for error messages (in full: what differs must be visible)."""
    return "(absent)" if value is _ABSENT else json.dumps(value, sort_keys=True)


_ABSENT = object()


def setting_differences(saved: Any, given: Any, name: str = "") -> list[tuple[str, Any, Any]]:
    """``(setting, checkpoint value, this call's value)`` for every innermost setting that differs.

    Dicts are compared key by key and lists of equal length holding dicts or lists element by
    element, so a changed step size is named ``proposal_config.closure[0]`` rather than the whole
    proposal; other lists (a seed) are compared whole.
    """
    if saved == given:
        return []
    if isinstance(saved, dict) and isinstance(given, dict):
        out = []
        for k in sorted(set(saved) | set(given)):
            sub = f"{name}.{k}" if name else str(k)
            out += setting_differences(saved.get(k, _ABSENT), given.get(k, _ABSENT), sub)
        return out
    nested = isinstance(saved, list) and isinstance(given, list) and len(saved) == len(given)
    if nested and any(isinstance(v, (dict, list)) for v in saved + given):
        return [d for i, (a, b) in enumerate(zip(saved, given)) for d in setting_differences(a, b, f"{name}[{i}]")]
    return [(name, saved, given)]


def _settings_error(path: Path, saved: dict, stored: dict) -> ValueError | None:
    """The refusal of a resume whose settings differ from the checkpoint's, naming every differing setting."""
    keys = sorted(k for k in set(saved) | set(stored) if k not in INFORMATIONAL)
    diffs = [d for k in keys for d in setting_differences(saved.get(k, _ABSENT), stored.get(k, _ABSENT), k)]
    if not diffs:
        return None
    lines = "; ".join(f"{k}: checkpoint has {_describe(a)}, this call has {_describe(b)}" for k, a, b in diffs)
    if any(k == "data" or k.startswith("data.") for k, _, _ in diffs):
        lines += (
            f"; the data passed ({stored.get('data_source', 'unknown')}) are not the data the checkpoint was written with "
            f"({saved.get('data_source', 'unknown')})"
        )
    return ValueError(f"cannot resume the run in {path} with different settings ({lines})")


def check_start(directory: str | os.PathLike, resume: bool, markers: tuple[str, ...] = (SETTINGS_FILE,)) -> None:
    """Refuse at once a resume of a directory that holds no run, or a new run in one holding any of ``markers``."""
    path = Path(directory)
    started = [m for m in (SETTINGS_FILE, WARMUP_SETTINGS, safe_files.LOCK_FILE) if (path / m).exists()]
    if resume and not started:
        what = "does not exist" if not path.exists() else f"holds no run ({SETTINGS_FILE} is missing)"
        raise ValueError(
            f"cannot resume: checkpoint directory {path} {what}; check the path, or start a new run without resume (CLI: --resume)"
        )
    held = [m for m in markers if (path / m).exists()]
    if not resume and held:
        chunks = sum(1 for p in path.iterdir() if CHUNK_PATTERN.match(p.name))
        raise ValueError(
            f"checkpoint directory {path} already holds a run ({', '.join(held)}, {chunks} finished chunk(s)); "
            "pass resume=True (CLI: --resume) to continue it, or choose an empty directory"
        )


def run_directory(directory: str | os.PathLike | None, resume: bool, markers: tuple[str, ...] = (SETTINGS_FILE,)):
    """The ``with`` context of a checkpointed run: ``check_start``, then the directory's lock (nothing without a directory)."""
    if directory is None:
        return contextlib.nullcontext()
    check_start(directory, resume, markers)
    return safe_files.run_lock(directory)


def open_checkpoint(directory: str | os.PathLike, settings: dict, resume: bool) -> list[Chunk]:
    """Prepare ``directory`` for a run with ``settings``; return the finished chunks when resuming.

    A resumed directory without ``settings.json`` (a run killed in its warm-up, before sampling began) starts at step 0.
    """
    path = Path(directory)
    check_start(path, resume)
    path.mkdir(parents=True, exist_ok=True)
    safe_files.remove_temporaries(path)  # a file that was being written when the run died
    settings_path = path / SETTINGS_FILE
    chunk_files = sorted(p for p in path.iterdir() if CHUNK_PATTERN.match(p.name))
    if not settings_path.exists():
        if chunk_files:
            raise ValueError(
                f"checkpoint directory {path} has chunk files but no {SETTINGS_FILE}; it cannot be resumed"
            )
        safe_files.write_bytes(
            settings_path,
            json.dumps(settings, indent=1, sort_keys=True).encode(),
            "the run's settings",
            "nothing was sampled yet",
        )
        return []
    saved = json.loads(settings_path.read_text())
    stored = json.loads(json.dumps(settings, sort_keys=True))  # normalise tuples to lists as on disk
    error = _settings_error(path, saved, stored)
    if error is not None:
        raise error
    runs = _run_ids(path)
    chunks = [read_chunk(p, runs) for p in chunk_files]
    expected = 0
    for c in chunks:
        if c.start != expected:
            raise ValueError(
                f"checkpoint {path} is missing steps [{expected}, {c.start}); chunks must be contiguous from step 0"
            )
        expected = c.end
    return chunks


def _run_ids(directory: Path) -> tuple[str, str]:
    """The run a chunk belongs to: the SHA-256 of ``settings.json``'s canonical JSON, and of its bytes (format 3's id)."""
    raw = (directory / SETTINGS_FILE).read_bytes()
    canonical = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest(), hashlib.sha256(raw).hexdigest()


def content_checksum(arrays: dict[str, np.ndarray], start: int, end: int, run: str) -> str:
    """SHA-256 over a chunk's step range, run and every array (name, dtype, shape, bytes; NaNs canonical)."""
    digest = hashlib.sha256(f"{start}:{end}:{run}".encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(np.asarray(arrays[name]))
        if np.issubdtype(arr.dtype, np.floating):
            arr = np.where(np.isnan(arr), np.array(np.nan, arr.dtype), arr)  # netCDF's fill value rewrites NaN payloads
        digest.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def write_chunk(directory: str | os.PathLike, chunk: Chunk) -> Path:
    """Write one finished block as ``chunk-START-END.nc`` (crash-safe: temporary file, fsync, rename), with its checksum."""
    import xarray as xr

    data_vars = {}
    for i, leaf in enumerate(chunk.positions):
        data_vars[f"position_{i}"] = (
            ("draw", "chain") + tuple(f"position_{i}_dim_{d}" for d in range(leaf.ndim - 2)),
            leaf,
        )
    for name, rec in chunk.records.items():
        data_vars[f"record_{name}"] = (("draw", "chain"), np.asarray(rec))
    data_vars["temperature"] = (("draw",), np.asarray(chunk.temperature, np.float64))
    for i, leaf in enumerate(chunk.state):
        leaf = np.asarray(leaf)
        data_vars[f"state_{i}"] = (("chain",) + tuple(f"state_{i}_dim_{d}" for d in range(leaf.ndim - 1)), leaf)
    path = Path(directory)
    run = _run_ids(path)[0]
    checksum = content_checksum({k: v[1] for k, v in data_vars.items()}, int(chunk.start), int(chunk.end), run)
    attrs = {
        "start": int(chunk.start),
        "end": int(chunk.end),
        "wall_time": float(chunk.wall_time),
        "run": run,
        "sha256": checksum,
    }
    ds = xr.Dataset(data_vars, attrs=attrs)
    final = path / f"chunk-{chunk.start:09d}-{chunk.end:09d}.nc"
    done = sum(1 for p in path.iterdir() if CHUNK_PATTERN.match(p.name))
    safe = (
        f"the {done} finished chunk(s) before it are intact: free space and resume with resume=True (CLI: --resume) "
        f"to continue from step {chunk.start}"
    )
    return safe_files.write_through_temp(
        final, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"), "checkpoint chunk", safe
    )


def _load_dataset(path: Path) -> Any:
    """The chunk file's dataset, loaded; a file that is not readable netCDF is refused with its name."""
    import xarray as xr

    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            return ds.load()
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"checkpoint chunk {path} is truncated or corrupt and cannot be read ({type(err).__name__}: {first}); "
            "delete it and every later chunk to resume from the chunks before it"
        ) from None


def read_chunk(path: str | os.PathLike, runs: tuple[str, ...] | None = None) -> Chunk:
    """Load one chunk file written by :func:`write_chunk`, verifying its checksum (and, given ``runs``, that it belongs to one)."""
    path = Path(path)
    ds = _load_dataset(path)
    bad = f"checkpoint chunk {path}"
    if "sha256" not in ds.attrs or "run" not in ds.attrs:
        raise ValueError(
            f"{bad} has no checksum (written before checkpoint format {FORMAT_VERSION}, or not by this library)"
        )
    start, end = int(ds.attrs["start"]), int(ds.attrs["end"])
    match = CHUNK_PATTERN.match(path.name)
    if match and (int(match.group(1)), int(match.group(2))) != (start, end):
        raise ValueError(f"{bad} holds steps [{start}, {end}), not the steps its name says; it was renamed or copied")
    if runs is not None and ds.attrs["run"] not in runs:
        raise ValueError(f"{bad} belongs to another run (its settings hash differs from {SETTINGS_FILE}'s); remove it")
    arrays = {k: ds[k].values for k in ds.data_vars}
    if content_checksum(arrays, start, end, str(ds.attrs["run"])) != ds.attrs["sha256"]:
        raise ValueError(
            f"{bad} is corrupt: its contents do not match the checksum written with it; delete it and every later chunk"
        )
    n_pos = sum(1 for k in ds.data_vars if k.startswith("position_"))
    n_state = sum(1 for k in ds.data_vars if k.startswith("state_"))
    return Chunk(
        start=start,
        end=end,
        positions=[arrays[f"position_{i}"] for i in range(n_pos)],
        records={k[len("record_") :]: v for k, v in arrays.items() if k.startswith("record_")},
        temperature=arrays["temperature"],
        state=[arrays[f"state_{i}"] for i in range(n_state)],
        wall_time=float(ds.attrs.get("wall_time", 0.0)),
    )
