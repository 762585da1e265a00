"""Host buffers for a run's draws: allocated once for all its steps, each finished piece copied in.

Keeping each block's host arrays in a list and concatenating at the end held, besides the draws, a
Python object per array and, on the CPU, the XLA buffer each zero-copy ``np.asarray`` view kept alive:
RSS grew 9.8 KB per 20-step block of one chain whose draws and records take 940 B. Here every piece is copied into ``(chain, step, ...)`` arrays
sized for the whole run (``np.empty``: pages are touched only as steps are written) and the piece's own
arrays are dropped, so memory grows by the kept draws alone.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

PyTree = Any


class DrawBuffers(NamedTuple):
    """Draws and records of a whole run, each ``(chain, num_samples, ...)``; steps ``[0, done)`` written."""

    positions: list[np.ndarray]
    """Leaves of the position pytree."""
    records: dict[str, np.ndarray]


def allocate(pos: PyTree, recs: dict, num_samples: int) -> DrawBuffers:
    """Empty buffers for ``num_samples`` steps shaped like a piece's ``(step, chain, ...)`` positions and records."""

    def empty(a: Any) -> np.ndarray:
        shape = np.shape(a)
        return np.empty((shape[1], num_samples, *shape[2:]), np.asarray(a).dtype)

    return DrawBuffers([empty(a) for a in jax.tree_util.tree_leaves(pos)], {k: empty(v) for k, v in recs.items()})


def store(buffers: DrawBuffers | None, num_samples: int, start: int, pos: PyTree, recs: dict) -> DrawBuffers:
    """Copy a piece's ``(step, chain, ...)`` positions and records into steps ``[start, start + steps)``."""
    if buffers is None:
        buffers = allocate(pos, recs, num_samples)
    leaves = jax.tree_util.tree_leaves(pos)
    steps = np.shape(leaves[0])[0]
    for buf, a in zip(buffers.positions, leaves):
        buf[:, start : start + steps] = np.swapaxes(np.asarray(a), 0, 1)
    for k, buf in buffers.records.items():
        buf[:, start : start + steps] = np.swapaxes(np.asarray(recs[k]), 0, 1)
    return buffers


def block(buffers: DrawBuffers, start: int, end: int) -> tuple[list[np.ndarray], dict]:
    """Steps ``[start, end)`` in the ``(step, chain, ...)`` layout of a checkpoint chunk (views, not copies)."""

    def view(a: np.ndarray) -> np.ndarray:
        return np.swapaxes(a[:, start:end], 0, 1)

    return [view(a) for a in buffers.positions], {k: view(v) for k, v in buffers.records.items()}


def finished(buffers: DrawBuffers, done: int, treedef: Any) -> tuple[PyTree, dict]:
    """The first ``done`` steps as ``(chain, draw, ...)`` arrays: the buffers themselves when full, else copies."""

    def take(a: np.ndarray) -> np.ndarray:
        return a if done == a.shape[1] else np.ascontiguousarray(a[:, :done])

    return jax.tree_util.tree_unflatten(treedef, [take(a) for a in buffers.positions]), {
        k: take(v) for k, v in buffers.records.items()
    }
