"""``data.aligned``: host arrays JAX shares instead of copying (issue 31: a GLMM's rows held once at ``N = 10^7``).

What each test would catch: an array that does not start at ``ALIGNMENT`` (the offset taken from the wrong end, a view
that is not C-contiguous), a cast that rounds otherwise than ``astype``, an aligned array copied again, and a JAX that
copies an aligned array after all (then every GLMM's rows are held twice, and the module's premise is gone).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from minibatch_mcmc.data.aligned import ALIGNMENT, aligned, aligned_empty, is_aligned
from minibatch_mcmc.data.arrays import as_data_source


@pytest.mark.parametrize(
    "shape, dtype",
    [((1000,), np.float32), ((1001, 3), np.float32), ((777,), np.int32), ((5,), np.float64), ((0, 2), np.float32)],
)
def test_an_aligned_empty_array_starts_at_the_alignment(shape, dtype):
    """Shape, dtype, C order, and the data's first byte a multiple of ``ALIGNMENT``."""
    out = aligned_empty(shape, dtype)
    assert out.shape == shape and out.dtype == dtype and out.flags.c_contiguous and out.flags.writeable
    assert out.size == 0 or out.ctypes.data % ALIGNMENT == 0


def test_aligned_casts_as_astype_and_keeps_an_aligned_array():
    """float64 to float32 and int64 to int32 bitwise as ``astype``; an aligned array of the dtype is returned itself;
    a strided view is copied."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((1001, 3))
    out = aligned(values, np.float32)
    assert is_aligned(out) and np.array_equal(out, values.astype(np.float32))
    assert aligned(out, np.float32) is out
    codes = rng.integers(0, 50, 999)
    small = aligned(codes, np.int32)
    assert small.dtype == np.int32 and is_aligned(small) and np.array_equal(small, codes)
    strided = out[:, 1]
    again = aligned(strided, np.float32)
    assert again is not strided and is_aligned(again) and np.array_equal(again, strided)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="sharing host memory is the CPU client's")
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_jax_shares_an_aligned_array_and_copies_a_misaligned_one(dtype):
    """``as_data_source`` (``jax.device_put``) of an aligned read-only array is that memory; 16 bytes past the
    alignment (where numpy's own large allocations start) it is a copy: the measurement behind ``ALIGNMENT``. A
    writable aligned array (a user's, who could change it during a run) is copied too: the copy keeps its values when
    the array is written to afterwards."""
    raw = aligned_empty((100_016 * 4,), np.uint8)
    for offset, writable, shared in ((0, False, True), (16, False, False), (0, True, False)):
        host = raw[offset : offset + 100_000 * 4].view(dtype)
        host[:] = np.arange(100_000)
        view = host.view()
        view.flags.writeable = writable
        rows = as_data_source({"a": view}).arrays()["a"]
        assert (rows.unsafe_buffer_pointer() == host.ctypes.data) == shared, (offset, writable)
        np.testing.assert_array_equal(np.asarray(rows), np.arange(100_000).astype(dtype))
        if writable:
            host[:] = 7
            np.testing.assert_array_equal(np.asarray(rows), np.arange(100_000).astype(dtype))
