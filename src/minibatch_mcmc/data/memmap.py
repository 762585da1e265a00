"""Memory-mapped ``.npy`` files and uncompressed ``.npz`` archives as out-of-core data sources.

``np.load(..., mmap_mode="r")`` maps a ``.npy`` file but silently reads ``.npz`` members whole,
so members of an uncompressed (``np.savez``) archive are mapped here at their byte offset inside
the zip file (local file header, then the ``.npy`` header parsed with ``numpy.lib.format``).
Compressed members (``np.savez_compressed``) cannot be mapped and are refused.

Mapped pages a gather touches count towards the process's resident memory, so the reader drops
them (``madvise(MADV_DONTNEED)``; they stay in the OS page cache) once the file-backed resident set
would otherwise grow past ``resident_bytes`` since the last drop: a gather reads ``PIECE_ROWS`` rows at a time and
reads ``/proc/self/statm`` after each piece and at its end (elsewhere it drops after every ``resident_bytes / FOLIO_BYTES`` rows), so
resident memory stays bounded however large the file and the gather are. A fault maps a whole page-cache folio (up to
``FOLIO_BYTES``): one gather of 1024 random rows of a 2 GB file mapped 1.4 GB before gathers were cut into pieces. Contiguous reads (validation scans, full-data passes) use ``pread`` instead of the map, so
they get the kernel's sequential readahead and leave nothing mapped.

Every read first compares each file's size, mtime and inode with those it was opened with (one
``stat``), and a changed or removed file stops the run with ``DataChangedError`` naming it before
the map is touched: a file truncated in place never ends in SIGBUS.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from pathlib import Path
from typing import Any, Mapping

import jax
import numpy as np
from numpy.lib import format as npy_format

from minibatch_mcmc.data.aligned import aligned_empty
from minibatch_mcmc.data.host import HostData, LeafSpec, check_specs, check_unchanged, file_stamp

PathLike = str | os.PathLike

PIECE_ROWS = 64
"""Rows a gather reads between two looks at the resident set."""
FOLIO_BYTES = 2 << 20
"""The most one row's page fault may map (a PMD-sized page-cache folio)."""
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"


def _local_path(path: PathLike) -> Path:
    """A local filesystem path (``file://`` accepted); other protocols cannot be memory-mapped."""
    text = os.fspath(path)
    if "://" in text:
        proto, rest = text.split("://", 1)
        if proto != "file":
            raise ValueError(
                f"cannot memory-map {text!r}: only local paths (or file://) can be mapped; "
                "use open_parquet for object stores"
            )
        text = rest
    p = Path(text)
    if not p.is_file():
        raise ValueError(f"data file {text!r} does not exist")
    return p


def _read_npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype from a ``.npy`` header at the file's current position."""
    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            return npy_format.read_array_header_1_0(f)
        return npy_format.read_array_header_2_0(f)
    except ValueError as err:
        raise ValueError(f"not a valid .npy header: {err}") from None


def _map_array(path: Path, offset: int, shape, fortran: bool, dtype: np.dtype, where: str) -> np.memmap:
    """A read-only memory map of an array stored at ``offset`` in ``path``."""
    if dtype.hasobject:
        raise ValueError(f"{where} holds Python objects (dtype {dtype}); expected a numeric dtype")
    if len(shape) == 0:
        raise ValueError(f"{where} is a scalar; every column needs a leading axis of length N")
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if os.path.getsize(path) < need:
        raise ValueError(f"{where} is truncated: its header promises {need - offset} bytes of data")
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype)  # mmap cannot map zero bytes; check_specs reports N=0
    mm = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape), order="F" if fortran else "C")
    raw = getattr(mm, "_mmap", None)
    if raw is not None and hasattr(mmap, "MADV_RANDOM"):
        raw.madvise(mmap.MADV_RANDOM)
    return mm


