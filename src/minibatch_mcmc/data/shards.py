"""Row partitions of an out-of-core source over the processes of ``jax.distributed``, and the cross-process step of a pass.

With ``P = jax.process_count()`` processes, process ``p`` owns one contiguous range of rows ``[lo_p, hi_p)``
of an out-of-core source: ``p * N // P`` to ``(p + 1) * N // P`` of a memory-mapped ``.npy``/``.npz``, whole
row groups (across files) of a Parquet source, cut at the group starts nearest those rows. The partitioned
source still reports the global ``N`` and global row numbers, but reads (and, at open, validates) only its
own rows. For many Parquet files, ``open_parquet_files`` gives each process whole files and opens only their footers.

Scattered rows (a minibatch, a subsample: ``take``) may belong to any process. Every process asks for the same rows at
the same point of the same program (same keys), so a gather is one exchange (``fetch_rows``): each process reads the
requested rows it owns, and one all-gather of those rows gives every process all of them, bit for bit what one
process reading the whole table gets (first a check, by one small all-gather, that every process asked for the same
rows: a read made out of step is an error in every process, never another row). Contiguous reads
(``slice_rows``, the chunks of a pass) stay within the process's own rows: a read of another process's row there is
an error naming both, so a pass not yet written per process fails rather than reading the whole table.

The streamed passes of ``data/passes.py`` see a partitioned source through ``local_span``: each process
reduces its own rows, then one all-gather per pass brings every process's partial result to every process,
and they are combined in process order, so every process holds the same result (to the rounding of
combining ``P`` partial results in place of one running sum). The all-gather moves the partial results as
raw bytes (``multihost_utils.process_allgather`` of ``uint8``), so float64 host sums stay float64 with
``jax_enable_x64`` off; inside a jitted pass it is an ordered ``io_callback``.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from jax.experimental import io_callback, multihost_utils

from minibatch_mcmc.data.host import HostData, HostReader, is_host_data
from minibatch_mcmc.data.memmap import PathLike, open_npy
from minibatch_mcmc.data.parquet import ParquetReader, open_parquet, parquet_files

PyTree = Any


class Partition(NamedTuple):
    """Process ``index`` of ``count`` owns the global rows ``[lo, hi)``."""

    index: int
    count: int
    lo: int
    hi: int


def even_bounds(n: int, count: int) -> np.ndarray:
    """Row boundaries ``b_0 = 0 <= ... <= b_P = n`` with ``b_p = p * n // P`` (sizes differ by at most one)."""
    return np.arange(count + 1, dtype=np.int64) * n // count


def group_bounds(starts: np.ndarray, count: int) -> np.ndarray:
    """Boundaries on row-group starts ``starts`` (ending with ``N``): for each ``p``, the start nearest ``p * N / P``."""
    starts = np.asarray(starts, np.int64)
    ideal = even_bounds(int(starts[-1]), count)
    return starts[np.abs(starts[None, :] - ideal[:, None]).argmin(axis=1)]


