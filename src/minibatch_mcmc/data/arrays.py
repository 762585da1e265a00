"""In-memory data source and the ``DataSource`` protocol the samplers read from."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.aligned import shareable
from minibatch_mcmc.data.host import HostData, is_host_data
from minibatch_mcmc.data.indexing import MAX_DATA
from minibatch_mcmc.data.planned import PlannedRows, planned_take

PyTree = Any


@runtime_checkable
class DataSource(Protocol):
    """What a sampler needs from a data set: its size and a gather of rows by index."""

    @property
    def n(self) -> int:
        """Number of data points ``N``."""
        ...

    def arrays(self) -> PyTree:
        """The pytree of arrays (leading axis ``N``) passed into jitted kernels."""
        ...


class ArrayData(NamedTuple):
    """A data set held in memory as a pytree of arrays sharing the leading axis ``N``."""

    tree: PyTree

    @property
    def n(self) -> int:
        """Number of data points ``N``."""
        return int(jax.tree_util.tree_leaves(self.tree)[0].shape[0])

    def arrays(self) -> PyTree:
        """The pytree of device arrays."""
        return self.tree


class RowsExcept(NamedTuple):
    """The rows of a data pytree outside the sorted index set ``rows``, renumbered ``0 .. N - S - 1`` in order.

    What a minibatch is drawn from when a few rows are evaluated apart (an exact stratum): ``take`` and
    ``slice_rows`` map positions through ``rest_index`` to the rows of ``tree`` (arrays or ``HostData``).
    """

    tree: PyTree
    rows: jax.Array


def rest_index(rows: jax.Array, j: jax.Array) -> jax.Array:
    """The row of the full data at position ``j`` of the rows outside the sorted set ``rows``."""
    rows = jnp.asarray(rows, jnp.int32)
    shifted = rows - jnp.arange(rows.shape[0], dtype=jnp.int32)  # rows before the k-th excluded one: shifted[k]
    return j + jnp.searchsorted(shifted, j, side="right").astype(jnp.asarray(j).dtype)


COPIES = "row_copies"
"""The column ``RowsRepeated`` adds to each row it gathers: how many times the row appears in the repeated population."""


class RowsRepeated(NamedTuple):
    """A population in which row ``i`` of the dict-of-columns ``tree`` appears ``copies_i`` times, ``M = sum_i copies_i``
    positions in all, row ``i`` at positions ``ends[i-1] .. ends[i] - 1``.

    What an importance-sampled minibatch is drawn from (``control_variates.importance``): a uniform draw of a position
    picks row ``i`` with probability ``copies_i / M``. ``take`` and ``slice_rows`` return the rows with their count in
    the column ``COPIES``.
    """

    tree: PyTree
    ends: jax.Array
    """Cumulative copies (int32, increasing, ``ends[-1] = M``)."""


class DistinctRows(NamedTuple):
    """The population's distinct rows: a position of each, its copies, and the cumulative copies that map a position
    to its row (an importance-sampled population, ``RowsRepeated``, holds row ``i`` at ``copies_i`` positions, each
    with the term ``r_i / copies_i``; any other population each row once, ``ends`` None)."""

    position: np.ndarray
    copies: np.ndarray
    ends: np.ndarray | None = None

    def of(self, positions: np.ndarray) -> np.ndarray:
        """The row of each position."""
        return positions if self.ends is None else np.searchsorted(self.ends, positions, side="right")


def distinct_rows(population: PyTree, n_pop: int) -> DistinctRows:
    """``DistinctRows`` of a population (``Estimator.population(data)``) of ``n_pop`` positions, on the host: what the
    posterior check's full reads evaluate (``diagnostics.twin_sums``)."""
    if isinstance(population, RowsRepeated):
        ends = np.asarray(population.ends, np.int64)
        return DistinctRows((ends - 1).astype(np.int32), np.diff(ends, prepend=0).astype(np.float32), ends)
    return DistinctRows(np.arange(n_pop, dtype=np.int32), np.ones(n_pop, np.float32))


