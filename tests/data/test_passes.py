"""Streamed passes: chunks of one size cover every row exactly once."""

from __future__ import annotations

import numpy as np
import pytest

from minibatch_mcmc.data.passes import same_size_chunks


@pytest.mark.parametrize("n, chunk", [(1, 4), (5, 5), (10, 4), (4097, 2048), (3, 8)])
def test_same_size_chunks_count_each_row_once(n, chunk):
    """Every chunk has one size (at most ``chunk`` and ``n``), stays inside ``[0, n)``, and the kept rows count each
    row once: a chunk double-counting the overlap of the last one (or dropping a row) would fail."""
    counts = np.zeros(n, int)
    chunks = same_size_chunks(n, chunk)
    for first, size, keep in chunks:
        assert size == min(chunk, n) and 0 <= first and first + size <= n and keep.shape == (size,)
        counts[first:first + size] += keep
    np.testing.assert_array_equal(counts, np.ones(n, int))


def test_same_size_chunks_of_no_rows():
    """No rows, no chunk (a loop over them reads nothing)."""
    assert same_size_chunks(0, 8) == []


def test_same_size_chunks_rejects_a_bad_chunk():
    """A chunk of no rows is an error naming the value."""
    with pytest.raises(ValueError, match="chunk=0"):
        same_size_chunks(10, 0)
