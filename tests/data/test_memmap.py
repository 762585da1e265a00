"""``data.memmap``'s contiguous reads (``MemmapReader.read_range``) and ``HostData.slice`` over them: the file's rows,
bitwise, at any range, read into a fresh aligned buffer (issue 33: no zero-filled ``bytearray``, no ``np.stack`` copy of
a single block).

What each test would catch: a range read from the wrong offset or cut short (a chunk boundary off by a row, the last
partial chunk), a buffer handed out before it was filled (``np.empty``'s garbage), a buffer shared between two reads,
and a single block whose columns come back under the wrong names or shape."""

from __future__ import annotations

import numpy as np
import pytest

from minibatch_mcmc.data import open_npy
from minibatch_mcmc.data.aligned import ALIGNMENT

N, D = 1000, 3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A float32 ``(N, D)`` and an int32 ``(N,)`` ``.npy`` column, and their arrays."""
    d = tmp_path_factory.mktemp("memmap")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((N, D)).astype(np.float32), rng.integers(0, 2, N).astype(np.int32)
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    return {"x": d / "x.npy", "y": d / "y.npy"}, {"x": x, "y": y}


@pytest.mark.parametrize("start, stop", [(0, 0), (0, 1), (0, 128), (128, 256), (999, 1000), (872, 1000), (0, N)])
def test_read_range_is_the_rows_bitwise_in_an_aligned_buffer(files, start, stop):
    """Each column's rows ``[start, stop)`` equal the array's, C-contiguous, starting at ``ALIGNMENT``; two reads of the
    same rows are two buffers."""
    paths, arrays = files
    reader = open_npy(paths).reader
    cols, again = reader.read_range(start, stop), reader.read_range(start, stop)
    for spec, col, other in zip(reader.specs, cols, again):
        want = arrays[spec.name.strip("[]'\"")]
        assert col.dtype == want.dtype and col.shape == (stop - start,) + want.shape[1:]
        np.testing.assert_array_equal(col, want[start:stop])
        assert col.flags.c_contiguous and (col.size == 0 or col.ctypes.data % ALIGNMENT == 0)
        assert col.size == 0 or not np.shares_memory(col, other)


def test_a_single_block_slice_is_the_rows_under_their_names(files):
    """``HostData.slice`` at one start returns each column's rows as read, by name and of the row shape; at an array of
    starts the blocks stacked (the path that still copies)."""
    paths, arrays = files
    data = open_npy(paths)
    one = data.slice(872, 128)
    assert set(one) == {"x", "y"}
    for k in ("x", "y"):
        np.testing.assert_array_equal(np.asarray(one[k]), arrays[k][872:1000])
    both = data.slice(np.array([0, 500]), 100)
    for k in ("x", "y"):
        np.testing.assert_array_equal(np.asarray(both[k]), np.stack([arrays[k][0:100], arrays[k][500:600]]))
