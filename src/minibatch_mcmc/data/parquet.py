"""Parquet files (one file or a directory of shards, on any fsspec filesystem) as an out-of-core source.

Row counts come from the Parquet footers, so opening a source reads no data. A global row index is
mapped to its row group by ``searchsorted`` over the row-group start offsets of all shards; a
gather decodes the row groups its rows fall in (only the requested columns) and keeps the most
recently used ones in a cache bounded in bytes. Where the decoded table is larger than that cache, a random minibatch
would decode nearly every row group at every step; each row group is then written, the first time it is decoded, to a
spill file on local disk (``data/spill.py``; ``spill_dir``), from which its rows are read by a memory map. Scalar numeric columns give ``(N,)`` leaves and
list / fixed-size-list columns of numbers give ``(N, d)`` leaves.

Nothing is read silently wrong: at open, row groups whose min/max statistics are non-finite or absurd
(``|value| > ABSURD``) for a float column are refused; every decoded row group is checked against
its statistics (a corrupt page decodes to values outside them); and local files are checked for
changes (size, mtime, inode) before every read, stopping the run with ``DataChangedError``.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from typing import Any, Sequence

import jax
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from minibatch_mcmc.data.host import HostData, LeafSpec, check_specs, check_unchanged, file_stamp
from minibatch_mcmc.data.spill import Spill, row_bytes, spill_room

ABSURD = 1e30
"""Largest magnitude believed of a float column's statistics; larger is taken as a corrupt file."""


def _filesystem(path: str, filesystem: Any | None) -> tuple[Any, str]:
    """The fsspec filesystem and the path within it (``memory://``, ``s3://``, ``file://`` or local)."""
    import fsspec

    if filesystem is not None:
        return filesystem, path
    fs, inner = fsspec.core.url_to_fs(path)
    return fs, inner


def _shard_paths(fs: Any, path: str) -> list[str]:
    """A single Parquet file, or the sorted ``*.parquet`` files under a directory."""
    if not fs.exists(path):
        raise ValueError(f"Parquet path {path!r} does not exist")
    if fs.isdir(path):
        files = sorted(p for p in fs.find(path) if p.endswith(".parquet"))
        if not files:
            raise ValueError(f"directory {path!r} holds no .parquet files")
        return files
    return [path]


def parquet_files(
    path: str | os.PathLike | Sequence[str | os.PathLike], filesystem: Any | None = None
) -> tuple[Any, list[str]]:
    """The fsspec filesystem and the sorted Parquet files of a path, a directory of shards or a list (a listing: no file is read)."""
    paths = [os.fspath(path)] if isinstance(path, (str, os.PathLike)) else [os.fspath(p) for p in path]
    if not paths:
        raise ValueError("open_parquet got no paths")
    fs, first = _filesystem(paths[0], filesystem)
    return fs, [f for p in paths for f in _shard_paths(fs, first if p == paths[0] else _filesystem(p, fs)[1])]


def _leaf_spec(field: pa.Field, where: str) -> tuple[np.dtype, str]:
    """Element dtype and kind ('scalar' or 'list') of a numeric (list) column; raise otherwise."""
    t = field.type
    kind = "scalar"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t, kind = t.value_type, "list"
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        raise ValueError(
            f"column {field.name!r} of {where} has type {field.type}; expected a numeric column or a list of numbers"
        )
    return np.dtype(t.to_pandas_dtype()), kind


