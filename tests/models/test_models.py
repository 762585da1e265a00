import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.models import (
    GaussianMeanSettings,
    exact_posterior,
    gaussian_mean,
    gaussian_mixture,
    log_posterior_grid,
    logistic_regression,
    make_logistic_data,
    make_mixture_data,
)


def test_logistic_log_lik_matches_bernoulli():
    data, _ = make_logistic_data(jax.random.key(0), 50, 4)
    theta = jnp.array([0.3, -1.0, 0.5, 2.0])
    ll = np.asarray(logistic_regression().log_lik(theta, data))
    p = 1 / (1 + np.exp(-np.asarray(data["x"], np.float64) @ np.asarray(theta, np.float64)))
    ref = stats.bernoulli.logpmf(np.asarray(data["y"]), p)
    np.testing.assert_allclose(ll, ref, rtol=1e-4, atol=1e-5)
    assert float(logistic_regression().log_prior(theta)) == 0.0
    np.testing.assert_allclose(
        float(logistic_regression(prior_scale=2.0).log_prior(theta)),
        stats.norm(0, 2).logpdf(np.asarray(theta)).sum(),
        rtol=1e-5,
    )


def test_logistic_derivatives_match_closed_form():
    """The closed-form derivative (``y - sigmoid(z)``) gives the gradient ``X'(y - p)``, the Hessian ``-X' diag(p(1 - p)) X``
    and the label derivative ``z`` (float64 references, float32 tolerances); a wrong sign or a missing ``p(1 - p)``
    factor is off by O(1)."""
    data, _ = make_logistic_data(jax.random.key(0), 200, 4)
    theta = jnp.array([0.3, -1.0, 0.5, 2.0])
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    p = 1 / (1 + np.exp(-x @ np.asarray(theta, np.float64)))
    total = lambda t: jnp.sum(logistic_regression().log_lik(t, data))  # derivatives jitted: one program each
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(total))(theta)), x.T @ (y - p), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(
        np.asarray(jax.jit(jax.hessian(total))(theta)), -(x.T * (p * (1 - p))) @ x, rtol=1e-4, atol=1e-3
    )
    soft = dict(data, y=jnp.full((200,), 0.25, jnp.float32))
    dy = jax.jit(jax.grad(lambda yy: jnp.sum(logistic_regression().log_lik(theta, dict(soft, y=yy)))))(soft["y"])
    np.testing.assert_allclose(np.asarray(dy), x @ np.asarray(theta, np.float64), rtol=1e-5, atol=1e-5)


def test_mixture_log_lik_and_prior_match_scipy():
    model = gaussian_mixture()
    x = np.linspace(-4, 5, 31).astype(np.float32)
    theta = jnp.array([0.4, -0.7])
    ref = np.log(0.5 * stats.norm(0.4, np.sqrt(2)).pdf(x) + 0.5 * stats.norm(0.4 - 0.7, np.sqrt(2)).pdf(x))
    np.testing.assert_allclose(np.asarray(model.log_lik(theta, jnp.asarray(x))), ref, rtol=1e-5)
    ref_prior = stats.norm(0, np.sqrt(10)).logpdf(0.4) + stats.norm(0, 1).logpdf(-0.7)
    np.testing.assert_allclose(float(model.log_prior(theta)), ref_prior, rtol=1e-5)


def test_mixture_grid_posterior_matches_direct_sum():
    data = np.asarray(make_mixture_data(jax.random.key(1), 5000))
    t1, t2 = np.array([-0.2, 0.1, 0.9]), np.array([-1.0, 0.5, 1.0])
    grid = log_posterior_grid(data, t1, t2, temperature=50.0)
    model = gaussian_mixture()
    for i, a in enumerate(t1):
        for j, b in enumerate(t2):
            th = jnp.array([a, b])
            direct = float(jnp.sum(model.log_lik(th, jnp.asarray(data, jnp.float32)))) / 50.0
            direct += -0.5 * (a**2 / 10 + b**2)
            assert abs(grid[i, j] - direct) < 2e-3 * max(1.0, abs(direct)) + 1e-2


def test_exact_posterior_of_conjugate_model_matches_quadrature():
    rng = np.random.default_rng(0)
    x = rng.normal(1.5, 1.0, size=(40, 1))
    settings = GaussianMeanSettings(prior_mean=0.5, prior_scale=2.0, noise_scale=1.0)
    for temp in (1.0, 4.0):
        mean, var = exact_posterior(x, temp, settings)
        grid = np.linspace(-3, 5, 20001)
        lp = stats.norm(0.5, 2.0).logpdf(grid) + stats.norm(grid[:, None], 1.0).logpdf(x[:, 0][None, :]).sum(1) / temp
        w = np.exp(lp - lp.max())
        w /= w.sum()
        m_q = (w * grid).sum()
        v_q = (w * (grid - m_q) ** 2).sum()
        np.testing.assert_allclose(mean[0], m_q, atol=1e-6)
        np.testing.assert_allclose(var, v_q, rtol=1e-4)
    model = gaussian_mean(settings)
    ll = np.asarray(model.log_lik(jnp.array([0.3]), jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(ll, stats.norm(0.3, 1.0).logpdf(x[:, 0]), rtol=1e-5)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_models_reject_bad_settings(bad):
    with pytest.raises(ValueError):
        gaussian_mean(GaussianMeanSettings(prior_scale=bad))
    with pytest.raises(ValueError):
        logistic_regression(prior_scale=bad)