def _map_npy(path: Path) -> np.memmap:
    """Map one ``.npy`` file."""
    with open(path, "rb") as f:
        try:
            shape, fortran, dtype = _read_npy_header(f)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        offset = f.tell()
    return _map_array(path, offset, shape, fortran, dtype, f"array file {str(path)!r}")


def _map_npz(path: Path) -> dict[str, np.memmap]:
    """Map every member of an uncompressed ``.npz`` archive by its byte offset."""
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{str(path)!r} is not an .npz (zip) archive") from None
    out: dict[str, np.memmap] = {}
    with zf, open(path, "rb") as f:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if info.compress_type != zipfile.ZIP_STORED:
                raise ValueError(
                    f"member {name!r} of {str(path)!r} is compressed (np.savez_compressed) and cannot be memory-mapped; "
                    "write it with np.savez or as separate .npy files"
                )
            f.seek(info.header_offset)
            fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
            if fields[0] != _LOCAL_MAGIC:
                raise ValueError(f"member {name!r} of {str(path)!r} has a corrupt zip header")
            f.seek(info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10])
            try:
                shape, fortran, dtype = _read_npy_header(f)
            except ValueError as err:
                raise ValueError(f"member {name!r} of {str(path)!r}: {err}") from None
            out[name] = _map_array(path, f.tell(), shape, fortran, dtype, f"member {name!r} of {str(path)!r}")
    if not out:
        raise ValueError(f"{str(path)!r} has no arrays")
    return out