class PartitionReader:
    """The rows ``[lo, hi)`` of a host reader, addressed by their global numbers; other processes' rows come from them
    (``gather``, through ``fetch_rows``), contiguous reads of them are refused."""

    def __init__(self, inner: HostReader, part: Partition, bounds: np.ndarray, n: int | None = None):
        self.inner = inner
        self.part = part
        self.bounds = np.asarray(bounds, np.int64)
        """Every process's first row and the end: process ``p`` owns ``[bounds[p], bounds[p + 1])``."""
        self.shift = 0 if n is None else part.lo  # global row - shift = the inner reader's row (0: it numbers all N)
        self.n = int(inner.n) if n is None else int(n)
        self.specs = inner.specs
        self.treedef = inner.treedef
        self.validated = False
        self.lock = threading.Lock()  # one exchange at a time: callbacks of one program may run on several threads

    def check(self, lo: int, hi: int) -> None:
        """Raise naming the row and its owner when ``[lo, hi)`` leaves this process's rows."""
        p = self.part
        if lo < hi and (lo < p.lo or hi > p.hi):
            row = lo if lo < p.lo else hi - 1
            raise ValueError(
                f"row {row} of {self.inner!r} belongs to another process: process {p.index} of {p.count} reads only rows "
                f"[{p.lo}, {p.hi}). A contiguous read stays within its process's rows (a pass over N reduces each "
                "process's rows, then combines them: data.passes, host_reduce); scattered rows (take) come from their "
                f"owners only when all {p.count} processes run (jax.distributed.initialize), or open the whole source "
                "with open_npy/open_parquet"
            )

    def own(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` (global numbers, all this process's own) from the inner reader."""
        return self.inner.gather(idx - self.shift)

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` (global numbers): this process's own read here, the others' fetched from them (``fetch_rows``)."""
        if jax.process_count() == self.part.count > 1:
            with self.lock:
                return fetch_rows(self, np.asarray(idx, np.int64))
        if idx.size:
            self.check(int(idx.min()), int(idx.max()) + 1)
        return self.own(idx)

    def read_range(self, start: int, stop: int) -> list[np.ndarray]:
        """Contiguous rows ``[start, stop)`` (this process's own; an empty range only checks the files)."""
        self.check(start, stop)
        if start == stop:
            return self.inner.read_range(0, 0)
        return self.inner.read_range(start - self.shift, stop - self.shift)

    def release(self) -> None:
        """Drop mapped pages where the inner reader maps its file."""
        if hasattr(self.inner, "release"):
            self.inner.release()

    def __repr__(self) -> str:
        p = self.part
        return f"rows [{p.lo}, {p.hi}) of process {p.index}/{p.count} of {self.inner!r}"


def partition_rows(
    source: HostData, check_finite: bool = True, process_index: int | None = None, process_count: int | None = None
) -> HostData:
    """This process's rows of an out-of-core source (``open_npy``/``open_npz``/``open_parquet``), validated alone.

    ``process_index``/``process_count`` default to ``jax.process_index()``/``jax.process_count()``; a pass over the
    result needs ``process_count`` JAX processes. Open the source with ``check_finite=False`` so that no process
    scans the whole table; ``check_finite`` here scans this process's rows only.
    """
    if not is_host_data(source) or isinstance(source.reader, PartitionReader):
        raise ValueError(
            f"partition_rows takes a whole out-of-core source (open_npy, open_npz, open_parquet); got {source!r}"
        )
    count = jax.process_count() if process_count is None else int(process_count)
    index = jax.process_index() if process_index is None else int(process_index)
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"process_index={index} must lie in [0, process_count={count})")
    reader = source.reader
    if isinstance(reader, ParquetReader):
        starts = reader.row_group_starts()
        bounds = group_bounds(starts, count)
        unit = f"{len(starts) - 1} row groups"
        fix = "write smaller row groups (pyarrow.parquet.write_table(..., row_group_size=...)) or use fewer processes"
    else:
        bounds = even_bounds(source.n, count)
        unit, fix = f"{source.n} rows", "use fewer processes"
    if np.any(np.diff(bounds) < 1):
        raise ValueError(f"{reader!r} has {unit}: too few to give each of the {count} processes at least one; {fix}")
    part = Partition(index, count, int(bounds[index]), int(bounds[index + 1]))
    data = HostData(PartitionReader(reader, part, bounds))
    data.validate(check_finite=check_finite, rows=(part.lo, part.hi))
    if check_finite and isinstance(reader, ParquetReader):
        reader.check_statistics()  # footer statistics only: no row is read
    return data


def open_npy_rows(paths: PathLike | dict[str, PathLike], check_finite: bool = True) -> HostData:
    """``open_npy`` reading (and validating) only this process's contiguous rows of the file(s)."""
    return partition_rows(open_npy(paths, check_finite=False), check_finite)


def open_parquet_rows(
    path: Any, columns: Any = None, *, filesystem: Any = None, cache_bytes: int = 256 << 20, check_finite: bool = True
) -> HostData:
    """``open_parquet`` reading (and validating) only this process's row groups; other files' footers are read, no rows."""
    source = open_parquet(path, columns, filesystem=filesystem, cache_bytes=cache_bytes, check_finite=False)
    return partition_rows(source, check_finite)


def open_parquet_files(
    path: Any, columns: Any = None, *, filesystem: Any = None, cache_bytes: int = 256 << 20, check_finite: bool = True
) -> HostData:
    """This process's share of a directory (or list) of Parquet files: files ``p F // P`` to ``(p + 1) F // P`` of the
    ``F`` sorted files, whose footers alone it opens; one all-gather of the processes' row counts numbers the rows.

    For many files on object storage, where ``open_parquet_rows`` would have every process read every footer. The
    processes' shares are as even as the files' sizes: split large files into more files to balance them.
    """
    fs, files = parquet_files(path, filesystem)
    count, index = jax.process_count(), jax.process_index()
    if len(files) < count:
        raise ValueError(
            f"{path!r} holds {len(files)} Parquet files: too few to give each of the {count} processes one; "
            "use open_parquet_rows (split by row groups) or fewer processes"
        )
    bounds = even_bounds(len(files), count)
    source = open_parquet(
        files[bounds[index] : bounds[index + 1]], columns, filesystem=fs, cache_bytes=cache_bytes, check_finite=False
    )
    sizes = allgather_host(np.asarray(source.n, np.int64))  # every process opens its files first: one collective
    lo = int(sizes[:index].sum())
    ends = np.concatenate([[0], np.cumsum(sizes)])
    data = HostData(
        PartitionReader(source.reader, Partition(index, count, lo, lo + source.n), ends, n=int(sizes.sum()))
    )
    data.validate(check_finite=check_finite, rows=(lo, lo + source.n))
    if check_finite:
        source.reader.check_statistics()
    return data


def partition_of(data: PyTree) -> Partition | None:
    """The partition of a row-partitioned source; None for any other data (read whole by every process)."""
    if is_host_data(data) and isinstance(data.reader, PartitionReader):
        return data.reader.part
    return None


def local_rows(data: PyTree, n: int) -> tuple[int, int]:
    """The rows ``[lo, hi)`` of ``n`` this process reads in a pass: its own of a row-partitioned source, else all.

    For a loop over rows written outside ``data/passes.py``: loop over these, then ``sum_processes`` (or
    ``combine_processes``) its result once, where ``local_span(data, n)`` is not None."""
    part = local_span(data, n)
    return (0, n) if part is None else (part.lo, part.hi)


def smallest_share(data: PyTree, n: int) -> int:
    """The fewest rows any process reduces in a pass over ``n`` rows of ``data`` (``n`` itself in one process):
    chunks of at most this many rows have one shape in every process (one compilation)."""
    if local_span(data, n) is None:
        return n
    return int(np.diff(data.reader.bounds).min())


def local_span(data: PyTree, n: int) -> Partition | None:
    """The partition a pass over ``n`` rows of ``data`` covers, or None for a pass over all rows in this process
    (any data but a row-partitioned source, or one split over a single process: today's pass, unchanged)."""
    part = partition_of(data)
    if part is None or part.count == 1:
        return None
    if n != data.n:
        raise ValueError(
            f"a pass over n={n} rows of a row-partitioned source of N={data.n} rows: passes cover all N rows"
        )
    if jax.process_count() != part.count:
        raise ValueError(
            f"the source was split over {part.count} processes but JAX runs {jax.process_count()}; call "
            "jax.distributed.initialize(...) in every process before opening it"
        )
    return part


def allgather_host(tree: PyTree) -> PyTree:
    """Every process's copy of each leaf (numpy, any dtype, bit for bit), stacked on a new leading process axis."""
    count = jax.process_count()

    def gather(leaf: Any) -> np.ndarray:
        a = np.array(leaf, order="C")  # keeps a 0-d leaf 0-d (np.ascontiguousarray would make it 1-d)
        raw = np.asarray(multihost_utils.process_allgather(a.reshape(-1).view(np.uint8)))
        return raw.reshape(count, -1).view(a.dtype).reshape((count,) + a.shape)

    return jax.tree_util.tree_map(gather, tree)


def agree(failure: Exception | None, what: str) -> None:
    """One all-gather of whether each process could ``what``: a process that failed raises its own error, and every
    other process one naming those that failed, so none waits in a later collective for a process that has stopped."""
    if jax.process_count() > 1:
        ok = np.asarray(multihost_utils.process_allgather(np.asarray(failure is None, np.int32))).reshape(-1)
        if failure is None and not ok.all():
            raise RuntimeError(
                f"process {np.flatnonzero(ok == 0).tolist()} could not {what} (its own error says why); this "
                f"process ({jax.process_index()}) stops too"
            )
    if failure is not None:
        raise failure


def agreed(what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, then ``agree`` on whether it worked in every process: its value, or an error in every process."""
    try:
        value = fn()
    except Exception as err:  # the others must learn of it before this process stops
        agree(err, what)
        raise
    agree(None, what)
    return value


def combine_processes(tree: PyTree, combine: Callable[[PyTree, PyTree], PyTree]) -> PyTree:
    """``combine`` of every process's ``tree``, folded in process order (the same result in every process).

    Outside ``jit`` the all-gather runs here; inside, an ordered ``io_callback`` runs it, once per pass.
    """
    count = jax.process_count()
    leaves = jax.tree_util.tree_leaves(tree)
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        shapes = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct((count,) + x.shape, x.dtype), tree)
        gathered = io_callback(allgather_host, shapes, tree, ordered=True)
    else:
        gathered = allgather_host(tree)
    parts = [jax.tree_util.tree_map(lambda a, p=p: a[p], gathered) for p in range(count)]
    return functools.reduce(combine, parts)


def sum_processes(tree: PyTree) -> PyTree:
    """Leafwise float64 sum, in process order, of every process's numpy ``tree`` (host float64 sums)."""
    return combine_processes(tree, lambda a, b: jax.tree_util.tree_map(np.add, a, b))


def request_digest(idx: np.ndarray) -> np.ndarray:
    """``(number of rows, 64-bit digest of the row numbers)``: what every process compares before an exchange."""
    digest = np.frombuffer(
        hashlib.blake2b(np.ascontiguousarray(idx, np.int64).tobytes(), digest_size=8).digest(), np.int64
    )
    return np.concatenate([np.asarray([idx.size], np.int64), digest])


def fetch_rows(reader: PartitionReader, idx: np.ndarray) -> list[np.ndarray]:
    """Rows ``idx`` of every column in every process: each reads the ones it owns, one all-gather brings all of them.

    Every process must call it with the same ``idx`` (the same program with the same keys does): a small all-gather
    of ``request_digest`` checks that first, and a mismatch is an error in every process rather than a hang or rows
    of another request."""
    if idx.size and (idx.min() < 0 or idx.max() >= reader.n):  # the same rows in every process: all raise here
        raise IndexError(f"row index out of range [0, {reader.n}) in a read of {reader!r}")
    asked = allgather_host(request_digest(idx))
    if np.any(asked != asked[0]):
        p = reader.part
        raise RuntimeError(
            f"process {p.index} of {p.count} asked for {idx.size} rows of {reader.inner!r} while the processes asked for "
            f"(rows, digest) {asked.tolist()}: the processes' programs read rows out of step (different keys, data or "
            "settings in different processes?)"
        )
    owner = np.searchsorted(reader.bounds, idx, side="right") - 1
    mine = owner == reader.part.index
    got = reader.own(idx[mine])
    cols = []
    for spec, block in zip(reader.specs, got):
        col = np.zeros((idx.size,) + tuple(spec.row_shape), np.dtype(spec.dtype))  # the same layout in every process
        col[mine] = np.asarray(block, col.dtype).reshape((-1,) + tuple(spec.row_shape))
        cols.append(col)
    raw = np.concatenate([c.reshape(-1).view(np.uint8) for c in cols]) if cols else np.zeros(0, np.uint8)
    every = allgather_host(raw)  # (P, bytes): one exchange for all columns
    out, offset, pick = [], 0, (owner, np.arange(idx.size))
    for c in cols:
        size = c.nbytes
        out.append(every[:, offset : offset + size].copy().view(c.dtype).reshape((every.shape[0],) + c.shape)[pick])
        offset += size
    return out
