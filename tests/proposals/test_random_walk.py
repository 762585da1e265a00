import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.proposals import independence_gaussian, random_walk


def test_random_walk_step_covariance():
    cov = np.array([[0.15, 0.05], [0.05, 0.3]])
    prop = random_walk(cov=cov)
    keys = jax.random.split(jax.random.key(0), 40000)
    new, lq = jax.vmap(lambda k: prop.sample(k, jnp.zeros(2)))(keys)
    steps = np.asarray(new, np.float64)
    emp = np.cov(steps.T)
    # s.e. of a covariance entry ~ sqrt((s_ii s_jj + s_ij^2) / n)
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / steps.shape[0])
    assert np.all(np.abs(emp - cov) < 4 * se)
    assert np.all(np.asarray(lq) == 0)


def test_random_walk_on_pytree_and_scale():
    prop = random_walk(scale=0.5)
    theta = {"a": jnp.zeros(3), "b": jnp.zeros((2, 2))}
    new, _ = prop.sample(jax.random.key(0), theta)
    assert new["a"].shape == (3,) and new["b"].shape == (2, 2)


def test_independence_log_q_ratio_matches_scipy():
    mean, cov = np.array([1.0, -1.0]), np.array([[1.0, 0.3], [0.3, 0.5]])
    prop = independence_gaussian(mean, cov=cov)
    theta = jnp.array([0.2, 0.4])
    new, lq = prop.sample(jax.random.key(5), theta)
    dist = stats.multivariate_normal(mean, cov)
    ref = dist.logpdf(np.asarray(theta)) - dist.logpdf(np.asarray(new))
    np.testing.assert_allclose(float(lq), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one"),
        ({"scale": 1.0, "cov": np.eye(2)}, "exactly one"),
        ({"scale": -1.0}, "positive"),
        ({"cov": np.array([[1.0, 2.0], [2.0, 1.0]])}, "positive definite"),
        ({"cov": np.array([[1.0, 0.1], [0.0, 1.0]])}, "symmetric"),
        ({"cov": np.ones(3)}, "square"),
    ],
)
def test_random_walk_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        random_walk(**kwargs)


def test_dimension_mismatch_is_reported():
    prop = random_walk(cov=np.eye(3))
    with pytest.raises(ValueError, match="dimension 3 but the parameter has 2"):
        prop.sample(jax.random.key(0), jnp.zeros(2))
