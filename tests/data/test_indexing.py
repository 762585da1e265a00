import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.data.indexing import chunk_indices, permuted_index


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1000, 4097])
def test_permuted_index_is_a_permutation(n):
    idx = np.asarray(permuted_index(jax.random.key(3), jnp.arange(n), n))
    assert sorted(idx.tolist()) == list(range(n))


def test_permutation_changes_with_key_and_is_roughly_uniform():
    n, reps = 10, 4000
    keys = jax.random.split(jax.random.key(0), reps)
    first = np.asarray(jax.vmap(lambda k: permuted_index(k, jnp.arange(3), n))(keys))
    # position 0 of the permutation is uniform on [0, n): chi-squared with 9 dof, 99.9% quantile 27.9
    counts = np.bincount(first[:, 0], minlength=n)
    stat = ((counts - reps / n) ** 2 / (reps / n)).sum()
    assert stat < 27.9
    # the first three positions are always distinct (without replacement)
    assert np.all((first[:, 0] != first[:, 1]) & (first[:, 1] != first[:, 2]) & (first[:, 0] != first[:, 2]))


def test_chunk_indices_masks_the_partial_last_chunk():
    n, m = 23, 10
    key = jax.random.key(1)
    seen = []
    for c in range(3):
        idx, valid = chunk_indices(key, jnp.int32(c), m, n)
        idx, valid = np.asarray(idx), np.asarray(valid)
        assert valid.sum() == min(m, n - c * m)
        seen += idx[valid].tolist()
    assert sorted(seen) == list(range(n))


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n=0"):
        permuted_index(jax.random.key(0), jnp.arange(1), 0)
