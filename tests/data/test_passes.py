"""Streamed passes: chunks of one size cover every row exactly once."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.data.passes import host_reduce, same_size_chunks


@pytest.mark.parametrize("n, chunk", [(1, 4), (5, 5), (10, 4), (4097, 2048), (3, 8)])
def test_same_size_chunks_count_each_row_once(n, chunk):
    """Every chunk has one size (at most ``chunk`` and ``n``), stays inside ``[0, n)``, and the kept rows count each
    row once: a chunk double-counting the overlap of the last one (or dropping a row) would fail."""
    counts = np.zeros(n, int)
    chunks = same_size_chunks(n, chunk)
    for first, size, keep in chunks:
        assert size == min(chunk, n) and 0 <= first and first + size <= n and keep.shape == (size,)
        counts[first : first + size] += keep
    np.testing.assert_array_equal(counts, np.ones(n, int))


def test_same_size_chunks_of_no_rows():
    """No rows, no chunk (a loop over them reads nothing)."""
    assert same_size_chunks(0, 8) == []


def test_same_size_chunks_rejects_a_bad_chunk():
    """A chunk of no rows is an error naming the value."""
    with pytest.raises(ValueError, match="chunk=0"):
        same_size_chunks(10, 0)


@pytest.mark.parametrize("n, chunk", [(1000, 300), (300, 300), (7, 300), (1000, 1)])
def test_host_reduce_counts_every_row_once(n, chunk):
    """``host_reduce``'s same-size chunks (the last one overlapping its predecessor) weigh each row once through
    ``Chunk.fresh``, and its ragged chunks cover each row once: both sums equal the float64 sum of the rows, and every
    same-size chunk has ``min(chunk, n)`` rows (one compilation). A chunk counted twice, or a row skipped, fails (the
    rows are the integers ``0 .. n - 1``: every sum is exact)."""
    x, want = np.arange(n, dtype=np.float32), n * (n - 1) // 2
    sizes = set()

    def fold(acc, c):
        rows = np.asarray(c.rows)
        sizes.add(rows.shape[0])
        return acc + float(np.sum(rows[c.fresh(rows.shape[0])]))

    assert host_reduce(fold, 0.0, jnp.asarray(x), n, chunk) == want
    assert sizes == {min(chunk, n)}
    ragged = host_reduce(
        lambda acc, c: acc + float(np.sum(np.asarray(c.rows))), 0.0, jnp.asarray(x), n, chunk, same_size=False
    )
    assert ragged == want
