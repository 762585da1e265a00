"""Random walk on orthonormal matrices: stays orthonormal in float32, symmetric increments, step size."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.proposals.stiefel import skew_gaussian, stiefel_random_walk


def _walk(proposal, steps, d=4, seed=0):
    def body(w, key):
        w_new, lq = proposal.sample(key, w)
        return w_new, lq

    w, lq = jax.jit(lambda keys: jax.lax.scan(body, jnp.eye(d, dtype=jnp.float32), keys))(
        jax.random.split(jax.random.key(seed), steps)
    )
    return np.asarray(w, np.float64), np.asarray(lq)


def test_long_walk_stays_orthonormal_to_1e6_in_float32():
    w, lq = _walk(stiefel_random_walk(0.3), 20_000)
    assert np.max(np.abs(w.T @ w - np.eye(4))) < 1e-6
    assert np.all(lq == 0)
    assert abs(np.linalg.det(w) - 1.0) < 1e-6  # expm(S) has det 1: the walk stays on the start's component


def test_increments_are_symmetric_and_scaled():
    """G = W^T W' = expm(S) and its inverse G^T have the same law (symmetric proposal); S_ij ~ N(0, step^2)."""
    d, step, n = 3, 0.4, 3000
    big = np.asarray(skew_gaussian(jax.random.key(2), 80, step))
    np.testing.assert_array_equal(big, -big.T)
    assert stats.kstest(big[np.triu_indices(80, 1)] / step, "norm").pvalue > 1e-3
    keys = jax.random.split(jax.random.key(3), n)
    prop = stiefel_random_walk(step)
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((d, d)))
    w = jnp.asarray(q, jnp.float32)
    w_new = np.asarray(jax.jit(jax.vmap(lambda k: prop.sample(k, w)[0]))(keys), np.float64)  # one program, not op by op
    g = np.swapaxes(q, 0, 1)[None] @ w_new
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        assert stats.ks_2samp(g[:, i, j], g[:, j, i]).pvalue > 1e-3
    np.testing.assert_allclose(g.mean(0), g.mean(0).T, atol=0.05)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="step"):
        stiefel_random_walk(-0.1)
    with pytest.raises(ValueError, match="square"):
        stiefel_random_walk(0.1).sample(jax.random.key(0), jnp.ones((2, 3)))
