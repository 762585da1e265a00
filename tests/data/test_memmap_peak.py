"""One large gather from a memory map stays within the reader's resident bound: a page fault maps a whole page-cache
folio (up to 2 MiB), so 1024 random rows of a 400 MB file could map all of it at once before gathers were read in
``PIECE_ROWS``-row pieces with a look at the resident set after each (it took a 2 GB file's process from 411 to 1774 MiB)."""

import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")

CHILD = """
import sys, numpy as np
from minibatch_mcmc.data import open_npy
def hwm():
    return [int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0]
data = open_npy(sys.argv[1], check_finite=False)
idx = np.sort(np.random.default_rng(0).choice(data.n, 1024, replace=False))
before = hwm()
rows = data.reader.gather(idx)[0]
grown = hwm() - before
assert np.array_equal(rows, np.load(sys.argv[1], mmap_mode='r')[idx])
print(grown)
"""


@pytest.mark.slow
def test_one_gather_of_random_rows_stays_within_the_resident_bound(tmp_path):
    """(~50 s on a loaded 2-core machine.) A fresh process's peak resident memory grows by at most the reader's 256 MiB (plus 32 MiB for numpy and
    the interpreter) over one gather of 1024 random rows of a 400 MB file whose pages are in the page cache; the rows
    are those of the file."""
    path = tmp_path / "x.npy"
    rng = np.random.default_rng(1)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(10_000_000, 10))
    for start in range(0, out.shape[0], 1 << 20):
        out[start : start + (1 << 20)] = rng.standard_normal((min(1 << 20, out.shape[0] - start), 10), dtype=np.float32)
    out.flush()
    del out
    np.load(path).sum()  # the file's pages in the page cache, as after a validation scan
    grown = float(
        subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], check=True, capture_output=True, text=True
        ).stdout.split()[-1]
    )
    assert grown <= 256 + 32, f"peak resident memory grew by {grown:.0f} MiB"
