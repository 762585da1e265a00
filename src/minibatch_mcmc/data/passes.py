"""Streamed passes over all ``N`` rows of a data source in contiguous chunks.

One reduction serves every full-data quantity the library needs (the exact log acceptance ratio,
MHSubLhd's range constant, full-data gradients, the control-variate sums of gradients and
Hessians): ``part(rows)`` maps a chunk to a pytree of partial results and ``combine`` folds them.
Chunks are read through ``slice_rows``, so an out-of-core source streams block by block and a
sharded array is reduced where it lives. A row-partitioned source (``data/shards.py``, several
``jax.distributed`` processes) is reduced over each process's own rows, then its partial results are
combined across processes once per pass; any other data take the single-process path unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.arrays import gathers_rows, slice_rows
from minibatch_mcmc.data.shards import Partition, combine_processes, local_rows, local_span, smallest_share

PyTree = Any

DEFAULT_CHUNK = 16384
"""Rows per chunk of a streamed pass."""


def full_data_reduce(
    part: Callable[[PyTree], PyTree],
    combine: Callable[[PyTree, PyTree], PyTree],
    initial: PyTree,
    data: PyTree,
    n: int,
    chunk: int = DEFAULT_CHUNK,
) -> PyTree:
    """``combine(... combine(initial, part(chunk_0)) ..., part(chunk_last))`` over contiguous chunks of ``n`` rows.

    A data set of exactly one chunk is reduced by ``part`` alone (no loop, no ``initial``).
    """
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r} must be a positive number of rows")
    rows = local_span(data, n)
    if rows is not None:
        return combine_processes(reduce_rows(part, combine, initial, data, chunk, rows), combine)
    n_full, rem = divmod(n, chunk)
    if n_full == 1 and rem == 0:
        return part(slice_rows(data, 0, n) if gathers_rows(data) else data)
    acc = initial
    if n_full:

        def body(i: jax.Array, carry: PyTree) -> PyTree:
            return combine(carry, part(slice_rows(data, i * chunk, chunk)))

        acc = jax.lax.fori_loop(0, n_full, body, acc)
    if rem:
        acc = combine(acc, part(slice_rows(data, n_full * chunk, rem)))
    return acc


def reduce_rows(
    part: Callable[[PyTree], PyTree],
    combine: Callable[[PyTree, PyTree], PyTree],
    initial: PyTree,
    data: PyTree,
    chunk: int,
    rows: Partition,
) -> PyTree:
    """``full_data_reduce``'s fold over this process's rows ``[rows.lo, rows.hi)`` only (chunks from ``rows.lo``)."""
    n_full, rem = divmod(rows.hi - rows.lo, chunk)
    acc = initial
    if n_full:

        def body(i: jax.Array, carry: PyTree) -> PyTree:
            return combine(carry, part(slice_rows(data, rows.lo + i * chunk, chunk)))

        acc = jax.lax.fori_loop(0, n_full, body, acc)
    if rem:
        acc = combine(acc, part(slice_rows(data, rows.lo + n_full * chunk, rem)))
    return acc


def full_data_sum(
    fn: Callable[[PyTree], jax.Array], data: PyTree, n: int, chunk: int = DEFAULT_CHUNK
) -> tuple[jax.Array, jax.Array]:
    """``sum_i fn(rows)_i`` over all ``n`` rows, and whether any term was non-finite."""

    def part(rows: PyTree) -> tuple[jax.Array, jax.Array]:
        v = fn(rows)
        return jnp.sum(v), jnp.any(~jnp.isfinite(v))

    def combine(a, b):
        return a[0] + b[0], a[1] | b[1]

    return full_data_reduce(part, combine, (jnp.zeros((), jnp.float32), jnp.zeros((), bool)), data, n, chunk)


def full_data_max_abs(
    fn: Callable[[PyTree], jax.Array], data: PyTree, n: int, chunk: int = DEFAULT_CHUNK
) -> tuple[jax.Array, jax.Array]:
    """``max_i |fn(rows)_i|`` over all ``n`` rows, and whether any term was non-finite."""

    def part(rows: PyTree) -> tuple[jax.Array, jax.Array]:
        v = fn(rows)
        return jnp.max(jnp.abs(v)), jnp.any(~jnp.isfinite(v))

    def combine(a, b):
        return jnp.maximum(a[0], b[0]), a[1] | b[1]

    return full_data_reduce(part, combine, (jnp.zeros((), jnp.float32), jnp.zeros((), bool)), data, n, chunk)


def full_data_tree_sum(fn: Callable[[PyTree], PyTree], data: PyTree, n: int, chunk: int = DEFAULT_CHUNK) -> PyTree:
    """Leafwise sum of ``fn(rows)`` (a pytree of per-chunk sums, e.g. a gradient sum) over all ``n`` rows."""
    lo, hi = local_rows(data, n)
    shapes = jax.eval_shape(fn, slice_rows(data, lo, min(hi - lo, chunk)))
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    return full_data_reduce(fn, lambda a, b: jax.tree_util.tree_map(jnp.add, a, b), zeros, data, n, chunk)


class Chunk(NamedTuple):
    """One chunk of a host-side pass: its rows, the global number of its first row, and the first row not already
    covered by the chunk before (rows ``start <= r < first`` were, and weigh 0: see ``Chunk.fresh``)."""

    rows: PyTree
    start: int
    first: int

    def fresh(self, size: int) -> np.ndarray:
        """Per row of the chunk (``size`` rows), whether it is new: ``start + j >= first``."""
        return np.arange(self.start, self.start + size) >= self.first


def host_add(a: PyTree, b: PyTree) -> PyTree:
    """Leafwise numpy sum (float64 host sums stay float64)."""
    return jax.tree_util.tree_map(np.add, a, b)


def chunk_plan(lo: int, hi: int, size: int, same_size: bool = True) -> Iterator[tuple[int, int, int]]:
    """``(start, length, first)`` per chunk covering rows ``lo <= r < hi``, ``first`` the chunk's first row not covered
    before. ``same_size``: every chunk ``size`` rows, the last ending at ``hi`` and overlapping its predecessor; else
    the last one shorter."""
    done = lo
    while done < hi:
        start = min(done, hi - size) if same_size else done
        length = size if same_size else min(size, hi - start)
        yield start, length, done
        done = start + length


def host_reduce(
    fold: Callable[[PyTree, Chunk], PyTree],
    initial: PyTree,
    data: PyTree,
    n: int,
    chunk: int = DEFAULT_CHUNK,
    *,
    merge: Callable[[PyTree, PyTree], PyTree] = host_add,
    final: Callable[[PyTree], PyTree] = lambda acc: acc,
    same_size: bool = True,
) -> PyTree:
    """A pass over all ``n`` rows on the host: ``final(fold(... fold(initial, chunk_0) ..., chunk_last))`` over contiguous
    chunks, and over a row-partitioned source (``data/shards.py``) each process's ``final`` result ``merge``d across
    the processes in process order by one all-gather (``final`` gives a result of the same shapes in every process).

    ``same_size``: every chunk has ``min(chunk, rows)`` rows, the last one ending at the last row and overlapping
    its predecessor (``Chunk.first`` says where its new rows start), so a jitted chunk function compiles once (over
    several processes the size is also capped by the smallest process's rows, so every process compiles the same one);
    else the last chunk is shorter. One JAX process (or any other data): today's single pass, unchanged.
    """
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r} must be a positive number of rows")
    rows = local_span(data, n)
    lo, hi = (0, n) if rows is None else (rows.lo, rows.hi)
    size = min(chunk, smallest_share(data, n))
    acc = initial
    for start, length, first in chunk_plan(lo, hi, size, same_size):
        acc = fold(acc, Chunk(slice_rows(data, start, length), start, first))
    out = final(acc)
    return out if rows is None else combine_processes(out, merge)


def host_tree_sum(fn: Callable[[PyTree], PyTree], data: PyTree, n: int, chunk: int = DEFAULT_CHUNK) -> PyTree:
    """Leafwise float64 sum of ``fn(rows)`` over contiguous chunks, accumulated on the host.

    For one-off passes whose sums must be accurate beyond float32 (a control variate's gradient and
    Hessian sums): ``fn`` runs jitted on each chunk, the partial sums are added in numpy float64 (a
    row-partitioned source: each process's, then the processes' totals in process order: ``host_reduce``).
    """
    part = jax.jit(fn)

    def fold(total: PyTree, c: Chunk) -> PyTree:
        piece = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), jax.device_get(part(c.rows)))
        return piece if total is None else host_add(total, piece)

    return host_reduce(fold, None, data, n, chunk, same_size=False)


def same_size_chunks(n: int, chunk: int = DEFAULT_CHUNK) -> list[tuple[int, int, np.ndarray]]:
    """``(first, size, keep)`` covering ``n`` rows in chunks of one ``size`` (so a jitted chunk function compiles once):
    the last chunk ends at row ``n`` and overlaps the one before, ``keep`` masks out its rows already covered."""
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r} must be a positive number of rows")
    return [
        (start, length, np.arange(start, start + length) >= first)
        for start, length, first in chunk_plan(0, n, min(chunk, n))
    ]