def repeat_index(ends: jax.Array, j: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The row at position ``j`` of a ``RowsRepeated`` population and its number of copies."""
    ends = jnp.asarray(ends, jnp.int32)
    row = jnp.searchsorted(ends, jnp.asarray(j, jnp.int32), side="right").astype(jnp.int32)
    row = jnp.minimum(row, ends.shape[0] - 1)
    start = jnp.where(row > 0, ends[jnp.maximum(row - 1, 0)], 0)
    return row, ends[row] - start


def split_copies(rows: PyTree) -> tuple[PyTree, jax.Array | None]:
    """Rows gathered from a ``RowsRepeated`` population without their ``COPIES`` column, and that column (None for
    rows of any other source)."""
    if isinstance(rows, dict) and COPIES in rows:
        return {k: v for k, v in rows.items() if k != COPIES}, rows[COPIES]
    return rows, None


def gathers_rows(tree: PyTree) -> bool:
    """Whether a data pytree is read by gathering rows (``HostData``, ``RowsExcept``, ``RowsRepeated``) rather than as
    arrays."""
    return is_host_data(tree) or isinstance(tree, (RowsExcept, RowsRepeated, PlannedRows))


def row_ids(tree: PyTree, idx: jax.Array) -> jax.Array:
    """The rows of the underlying data at positions ``idx`` of a population (``RowsExcept``, ``RowsRepeated``, or the
    data itself: ``idx`` unchanged)."""
    if isinstance(tree, RowsExcept):
        return row_ids(tree.tree, rest_index(tree.rows, idx))
    if isinstance(tree, RowsRepeated):
        return row_ids(tree.tree, repeat_index(tree.ends, idx)[0])
    return idx


def take(tree: PyTree, idx: jax.Array) -> PyTree:
    """Gather rows ``idx`` of every leaf of a data pytree (a host read for out-of-core ``HostData``)."""
    if isinstance(tree, RowsExcept):
        return take(tree.tree, rest_index(tree.rows, idx))
    if isinstance(tree, RowsRepeated):
        row, copies = repeat_index(tree.ends, idx)
        return {**take(tree.tree, row), COPIES: copies}
    if is_host_data(tree):
        return tree.take(idx)
    if isinstance(tree, PlannedRows):
        return planned_take(tree, idx)
    return jax.tree_util.tree_map(lambda a: jnp.take(a, idx, axis=0), tree)


def slice_rows(tree: PyTree, start: jax.Array | int, size: int) -> PyTree:
    """Contiguous rows ``[start, start + size)`` of every leaf (``start`` may be traced, ``size`` static)."""
    if isinstance(tree, (RowsExcept, RowsRepeated, PlannedRows)):
        return take(tree, start + jnp.arange(size, dtype=jnp.int32))
    if is_host_data(tree):
        return tree.slice(start, size)
    if isinstance(start, (int, np.integer)):
        return jax.tree_util.tree_map(lambda a: a[int(start) : int(start) + size], tree)
    return jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, 0), tree)


def validate_data(tree: PyTree) -> int:
    """Check a data pytree (same leading size, numeric, finite) and return ``N``.

    An out-of-core ``HostData`` is checked by streaming over it in blocks (never loaded whole),
    once: a source opened with ``check_finite=False`` keeps only the per-step non-finite check.
    """
    if is_host_data(tree):
        return tree.n if tree.validated else tree.validate()
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError("data is empty: expected an array or a pytree of arrays with a leading axis N")
    sizes = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = jax.tree_util.keystr(path) or "data"
        arr = np.asarray(leaf)
        if arr.ndim == 0:
            raise ValueError(f"data leaf {name} is a scalar; every leaf needs a leading axis of length N")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise ValueError(f"data leaf {name} has dtype {arr.dtype}; expected a numeric dtype")
        if np.issubdtype(arr.dtype, np.inexact):
            bad = ~np.isfinite(arr)
            if bad.any():
                first = np.argwhere(bad)[0]
                raise ValueError(
                    f"data leaf {name} has a non-finite value {arr[tuple(first)]} at index {tuple(int(i) for i in first)};"
                    " NaN and inf are not allowed in data"
                )
        sizes.append((name, arr.shape[0]))
    n = sizes[0][1]
    for name, size in sizes[1:]:
        if size != n:
            raise ValueError(f"data leaves disagree on N: {sizes[0][0]} has {n} rows but {name} has {size}")
    if n < 1:
        raise ValueError("data has N=0 rows; at least one data point is required")
    if n > MAX_DATA:
        raise ValueError(f"data has N={n} rows; at most {MAX_DATA} are supported")
    return int(n)


def from_pandas(data: Any) -> Any:
    """A pandas ``DataFrame`` as ``{column: array}``, a ``Series`` as its array; anything else unchanged."""
    kind = type(data)
    if not kind.__module__.startswith("pandas"):
        return data
    if kind.__name__ == "DataFrame":
        return {str(c): data[c].to_numpy() for c in data.columns}
    return data.to_numpy() if kind.__name__ == "Series" else data


def as_data_source(data: PyTree | DataSource) -> ArrayData | HostData:
    """Wrap arrays (or an existing source) as a validated ``ArrayData``; out-of-core ``HostData`` stays on the host.

    A pandas ``DataFrame`` becomes ``{column name: array}`` (a ``Series`` its array). Aligned read-only numpy arrays are
    shared with JAX on the CPU (``to_jax``); writable ones are copied."""
    data = from_pandas(data)
    if isinstance(data, ArrayData):
        tree = data.tree
    elif isinstance(data, DataSource) and not isinstance(data, (np.ndarray, jax.Array)):
        tree = data.arrays()
    else:
        tree = data
    if is_host_data(tree):
        validate_data(tree)
        return tree
    validate_data(tree)
    tree = jax.tree_util.tree_map(to_jax, tree)
    return ArrayData(tree)


def to_jax(leaf: Any) -> jax.Array:
    """A data leaf as a JAX array: on the CPU a read-only numpy array ``data.aligned`` calls aligned is shared, not
    copied (``jax.device_put``); any other is copied (``jnp.asarray`` copies every numpy array)."""
    if isinstance(leaf, jax.Array):
        return leaf
    leaf = np.asarray(leaf)
    return jax.device_put(leaf) if shareable(leaf) else jnp.asarray(leaf)