def _column_numpy(col: pa.ChunkedArray | pa.Array, kind: str, width: int, name: str, start: int) -> np.ndarray:
    """A decoded column as numpy (``(rows,)`` or ``(rows, width)``), refusing nulls and ragged lists."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        row = int(np.flatnonzero(~np.asarray(arr.is_valid()))[0])
        raise ValueError(f"column {name!r} has a null at row {start + row}; nulls are not allowed in data")
    if kind == "scalar":
        return arr.to_numpy(zero_copy_only=False)
    if not pa.types.is_fixed_size_list(arr.type):
        lengths = np.asarray(pc.list_value_length(arr))
        if lengths.size and (lengths.min() != width or lengths.max() != width):
            row = int(np.flatnonzero(lengths != width)[0])
            raise ValueError(
                f"column {name!r} has a list of length {lengths[row]} at row {start + row}; expected {width}"
            )
    values = arr.flatten()
    if values.null_count:
        raise ValueError(f"column {name!r} has a null list element near row {start}; nulls are not allowed in data")
    return values.to_numpy(zero_copy_only=False).reshape(len(arr), width)


def _float_bounds(pf: pq.ParquetFile, group: int, names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """The min/max statistics of the float columns ``names`` in one row group (where the file has them)."""
    rg = pf.metadata.row_group(group)
    out = {}
    for j in range(rg.num_columns):
        col = rg.column(j)
        name = col.path_in_schema.split(".")[0]
        st = col.statistics
        if name in names and col.physical_type in ("FLOAT", "DOUBLE") and st is not None and st.has_min_max:
            out[name] = (float(st.min), float(st.max))
    return out


def _is_local(fs: Any) -> bool:
    """Whether an fsspec filesystem is the local one (whose files can be stat'ed cheaply)."""
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


class ParquetReader:
    """Row reads from Parquet shards by row group, with an LRU cache of decoded row groups."""

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike],
        columns: Sequence[str] | None = None,
        filesystem: Any | None = None,
        cache_bytes: int = 256 << 20,
        spill_dir: str | os.PathLike | None | bool = None,
    ):
        paths = [os.fspath(path)] if isinstance(path, (str, os.PathLike)) else [os.fspath(p) for p in path]
        if not paths:
            raise ValueError("open_parquet got no paths")
        fs, first = _filesystem(paths[0], filesystem)
        files: list[str] = []
        for p in paths:
            files += _shard_paths(fs, first if p == paths[0] else _filesystem(p, fs)[1])
        self.where = f"Parquet {paths[0]!r}" + (f" ({len(files)} shards)" if len(files) > 1 else "")
        self.stamps = tuple(file_stamp(f) for f in files) if _is_local(fs) else ()
        self._files = [pq.ParquetFile(fs.open(f, "rb")) for f in files]
        self._file_names = files
        schema = self._files[0].schema_arrow
        names = list(columns) if columns is not None else list(schema.names)
        missing = [c for c in names if c not in schema.names]
        if missing:
            raise ValueError(f"{self.where} has no column(s) {missing}; available: {schema.names}")
        for f, name in zip(self._files[1:], files[1:]):
            other = f.schema_arrow
            for c in names:
                if c not in other.names or other.field(c).type != schema.field(c).type:
                    raise ValueError(f"shard {name!r} does not match the first shard's schema for column {c!r}")
        self.names = names
        kinds = [_leaf_spec(schema.field(c), self.where) for c in names]
        self._kinds = [k for _, k in kinds]
        # row-group table over all shards: (shard, row group, global start)
        table = [
            (s, g, f.metadata.row_group(g).num_rows) for s, f in enumerate(self._files) for g in range(f.num_row_groups)
        ]
        table = [t for t in table if t[2] > 0]
        self._groups = [(s, g) for s, g, _ in table]
        counts = np.array([c for _, _, c in table], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        self.n = int(self._starts[-1])
        widths = []
        for c, (_, kind) in zip(names, kinds):
            if kind == "scalar":
                widths.append(0)
                continue
            t = schema.field(c).type
            widths.append(t.list_size if pa.types.is_fixed_size_list(t) else self._first_list_length(c))
        self._widths = widths
        self.specs = tuple(
            LeafSpec(c, () if k == "scalar" else (w,), dt) for c, (dt, k), w in zip(names, kinds, widths)
        )
        self._bounds = [_float_bounds(self._files[s], g, names) for s, g in self._groups]
        self.treedef = jax.tree_util.tree_structure({c: 0 for c in names})
        # specs are in the sorted-key order of the dict pytree
        order = sorted(range(len(names)), key=lambda i: names[i])
        self._slot = {i: j for j, i in enumerate(order)}  # names index -> position in specs
        self.specs = tuple(self.specs[i] for i in order)
        check_specs(self.specs, self.n, self.where)
        self.cache_bytes = int(cache_bytes)
        self._cache: OrderedDict[int, list[np.ndarray]] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self.validated = False
        self.decoded_groups = 0
        self._spill_dir = spill_dir
        self._spill: Spill | None = None
        self._spill_checked = False

    def _first_list_length(self, column: str) -> int:
        """Length of the first list in a variable-length list column (checked on every decode)."""
        if not self._groups:
            return 0
        s, g = self._groups[0]
        col = self._files[s].read_row_group(g, columns=[column]).column(0)
        return int(pc.list_value_length(col.chunk(0))[0].as_py())

    def _decode(self, k: int) -> list[np.ndarray]:
        """Columns (in ``names`` order) of global row group ``k``, from the cache or decoded."""
        with self._lock:
            hit = self._cache.get(k)
            if hit is not None:
                self._cache.move_to_end(k)
                return hit
        s, g = self._groups[k]
        with self._io_lock:
            table = self._files[s].read_row_group(g, columns=self.names)
        cols = [
            _column_numpy(table.column(i), kind, w, c, int(self._starts[k]))
            for i, (c, kind, w) in enumerate(zip(self.names, self._kinds, self._widths))
        ]
        for c, col in zip(self.names, cols):
            self._check_decoded(k, c, col)
        spill = self._spill_store()
        if spill is not None:
            spill.write(k, int(self._starts[k]), cols)
        size = sum(c.nbytes for c in cols)
        with self._lock:
            self.decoded_groups += 1
            if (
                spill is None and k not in self._cache
            ):  # a spilled group is read from the spill: no second copy in memory
                self._cache[k] = cols
                self._cached += size
            while self._cached > self.cache_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached -= sum(c.nbytes for c in old)
        return cols

    @property
    def cached_bytes(self) -> int:
        """Bytes of decoded row groups held in memory (the LRU cache)."""
        return self._cached

    @property
    def spill_folder(self) -> str | None:
        """The directory holding the decoded row groups (None: no spill)."""
        return None if self._spill is None else self._spill.dir

    def _spill_store(self) -> Spill | None:
        """The spill (made on first need): only where the decoded table exceeds ``cache_bytes`` and ``spill_dir`` is not
        False; a file system without room for it gets a warning and no spill."""
        with self._lock:
            if self._spill_checked:
                return self._spill
            self._spill_checked = True
            need = self.n * row_bytes([self.specs[self._slot[i]] for i in range(len(self.names))])
            if self._spill_dir is False or need <= self.cache_bytes:
                return None
            folder, room = spill_room(None if self._spill_dir in (None, True) else self._spill_dir, need)
            mib = f"{need / 2**20:,.0f} MiB"
            if not room:
                warnings.warn(
                    f"{self.where}: its {self.n:,} rows decode to {mib}, more than cache_bytes={self.cache_bytes:,}, "
                    f"and {folder} has not that much disk free (plus 1 GiB) to keep the decoded row groups: every random "
                    "minibatch will decode nearly every row group (slow). Give open_parquet a spill_dir with room, or "
                    "convert the table to .npy and use open_npy",
                    stacklevel=2,
                )
                return None
            specs = [self.specs[self._slot[i]] for i in range(len(self.names))]
            self._spill = Spill(specs, self.n, len(self._groups), folder, self.where)
            warnings.warn(
                f"{self.where}: its {self.n:,} rows decode to {mib}, more than cache_bytes={self.cache_bytes:,}, so "
                "random minibatches would decode nearly every row group at every step; each row group is decoded once "
                f"and kept in {self._spill.dir} (up to {mib} of disk, removed with the source), its rows then read "
                "from there. spill_dir= chooses the folder, spill_dir=False decodes on every read",
                stacklevel=2,
            )
            return self._spill

    def _group_name(self, k: int) -> str:
        """Row group ``k`` by file, its index in the file and its global rows."""
        s, g = self._groups[k]
        return f"{self._file_names[s]} row group {g} (rows [{self._starts[k]}, {self._starts[k + 1]}))"

    def _check_decoded(self, k: int, name: str, col: np.ndarray) -> None:
        """Refuse a decoded float column with values outside its row group's statistics: a corrupt page."""
        if name not in self._bounds[k] or not col.size:
            return
        lo, hi = self._bounds[k][name]
        got_lo, got_hi = np.fmin.reduce(col, axis=None), np.fmax.reduce(col, axis=None)
        if got_lo < lo or got_hi > hi:
            raise ValueError(
                f"column {name!r} of {self._group_name(k)} decodes to values in [{got_lo}, {got_hi}] but the file's "
                f"statistics say [{lo}, {hi}]: a page of the file is corrupt"
            )

    def check_statistics(self) -> None:
        """Refuse, naming file, row group and column, float statistics that are non-finite or beyond ``ABSURD``."""
        for k, bounds in enumerate(self._bounds):
            for name, (lo, hi) in bounds.items():
                if not (np.isfinite(lo) and np.isfinite(hi) and max(abs(lo), abs(hi)) <= ABSURD):
                    raise ValueError(
                        f"column {name!r} of {self._group_name(k)} has statistics min={lo}, max={hi}: impossible for "
                        f"data (non-finite or beyond {ABSURD:g} in magnitude); the file is corrupt or holds no data values"
                    )

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` of every column: decode each touched row group once, then take its rows."""
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise IndexError(f"row index out of range [0, {self.n})")
        check_unchanged(self.stamps, self.where)
        group = np.searchsorted(self._starts, idx, side="right") - 1
        out = [np.empty((idx.size,) + self.specs[j].row_shape, self.specs[j].dtype) for j in range(len(self.names))]
        order = np.argsort(group, kind="stable")
        spilled = []
        for sel in np.split(order, np.flatnonzero(np.diff(group[order])) + 1):
            if not sel.size:
                continue
            k = int(group[sel[0]])
            if self._spill is not None and self._spill.done[k] and k not in self._cache:
                spilled.append(sel)  # read from the spill's map below, with the other spilled groups' rows
                continue
            cols = self._decode(k)
            local = idx[sel] - self._starts[k]
            for i, col in enumerate(cols):
                out[self._slot[i]][sel] = col[local]
        if spilled:
            sel = np.concatenate(spilled)
            for i, col in enumerate(self._spill.gather(idx[sel])):
                out[self._slot[i]][sel] = col
        return out

    def read_range(self, start: int, stop: int) -> list[np.ndarray]:
        """Contiguous rows ``[start, stop)`` of every column: where all their row groups are spilled, one contiguous read
        of the spill's files (a streamed pass reads a block as from a ``.npy``), else ``gather``."""
        spill = self._spill
        if spill is not None and 0 <= start < stop <= self.n:
            first, last = np.searchsorted(self._starts, [start, stop - 1], side="right") - 1
            if spill.done[first : last + 1].all():
                check_unchanged(self.stamps, self.where)
                cols = spill.reader.read_range(start, stop)
                return [cols[i] for i in sorted(self._slot, key=self._slot.get)]
        return self.gather(np.arange(start, stop, dtype=np.int64))

    def row_group_starts(self) -> np.ndarray:
        """The first global row of every (non-empty) row group, then ``N``: where a row partition may cut."""
        return self._starts.copy()

    def __repr__(self) -> str:
        return f"ParquetReader({self.where}, N={self.n})"


def open_parquet(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    columns: Sequence[str] | None = None,
    *,
    filesystem: Any | None = None,
    cache_bytes: int = 256 << 20,
    check_finite: bool = True,
    spill_dir: str | os.PathLike | None | bool = None,
) -> HostData:
    """Open a Parquet file, a directory of shards or a list of files (any fsspec URL) as a dict of columns.

    ``check_finite=False`` skips the streaming NaN/inf/null scan and the check of the float columns'
    statistics (the per-step non-finite check and the check of decoded values against the statistics remain).
    Where the decoded table exceeds ``cache_bytes``, each row group is decoded once and kept on local disk in a
    temporary directory under ``spill_dir`` (default: the system's temporary directory; ``False``: no spill, every
    random minibatch decodes the row groups it touches), with a warning naming the directory and the disk it takes.
    """
    reader = ParquetReader(path, columns, filesystem, cache_bytes, spill_dir)
    data = HostData(reader)
    data.validate(check_finite=check_finite)
    if check_finite:
        reader.check_statistics()
    return data
