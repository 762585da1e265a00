"""Out-of-core data: a pytree node with no array leaves whose rows are gathered on the host.

A ``HostData`` wraps a host reader (memory-mapped ``.npy``/``.npz``, Parquet shards). It has no
array leaves, so it passes through ``jit``, ``scan`` and ``vmap`` unchanged as the ``data``
argument of a kernel; ``take(data, idx)`` then becomes a ``jax.pure_callback`` that reads only the
requested rows. Under ``vmap`` over chains the callback receives the indices of all chains at once
(``vmap_method="broadcast_all"``), so one host read serves every chain of a step.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.indexing import MAX_DATA

PyTree = Any

SCAN_CHUNK = 1 << 18
"""Rows per block when a source is validated by streaming over it."""


class LeafSpec(NamedTuple):
    """Name, per-row shape and dtype of one column of an out-of-core source."""

    name: str
    row_shape: tuple[int, ...]
    dtype: np.dtype


class HostReader(Protocol):
    """What ``HostData`` needs from a reader: size, column layout and row reads."""

    n: int
    specs: tuple[LeafSpec, ...]
    treedef: Any

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` (1-d int64) of every column, in ``specs`` order."""
        ...

    def read_range(self, start: int, stop: int) -> list[np.ndarray]:
        """Contiguous rows ``[start, stop)`` of every column, in ``specs`` order."""
        ...


class DataChangedError(RuntimeError):
    """A file of an out-of-core source was changed, replaced or removed while a run read it."""

    result: Any = None
    """The draws finished before the change (a ``SampleResult`` marked interrupted), set by ``sample``."""
    finished: Any = None
    """The driver's finished blocks (internal hand-over to ``sample``)."""


class FileStamp(NamedTuple):
    """What identifies the version of a data file a source was opened on: size, modification time, inode."""

    path: str
    size: int
    mtime_ns: int
    inode: int


def file_stamp(path: str | os.PathLike) -> FileStamp:
    """The stamp of ``path`` now."""
    st = os.stat(path)
    return FileStamp(os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino)


def check_unchanged(stamps: Sequence[FileStamp], where: str) -> None:
    """Raise ``DataChangedError`` naming the first file whose size, mtime or inode is not the stamped one.

    One ``stat`` per file: cheap enough before every host read, and it comes before any mapped page
    is touched, so a file truncated in place (``np.save`` to the same path) is reported, not a SIGBUS.
    """
    for stamp in stamps:
        try:
            now = file_stamp(stamp.path)
        except FileNotFoundError:
            raise DataChangedError(
                f"data file {stamp.path} of {where} was removed during the run; restore it or open the new data and "
                "start again (a run with checkpoint_dir keeps its finished blocks on disk)"
            ) from None
        if now != stamp:
            what = ", ".join(
                f"{name} {a} -> {b}" for name, a, b in zip(("size", "mtime_ns", "inode"), stamp[1:], now[1:]) if a != b
            )
            raise DataChangedError(
                f"data file {stamp.path} of {where} changed during the run ({what}); the rows read so far came from the "
                "old version: open the new data and start again (a run with checkpoint_dir keeps its finished blocks on disk)"
            )


@contextlib.contextmanager
def host_read_errors(data: PyTree) -> Iterator[None]:
    """Inside: a host read that failed because a data file changed is re-raised as ``DataChangedError`` naming
    the file, rather than as JAX's runtime error that wraps the callback's traceback."""
    try:
        yield
    except (
        jax.errors.JaxRuntimeError,
        ValueError,
    ):  # how JAX reports a failed callback: by its runtime, or as ValueError
        if is_host_data(data):
            data.reader.read_range(0, 0)  # every read checks the files first: raises DataChangedError if one changed
        raise


def _device_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype JAX uses for a host column (float64 -> float32 unless x64 is enabled)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def check_specs(specs: Sequence[LeafSpec], n: int, where: str) -> None:
    """Reject non-numeric columns and out-of-range sizes with a message naming the column."""
    if not specs:
        raise ValueError(f"{where} has no columns; expected at least one numeric column")
    for spec in specs:
        dt = np.dtype(spec.dtype)
        if not (np.issubdtype(dt, np.number) or dt == np.bool_):
            raise ValueError(f"column {spec.name!r} of {where} has dtype {dt}; expected a numeric dtype")
    if n < 1:
        raise ValueError(f"{where} has N=0 rows; at least one data point is required")
    if n > MAX_DATA:
        raise ValueError(f"{where} has N={n} rows; at most {MAX_DATA} are supported")


def check_finite_block(spec: LeafSpec, block: np.ndarray, start: int) -> None:
    """Raise naming the first row of ``block`` (global row ``start + i``) holding NaN or inf."""
    if not np.issubdtype(block.dtype, np.inexact):
        return
    bad = ~np.isfinite(block)
    if bad.any():
        first = np.argwhere(bad)[0]
        raise ValueError(
            f"column {spec.name!r} has a non-finite value {block[tuple(first)]} at row {start + int(first[0])}"
            f" (index {(start + int(first[0]),) + tuple(int(i) for i in first[1:])}); NaN and inf are not allowed in data"
        )


