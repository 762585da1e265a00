"""Decoded Parquet row groups kept on local disk, so a random minibatch reads rows, not whole row groups.

A Parquet row group decodes only whole: a minibatch of ``m`` random rows of a table of ``G`` row groups touches about
``min(m, G)`` of them, so once the decoded table is larger than the reader's in-memory cache every minibatch decodes
nearly every row group (at 10^7 rows, 153 row groups of 64k rows: the whole file per step). A ``Spill`` holds one raw
file per column, of the table's decoded size, sparse until written: each row group is written to its rows' place the
first time it is decoded (the validation scan at ``open_parquet`` writes them all), and later reads of its rows are
gathers from a memory map of those files (``memmap.MemmapReader``: resident memory bounded, each distinct row read
once). The rows are the same values the row group decodes to, so every estimator, draw and key is unchanged: a spilled
source samples what the same table as ``.npy`` samples. The files live in a temporary directory (``spill_dir``, else
the system's), removed when the reader is garbage-collected or the process exits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from typing import Sequence

import numpy as np

from minibatch_mcmc.data.host import LeafSpec
from minibatch_mcmc.data.memmap import MemmapReader

SPARE_DISK = 1 << 30
"""Bytes of the spill directory's file system left free after the spill (else no spill, with a warning)."""


def row_bytes(specs: Sequence[LeafSpec]) -> int:
    """Decoded bytes of one row over the columns ``specs``."""
    return sum(np.dtype(s.dtype).itemsize * int(np.prod(s.row_shape, dtype=np.int64)) for s in specs)


def spill_room(where: str | os.PathLike | None, need: int) -> tuple[str, bool]:
    """The directory a spill of ``need`` bytes would use, and whether its file system has that much plus ``SPARE_DISK`` free."""
    folder = os.fspath(where) if where is not None else tempfile.gettempdir()
    return folder, shutil.disk_usage(folder).free >= need + SPARE_DISK


class Spill:
    """Columns of ``n`` rows (``specs``, in the reader's column order) on disk, filled one row group at a time."""

    def __init__(self, specs: Sequence[LeafSpec], n: int, groups: int, folder: str, where: str):
        self.dir = tempfile.mkdtemp(prefix="minibatch-mcmc-spill-", dir=folder)
        weakref.finalize(self, shutil.rmtree, self.dir, True)
        self.widths = [np.dtype(s.dtype).itemsize * int(np.prod(s.row_shape, dtype=np.int64)) for s in specs]
        maps = []
        for j, (spec, width) in enumerate(zip(specs, self.widths)):
            path = os.path.join(self.dir, f"column-{j}.raw")
            with open(path, "wb") as f:
                f.truncate(n * width)  # sparse: disk is used as row groups are written
            maps.append(np.memmap(path, np.dtype(spec.dtype), "r", shape=(n,) + tuple(spec.row_shape)))
        self.paths = [m.filename for m in maps]
        self.reader = MemmapReader(maps, f"the spill of {where} in {self.dir}", watch_files=False)
        self.done = np.zeros(groups, bool)
        self._lock = threading.Lock()

    def write(self, k: int, start: int, cols: Sequence[np.ndarray]) -> None:
        """Row group ``k``'s decoded columns (first row ``start``) to their place in the files; then its rows read from here."""
        with self._lock:
            if self.done[k]:
                return
            for path, width, col in zip(self.paths, self.widths, cols):
                data = np.ascontiguousarray(col).view(np.uint8).reshape(-1)
                fd = os.open(path, os.O_WRONLY)
                try:
                    done = 0
                    while done < data.size:
                        done += os.pwrite(fd, data[done:], start * width + done)
                finally:
                    os.close(fd)
            self.done[k] = True

    def gather(self, idx: np.ndarray) -> list[np.ndarray]:
        """Rows ``idx`` (all in written row groups) of every column."""
        return self.reader.gather(idx)
