"""Rows read on the host before a compiled block runs: an out-of-core run with no host callback in its program.

A program that calls back to the host (``jax.pure_callback``) is never written to JAX's persistent compilation cache,
so a sampler reading an out-of-core source row by row from inside its compiled block compiled that block again in
every process. A step's first minibatch comes from its key alone (``AcceptanceTest.first_rows``), so the host can read
those rows before the block runs and hand them in as an ordinary input: a ``PlannedRows`` per step and chain, its row
ids sorted. ``take`` on it looks the asked rows up among the planned ones and returns the very rows a host read
returns; a row that is not there (a minibatch grown past its first chunk) gets a planned row in its place, so the
caller checks from the step's records that it read no more than its planned rows, and else runs it again on the
source itself (``samplers.planned_runner``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any


class PlannedRows(NamedTuple):
    """The rows planned for one step of one chain (or, with leading axes, for many): sorted row ids and their rows."""

    ids: jax.Array
    """Row ids of the source, sorted, distinct (int32, ``(..., R)``)."""
    rows: PyTree
    """The source's rows at ``ids``: every column with leading axes ``(..., R)``."""


def planned_take(planned: PlannedRows, idx: jax.Array) -> PyTree:
    """Rows ``idx`` (any shape) looked up among the planned rows (a row not planned: a planned row in its place)."""
    idx = jnp.asarray(idx, jnp.int32)
    at = jnp.clip(jnp.searchsorted(planned.ids, idx.reshape(-1)), 0, planned.ids.shape[0] - 1)
    return jax.tree_util.tree_map(lambda a: jnp.take(a, at, axis=0).reshape(idx.shape + a.shape[1:]), planned.rows)


def read_planned(gather: Any, ids: np.ndarray) -> PlannedRows:
    """``PlannedRows`` of the planned row ids ``ids`` (``(steps, chains, R)``, each step's in the order its test reads
    them), read by ``gather(ids[t]) -> rows`` one step at a time (the reads a read-ahead ``data.prefetch`` plans) on
    the host, then sorted by row id within each chain."""
    ids = np.asarray(ids, np.int64)
    order = np.argsort(ids, axis=-1, kind="stable")
    rows = jax.tree_util.tree_map(lambda *a: np.stack(a), *[gather(step) for step in ids])

    def in_order(a: np.ndarray) -> np.ndarray:
        return np.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - order.ndim)), axis=order.ndim - 1)

    return PlannedRows(np.take_along_axis(ids, order, -1).astype(np.int32), jax.tree_util.tree_map(in_order, rows))
