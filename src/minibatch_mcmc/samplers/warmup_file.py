"""A finished warm-up kept beside a run's checkpoints, so that resuming ``auto_sample`` does not redo it.

``warmup.pkl`` holds the pickled warm-up (proxy sums, covariance, tuned scale, costs, modes) and
``warmup.json`` the settings it was found with (seed, model, start, options, a data fingerprint) and a
SHA-256 of the pickle. A resume with other settings is refused naming them, and a pickle whose digest
does not match is refused naming the file, as checkpoint chunks are. Only files this library wrote in the
user's own checkpoint directory are unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from minibatch_mcmc.samplers.checkpoint import setting_differences

WARMUP_PICKLE = "warmup.pkl"
WARMUP_SETTINGS = "warmup.json"


def save_warmup(directory: str | os.PathLike, settings: dict, payload: Any) -> Path | None:
    """Write ``payload`` and its ``settings`` atomically; warn and write nothing if it cannot be pickled."""
    path = Path(directory)
    try:
        blob = pickle.dumps(payload)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        warnings.warn(f"the warm-up could not be saved in {path} ({err}); a resumed run will redo it", stacklevel=3)
        return None
    path.mkdir(parents=True, exist_ok=True)
    for name, content in ((WARMUP_PICKLE, blob), (WARMUP_SETTINGS, json.dumps(
            {"settings": settings, "sha256": hashlib.sha256(blob).hexdigest()}, indent=1, sort_keys=True).encode())):
        tmp = path / f".{name}.tmp"
        tmp.write_bytes(content)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path / name)
    return path / WARMUP_PICKLE


def load_warmup(directory: str | os.PathLike, settings: dict) -> Any | None:
    """The saved warm-up if ``directory`` holds one found with ``settings``; ``None`` if it holds none."""
    path = Path(directory)
    if not (path / WARMUP_SETTINGS).is_file():
        return None
    saved = json.loads((path / WARMUP_SETTINGS).read_text())
    given = json.loads(json.dumps(settings, sort_keys=True))
    diffs = setting_differences(saved["settings"], given)
    if diffs:
        what = "; ".join(f"{k}: saved {json.dumps(a)}, this call {json.dumps(b)}" for k, a, b in diffs)
        raise ValueError(f"cannot resume with the warm-up saved in {path}: it was found with other settings ({what})")
    blob = (path / WARMUP_PICKLE).read_bytes()
    if hashlib.sha256(blob).hexdigest() != saved["sha256"]:
        raise ValueError(f"{path / WARMUP_PICKLE} does not match the digest in {WARMUP_SETTINGS}: it is corrupt or was replaced")
    return pickle.loads(blob)  # noqa: S301 - written by save_warmup, digest checked
