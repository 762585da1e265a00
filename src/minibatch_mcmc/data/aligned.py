"""Host arrays JAX shares instead of copying (issue 31: a GLMM's rows held once at ``N = 10^7``).

On the CPU, ``jnp.asarray``/``jax.device_put`` of a C-contiguous numpy array whose data start at a multiple of
``ALIGNMENT`` bytes hands XLA the array's own memory; any other array is copied. numpy's large allocations start 16
bytes past a page boundary, so the rows a fit builds itself (``interop.formula``, ``models.glmm.glmm_data``) are
allocated here, aligned and read-only, and ``data.arrays.as_data_source`` then shares them; a writable array (a
user's, which the user could change during a run) is copied.
"""

from __future__ import annotations

import numpy as np

ALIGNMENT = 64
"""Bytes: the start of an array XLA's CPU client aliases rather than copies (measured: docs/benchmarks.md)."""


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data start at a multiple of ``ALIGNMENT``."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def is_aligned(values: np.ndarray) -> bool:
    """Whether JAX can share ``values``' memory: C-contiguous, starting at a multiple of ``ALIGNMENT``."""
    return bool(values.flags.c_contiguous) and values.ctypes.data % ALIGNMENT == 0


def aligned(values, dtype) -> np.ndarray:
    """``values`` as a ``dtype`` array JAX can share: itself where it already is one, else an aligned copy (cast as
    ``astype`` casts), made read-only (``frozen``: the library's own, so ``data.arrays.to_jax`` shares it)."""
    values = np.asarray(values)
    if values.dtype == np.dtype(dtype) and is_aligned(values):
        return values
    out = aligned_empty(values.shape, dtype)
    np.copyto(out, values, casting="unsafe")
    return frozen(out)


def frozen(values: np.ndarray) -> np.ndarray:
    """``values`` (an array the library made) made read-only: JAX may share it, as nothing can write to it."""
    values.flags.writeable = False
    return values


def shareable(values: np.ndarray) -> bool:
    """Whether JAX may share ``values``' memory: aligned (``is_aligned``) and read-only, so that no caller can change
    the rows under a run (a writable array, a user's, is copied)."""
    return is_aligned(values) and not values.flags.writeable
