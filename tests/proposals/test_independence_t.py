"""The multivariate-t independence proposal: its log q ratio against scipy, its draws' law, bad settings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.proposals import independence_t

MEAN, COV = np.array([1.0, -1.0, 0.5]), np.array([[1.0, 0.3, 0.0], [0.3, 0.5, 0.1], [0.0, 0.1, 2.0]])


@pytest.mark.parametrize("df, scale", [(3.0, 1.0), (10.0, 1.5)])
def test_log_q_ratio_matches_scipy(df, scale):
    """``log q(theta) - log q(theta')`` equals scipy's multivariate-t log densities (a wrong exponent ``(df + d) / 2``,
    a missing scale or a sign flip would be off by far more than float32 rounding)."""
    prop = independence_t(MEAN, COV, df, scale=scale)
    dist = stats.multivariate_t(MEAN, scale**2 * COV, df=df)
    thetas = jnp.array([[0.2, 0.4, -3.0], [1.0, -1.0, 0.5], [8.0, 3.0, -1.0]], jnp.float32)
    for i, theta in enumerate(thetas):
        new, lq = prop.sample(jax.random.key(i), theta)
        ref = dist.logpdf(np.asarray(theta, np.float64)) - dist.logpdf(np.asarray(new, np.float64))
        np.testing.assert_allclose(float(lq), ref, rtol=1e-4, atol=1e-4)


def test_draws_follow_the_t_distribution():
    """20,000 draws: per-coordinate KS test against the t marginal (p > 1e-3) catches a wrong df or mixing scale."""
    df = 4.0
    prop = independence_t(MEAN, COV, df)
    keys = jax.random.split(jax.random.key(1), 20_000)
    new, _ = jax.vmap(lambda k: prop.sample(k, jnp.zeros(3)))(keys)
    x = np.asarray(new, np.float64)
    for j in range(3):
        p = stats.kstest(x[:, j], stats.t(df, MEAN[j], np.sqrt(COV[j, j])).cdf).pvalue
        assert p > 1e-3, (j, p)


@pytest.mark.parametrize(
    "args, message",
    [((MEAN, COV, 0.0), "degrees of freedom"), ((MEAN, COV, np.inf), "degrees of freedom"),
     ((MEAN[:2], COV, 3.0), "mean must be 3"), ((MEAN, -COV, 3.0), "positive definite")],
)
def test_rejects_bad_settings(args, message):
    with pytest.raises(ValueError, match=message):
        independence_t(*args)