def _file_resident() -> int | None:
    """File-backed resident bytes of this process (``/proc/self/statm``), or None where unavailable."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[2]) * mmap.PAGESIZE
    except (OSError, IndexError, ValueError):
        return None


class MemmapReader:
    """Row reads from memory-mapped arrays sharing a leading axis ``N``."""

    def __init__(self, tree: Any, where: str, resident_bytes: int = 256 << 20, watch_files: bool = True):
        """``watch_files=False``: no check of the files' stamps before a read (files this process writes, ``data.spill``)."""
        leaves_with_path, self.treedef = jax.tree_util.tree_flatten_with_path(tree)
        self.columns = [leaf for _, leaf in leaves_with_path]
        self.specs = tuple(
            LeafSpec(jax.tree_util.keystr(p) or "data", tuple(a.shape[1:]), a.dtype) for p, a in leaves_with_path
        )
        self.where = where
        sizes = [(s.name, a.shape[0]) for s, a in zip(self.specs, self.columns)]
        for name, size in sizes[1:]:
            if size != sizes[0][1]:
                raise ValueError(
                    f"columns of {where} disagree on N: {sizes[0][0]} has {sizes[0][1]} rows but {name} has {size}"
                )
        self.n = int(sizes[0][1]) if sizes else 0
        check_specs(self.specs, self.n, where)
        files = dict.fromkeys(a.filename for a in self.columns if isinstance(a, np.memmap) and a.filename)
        self.stamps = tuple(file_stamp(f) for f in files) if watch_files else ()
        self.resident_bytes = int(resident_bytes)
        self._touched = 0
        self._base = _file_resident()
        # without /proc, assume a fault may map up to FOLIO_BYTES (large page-cache folios) per gathered row
        self.check_rows = PIECE_ROWS if self._base is not None else max(1, self.resident_bytes // FOLIO_BYTES)
        self.validated = False

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` of every column: each distinct row read once, in file order (page faults on the mapping do the I/O).

        Chains or starts vmapped over one shared minibatch hand every copy of it to one callback (9 copies in the
        warm-up's Adam search: 17 of its 21 CPU s at 10^7 rows), and rows in file order fault about 4x less CPU time."""
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise IndexError(f"row index out of range [0, {self.n})")
        rows, back = np.unique(idx, return_inverse=True)
        if rows.size == idx.size and np.array_equal(rows, idx):
            return self.gather_sorted(idx)
        return [c[back.reshape(-1)] for c in self.gather_sorted(rows)]

    def gather_sorted(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` of every column, in the order given."""
        check_unchanged(self.stamps, self.where)
        out = [np.empty((idx.size,) + a.shape[1:], a.dtype) for a in self.columns]
        piece = min(PIECE_ROWS, self.check_rows)
        for start in range(0, idx.size, piece):
            for o, a in zip(out, self.columns):
                np.take(a, idx[start : start + piece], axis=0, out=o[start : start + piece])
            self._touched += min(piece, idx.size - start)
            if self._touched >= self.check_rows:
                self.drop_if_grown()
        if self._touched and self._base is not None:  # and at the end, so no gather leaves more than the bound mapped
            self.drop_if_grown()
        check_unchanged(self.stamps, self.where)  # a change during the read: the rows may mix two versions
        return out

    def drop_if_grown(self) -> None:
        """Drop the mapped pages when one more piece could take the file-backed resident set past ``resident_bytes``."""
        self._touched = 0
        now = _file_resident()
        if now is None or self._base is None or now - self._base > self.resident_bytes - PIECE_ROWS * FOLIO_BYTES:
            self.release()

    def read_range(self, start: int, stop: int) -> list[np.ndarray]:
        """Contiguous rows ``[start, stop)`` of every column, read with ``pread`` (kernel readahead, no mapped pages)."""
        check_unchanged(self.stamps, self.where)
        return [self._read_column(a, start, stop) for a in self.columns]

    @staticmethod
    def _read_column(a: np.ndarray, start: int, stop: int) -> np.ndarray:
        if not (isinstance(a, np.memmap) and a.flags.c_contiguous and a.filename):
            return np.array(a[start:stop])
        row_bytes = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
        count = (stop - start) * row_bytes
        fd = os.open(a.filename, os.O_RDONLY)
        out = aligned_empty((stop - start,) + a.shape[1:], a.dtype)  # not zero-filled, as a bytearray is
        try:
            view, done = memoryview(out.reshape(-1).view(np.uint8)), 0
            while done < count:
                got = os.preadv(fd, [view[done:]], a.offset + start * row_bytes + done)
                if got <= 0:
                    raise ValueError(f"{a.filename} is shorter than its header says")
                done += got
        finally:
            os.close(fd)
        return out

    def release(self) -> None:
        """Drop the mapped pages from this process's resident set (they stay in the page cache)."""
        self._touched = 0
        if hasattr(mmap, "MADV_DONTNEED"):
            for a in self.columns:
                raw = getattr(a, "_mmap", None)
                if raw is not None:
                    raw.madvise(mmap.MADV_DONTNEED)
        self._base = _file_resident()

    def __repr__(self) -> str:
        return f"MemmapReader({self.where}, N={self.n})"


def open_npy(paths: PathLike | Mapping[str, PathLike], check_finite: bool = True) -> HostData:
    """Memory-map ``.npy`` file(s): one path gives one array, a dict of paths gives a dict of columns.

    ``check_finite=False`` skips the streaming NaN/inf scan (the per-step non-finite check remains).
    """
    if isinstance(paths, Mapping):
        if not paths:
            raise ValueError("open_npy got an empty mapping; expected {column name: path to .npy}")
        tree: Any = {k: _map_npy(_local_path(p)) for k, p in paths.items()}
        where = "npy files " + ", ".join(f"{k}={os.fspath(p)}" for k, p in paths.items())
    else:
        tree = _map_npy(_local_path(paths))
        where = f"npy file {os.fspath(paths)}"
    data = HostData(MemmapReader(tree, where))
    data.validate(check_finite=check_finite)
    return data


def open_npz(path: PathLike, check_finite: bool = True) -> HostData:
    """Memory-map the members of an uncompressed ``.npz`` archive as a dict of columns."""
    tree = _map_npz(_local_path(path))
    data = HostData(MemmapReader(tree, f"npz archive {os.fspath(path)}"))
    data.validate(check_finite=check_finite)
    return data
