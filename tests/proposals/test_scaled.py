"""scaled_random_walk: step covariance scale^2 L L^T, a traced scale under jit, pytrees and shape errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.proposals.scaled import scaled_random_walk


def test_step_covariance_is_scale_squared_factor_factor_transpose():
    cov = np.array([[0.15, 0.05], [0.05, 0.3]])
    factor = jnp.asarray(np.linalg.cholesky(cov), jnp.float32)
    scale = 1.7
    keys = jax.random.split(jax.random.key(0), 40000)
    new, lq = jax.vmap(lambda k: scaled_random_walk(factor, jnp.float32(scale)).sample(k, jnp.ones(2)))(keys)
    steps = np.asarray(new, np.float64) - 1.0
    target = scale**2 * cov
    se = np.sqrt((np.outer(np.diag(target), np.diag(target)) + target**2) / steps.shape[0])
    assert np.all(np.abs(np.cov(steps.T) - target) < 4 * se)
    assert np.all(np.abs(steps.mean(axis=0)) < 4 * np.sqrt(np.diag(target) / steps.shape[0]))
    assert np.all(np.asarray(lq) == 0)


def test_traced_scale_under_jit_matches_eager():
    factor = jnp.array([[1.0, 0.0], [0.5, 2.0]])
    key = jax.random.key(3)

    @jax.jit
    def draw(scale):
        return scaled_random_walk(factor, scale).sample(key, jnp.zeros(2))[0]

    eager = scaled_random_walk(factor, jnp.float32(0.3)).sample(key, jnp.zeros(2))[0]
    np.testing.assert_allclose(np.asarray(draw(jnp.float32(0.3))), np.asarray(eager), rtol=1e-6)
    # the move is linear in the scale
    np.testing.assert_allclose(np.asarray(draw(jnp.float32(0.6))), 2 * np.asarray(eager), rtol=1e-6)


def test_pytree_theta_and_diagonal_factor():
    theta = {"a": jnp.zeros(3), "b": jnp.zeros((2, 2))}
    sd = jnp.arange(1.0, 8.0)
    new, _ = scaled_random_walk(sd, jnp.float32(0.0)).sample(jax.random.key(0), theta)
    assert new["a"].shape == (3,) and new["b"].shape == (2, 2)
    assert float(jnp.abs(new["a"]).sum() + jnp.abs(new["b"]).sum()) == 0.0
    moved, _ = scaled_random_walk(sd, jnp.float32(1.0)).sample(jax.random.key(0), theta)
    assert float(jnp.abs(moved["b"]).sum()) > 0


@pytest.mark.parametrize(
    "make, match",
    [  # the arrays are made when the case runs: made at import they cost every worker 0.45 CPU s while collecting
        (lambda: (jnp.ones((2, 3)), 1.0), "\\(d, d\\) matrix or a \\(d,\\) vector; got shape \\(2, 3\\)"),
        (lambda: (jnp.ones((2, 2), jnp.int32), 1.0), "floating point"),
        (lambda: (jnp.eye(2), jnp.ones(2)), "scale must be a scalar"),
    ],
    ids=["matrix-shape", "integer", "vector-scale"],
)
def test_bad_factor_or_scale(make, match):
    factor, scale = make()
    with pytest.raises(ValueError, match=match):
        scaled_random_walk(factor, scale)


def test_dimension_mismatch_names_both_sizes():
    with pytest.raises(ValueError, match="dimension 2 but the parameter has 3"):
        scaled_random_walk(jnp.eye(2), 1.0).sample(jax.random.key(0), jnp.zeros(3))
