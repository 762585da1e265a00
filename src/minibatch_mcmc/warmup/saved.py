"""A finished warm-up kept beside a run's checkpoints, so that resuming ``auto_sample`` does not redo it: data, never code.

``warmup.npz`` holds the warm-up's arrays (read with ``allow_pickle=False``) and ``warmup.json`` the settings it was
found with (seed, model, start, options, a data fingerprint), the structure of the warm-up as a JSON tree
(``codec``: NamedTuples by name, rebuilt only from the caller's registry of this library's classes) and a
SHA-256 of the ``.npz`` (it catches corruption; since nothing in the files is executed, a tampered file can give wrong
numbers but never run code). A resume with other settings is refused naming them, and a file whose digest does not match
is refused naming it, as checkpoint chunks are. A warm-up that cannot be encoded (it holds a user's function) is not
saved: a warning says so and a resume redoes it. The ``warmup.pkl`` of earlier versions, and a warm-up saved in
an earlier format, are never read: the warm-up is redone.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from minibatch_mcmc.samplers import safe_files
from minibatch_mcmc.samplers.checkpoint import WARMUP_SETTINGS, setting_differences
from minibatch_mcmc.warmup.codec import LIBRARY_TYPES, decode, encode

WARMUP_ARRAYS = "warmup.npz"
WARMUP_FORMAT = 3
"""Version of the saved warm-up; 1 was a pickle, 2 held ``TaylorProxy`` fields since removed: neither is read."""


def save_warmup(
    directory: str | os.PathLike,
    settings: dict,
    payload: Any,
    types: tuple[type, ...] = LIBRARY_TYPES,
    refs: dict[str, Any] | None = None,
) -> Path | None:
    """Write ``payload`` (``types``: the NamedTuples it may hold; ``refs``: objects supplied again on load) and its
    ``settings`` crash-safely; warn and write nothing if it cannot be encoded."""
    path = Path(directory)
    try:
        tree, arrays = encode(payload, types, refs)
    except TypeError as err:
        warnings.warn(f"the warm-up could not be saved in {path} ({err}); a resumed run will redo it", stacklevel=3)
        return None
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    blob = buffer.getvalue()
    record = {"format": WARMUP_FORMAT, "settings": settings, "tree": tree, "sha256": hashlib.sha256(blob).hexdigest()}
    safe = "the warm-up was not saved (a resumed run redoes it)"
    path.mkdir(parents=True, exist_ok=True)
    safe_files.write_bytes(path / WARMUP_ARRAYS, blob, "the saved warm-up", safe)
    safe_files.write_bytes(
        path / WARMUP_SETTINGS, json.dumps(record, indent=1, sort_keys=True).encode(), "the saved warm-up", safe
    )
    return path / WARMUP_ARRAYS


def load_warmup(
    directory: str | os.PathLike,
    settings: dict,
    types: tuple[type, ...] = LIBRARY_TYPES,
    refs: dict[str, Any] | None = None,
) -> Any | None:
    """The saved warm-up if ``directory`` holds one found with ``settings``; ``None`` if it holds none (or one in the old,
    unread pickle format, with a warning)."""
    path = Path(directory)
    if not (path / WARMUP_SETTINGS).is_file():
        return None
    try:
        saved = json.loads((path / WARMUP_SETTINGS).read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(
            f"{path / WARMUP_SETTINGS} is corrupt and cannot be read ({err}); delete it to redo the warm-up"
        ) from None
    if not isinstance(saved, dict) or saved.get("format") != WARMUP_FORMAT:
        found = saved.get("format", 1) if isinstance(saved, dict) else 1
        warnings.warn(
            f"the warm-up saved in {path} is in an earlier format ({found}; this version reads {WARMUP_FORMAT}), "
            "which is not read; it is redone",
            stacklevel=3,
        )
        return None
    given = json.loads(json.dumps(settings, sort_keys=True))
    diffs = setting_differences(saved["settings"], given)
    if diffs:
        what = "; ".join(f"{k}: saved {json.dumps(a)}, this call {json.dumps(b)}" for k, a, b in diffs)
        raise ValueError(f"cannot resume with the warm-up saved in {path}: it was found with other settings ({what})")
    blob = (path / WARMUP_ARRAYS).read_bytes() if (path / WARMUP_ARRAYS).is_file() else b""
    if hashlib.sha256(blob).hexdigest() != saved["sha256"]:
        raise ValueError(
            f"{path / WARMUP_ARRAYS} does not match the digest in {WARMUP_SETTINGS}: it is corrupt or was replaced"
        )
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
            return decode(saved["tree"], arrays, types, refs)
    except (ValueError, KeyError, TypeError, OSError) as err:  # an object array, a missing key, a class not allowed
        raise ValueError(
            f"the warm-up saved in {path} cannot be restored ({err}); delete {WARMUP_SETTINGS} to redo it"
        ) from None