class HostData:
    """An out-of-core data set: a leafless pytree node holding a host reader as static data."""

    __slots__ = ("reader",)

    def __init__(self, reader: HostReader):
        self.reader = reader

    @property
    def validated(self) -> bool:
        """Whether the reader's columns (and, unless skipped, its values) have been checked."""
        return bool(getattr(self.reader, "validated", False))

    @property
    def n(self) -> int:
        """Number of data points ``N``."""
        return int(self.reader.n)

    def arrays(self) -> "HostData":
        """Itself: the node is what flows into jitted kernels as ``data``."""
        return self

    def result_shapes(self, lead: tuple[int, ...]) -> PyTree:
        """``ShapeDtypeStruct`` pytree of a gather with index shape ``lead``."""
        leaves = [jax.ShapeDtypeStruct(lead + s.row_shape, _device_dtype(s.dtype)) for s in self.reader.specs]
        return jax.tree_util.tree_unflatten(self.reader.treedef, leaves)

    def _to_tree(self, cols: list[np.ndarray], lead: tuple[int, ...]) -> PyTree:
        out = [
            np.ascontiguousarray(c, dtype=_device_dtype(s.dtype)).reshape(lead + s.row_shape)
            for c, s in zip(cols, self.reader.specs)
        ]
        return jax.tree_util.tree_unflatten(self.reader.treedef, out)

    def rows(self, idx: np.ndarray) -> PyTree:
        """Rows ``idx`` (any shape) of every column read on the host now: numpy arrays of the dtypes JAX gives them."""
        idx = np.asarray(idx)
        return self._to_tree(self.reader.gather(idx.reshape(-1).astype(np.int64)), idx.shape)

    def take(self, idx: jax.Array) -> PyTree:
        """Rows ``idx`` (any shape) of every column, read on the host by a ``pure_callback``."""
        idx = jnp.asarray(idx, jnp.int32)

        def gather(i: np.ndarray) -> PyTree:
            i = np.asarray(i)
            return self._to_tree(self.reader.gather(i.reshape(-1).astype(np.int64)), i.shape)

        if not isinstance(idx, jax.core.Tracer):  # an eager read runs here, so its errors are raised as they are
            return jax.tree_util.tree_map(jnp.asarray, gather(np.asarray(idx)))
        return jax.pure_callback(gather, self.result_shapes(idx.shape), idx, vmap_method="broadcast_all")

    def slice(self, start: jax.Array | int, size: int) -> PyTree:
        """Contiguous rows ``[start, start + size)`` of every column (a host read of one block)."""

        def read(s: np.ndarray) -> PyTree:
            s = np.asarray(s)
            blocks = [self.reader.read_range(int(v), int(v) + size) for v in s.reshape(-1)]
            if s.ndim == 0:  # one block: its columns as read (a stack would copy them)
                return self._to_tree(blocks[0], (size,))
            cols = [np.stack([b[j] for b in blocks]) for j in range(len(self.reader.specs))]
            return self._to_tree(cols, s.shape + (size,))

        if not isinstance(start, jax.core.Tracer):  # a host read, then a transfer: no device op per block
            return jax.device_put(read(np.asarray(start)))
        start = jnp.asarray(start, jnp.int32)
        return jax.pure_callback(read, self.result_shapes(start.shape + (size,)), start, vmap_method="broadcast_all")

    def validate(self, check_finite: bool = True, chunk: int = SCAN_CHUNK, rows: tuple[int, int] | None = None) -> int:
        """Check columns and sizes, and (``check_finite``) stream over every row (or the rows ``[lo, hi)``) for NaN/inf."""
        check_specs(self.reader.specs, self.n, repr(self.reader))
        lo, hi = (0, self.n) if rows is None else rows
        if check_finite:
            for start in range(lo, hi, chunk):
                cols = self.reader.read_range(start, min(hi, start + chunk))
                for spec, block in zip(self.reader.specs, cols):
                    check_finite_block(spec, block, start)
                release = getattr(self.reader, "release", None)
                if release is not None:
                    release()
        self.reader.validated = True
        return self.n

    def __repr__(self) -> str:
        return f"HostData({self.reader!r})"


jax.tree_util.register_pytree_node(HostData, lambda h: ((), h.reader), lambda reader, _: HostData(reader))


def is_host_data(tree: PyTree) -> bool:
    """Whether a data pytree is an out-of-core ``HostData`` node."""
    return isinstance(tree, HostData)


def data_errors(fn: Callable) -> Callable:
    """``fn(model, data, ...)`` with a data file changed under it reported as ``DataChangedError``, from every phase."""

    @functools.wraps(fn)
    def wrapped(model: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        with host_read_errors(data):
            return fn(model, data, *args, **kwargs)

    return wrapped
