"""Global proposals from the proxy posterior (independence, t independence, proxy HMC, mixtures with local moves):
their data-free pieces against closed forms, and their chains against exact posteriors at temperature 1."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import glm_data, glm_quadrature
from scipy import stats

from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch
from minibatch_mcmc.control_variates import proxy_hmc, proxy_independence, proxy_laplace, taylor_proxy
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean, logistic_regression
from minibatch_mcmc.proposals import mixture, random_walk
from minibatch_mcmc.samplers import sample

SETTINGS = GaussianMeanSettings(prior_mean=0.0, prior_scale=2.0, noise_scale=1.0)


@pytest.fixture(scope="module")
def conjugate():
    """2,000 rows of a 2-d Gaussian mean model: its second-order proxy is exact, so the proxy posterior is the posterior."""
    x = np.random.default_rng(4).normal([1.0, -0.5], 1.0, size=(2_000, 2)).astype(np.float32)
    mean, var = exact_posterior(x, 1.0, SETTINGS)
    model = gaussian_mean(SETTINGS)
    return model, taylor_proxy(model, x, jnp.asarray(mean + 0.3, jnp.float32), order=2), mean, var


def test_proxy_laplace_is_the_closed_form_posterior(conjugate):
    """Newton on the data-free proxy posterior, started 0.3 away (about 13 s.d.), lands on the conjugate posterior's mean
    and variance (a missing prior term or a wrong Hessian sum would move them by far more than float32 rounding)."""
    model, proxy, mean, var = conjugate
    m, cov = proxy_laplace(proxy, model.log_prior)
    np.testing.assert_allclose(m, mean, atol=1e-4)
    np.testing.assert_allclose(cov, var * np.eye(2), rtol=1e-3, atol=1e-9)
    with pytest.raises(ValueError, match="second-order"):
        proxy_laplace(proxy._replace(order=1), model.log_prior)


def test_proxy_hmc_ratio_is_minus_the_proxy_density_ratio_when_energy_is_conserved(conjugate):
    """With small leapfrog steps the energy ``-log pi~(theta) + |v|^2 / 2`` is conserved, so ``log_q_ratio`` (the kinetic
    difference) must equal ``log pi~(theta) - log pi~(theta')`` from scipy's Gaussian (the exact proxy posterior here).
    A wrong sign, a kinetic energy in the wrong metric, or dynamics not driven by the proxy's gradient (a missing
    ``1/K``, the prior left out) each break the identity by O(1) nats; the leapfrog error at step 0.02 is ~1e-4."""
    model, proxy, mean, var = conjugate
    dist = stats.multivariate_normal(mean, var * np.eye(2))
    cov = np.array([[1.0, 0.4], [0.4, 2.0]]) * var  # any mass matrix: the identity holds for each
    prop = proxy_hmc(proxy, model.log_prior, 0.02, num_steps=60, cov=cov)
    sample_fn = jax.jit(prop.sample)
    for i in range(4):
        theta = jnp.asarray(mean + np.sqrt(var) * np.array([1.5, -2.0]) * (i - 1.5), jnp.float32)
        new, lq = sample_fn(jax.random.key(i), theta)
        ref = dist.logpdf(np.asarray(theta, np.float64)) - dist.logpdf(np.asarray(new, np.float64))
        moved = np.linalg.norm(np.asarray(new) - np.asarray(theta)) / np.sqrt(var)
        assert moved > 0.3, moved  # the trajectory went somewhere
        np.testing.assert_allclose(float(lq), ref, atol=5e-3 + 1e-3 * abs(ref))


@pytest.fixture(scope="module")
def glm():
    data = glm_data(5_000, (-0.5, 1.0), 21)
    mean, var, mode, cov = glm_quadrature(data, 10.0)
    model = logistic_regression(prior_scale=10.0)
    return model, data, taylor_proxy(model, data, jnp.asarray(mode, jnp.float32), order=2), mean, var, mode, cov


def _proposals(model, proxy, cov):
    return {
        "independence": lambda: proxy_independence(proxy, model.log_prior),
        "independence_t": lambda: proxy_independence(proxy, model.log_prior, df=5.0),
        "proxy_hmc": lambda: proxy_hmc(proxy, model.log_prior, 0.8, num_steps=3, cov=cov),
        "mixture": lambda: mixture(
            [proxy_hmc(proxy, model.log_prior, 0.8, num_steps=3, cov=cov), random_walk(cov=cov)], [0.7, 0.3]
        ),
    }


def _check(res, mean, var, burn):
    """Moments against quadrature with ESS-based errors; ESS > 3200 makes |z| < 4 catch a 5% s.d. error (10% variance)."""
    chk = check_moments(np.asarray(res.positions)[:, burn:], mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)


@pytest.mark.slow
@pytest.mark.parametrize("test_name", ["mhminibatch", "metropolis"])
@pytest.mark.parametrize("name", ["independence", "independence_t", "proxy_hmc", "mixture"])
def test_glm_posterior_with_proxy_moves(glm, name, test_name):
    """A 2-parameter logistic regression (N = 5000, K = 1, posterior by quadrature): each proxy-posterior proposal,
    corrected by MHminibatch (Barker, 50 rows with the second-order proxy) or the exact full-data Metropolis test,
    matches the quadrature means and variances (|z| < 4 with ESS > 3200: a 5% error in a posterior s.d. fails). The
    Laplace-based proposals are not the posterior here (the log-likelihood is not quadratic), so a wrong
    ``log_q_ratio`` (a missing kinetic term, the Gaussian density for the t draws) would bias the draws towards the
    Laplace fit. With Metropolis the acceptance is near 1 (> 0.8), with Barker at most 1/2."""
    model, data, proxy, mean, var, mode, cov = glm
    barker = test_name == "mhminibatch"
    res = sample(
        model,
        data,
        jnp.asarray(mode, jnp.float32),
        proposal=_proposals(model, proxy, cov)[name](),
        test=mh_minibatch(batch_size=50) if barker else MetropolisTest(),
        estimator=proxy,
        num_samples=2500 if barker else 1600,
        num_chains=8 if barker else 4,
        key=11,
        progress=False,
        block_size=2500,
    )
    _check(res, mean, var, burn=100)
    s = res.summary()
    if barker:
        assert s["data_per_test"] < 70
        assert s["acceptance_rate"] < 0.52  # Barker's stationary mean is <= 1/2; 0.02 is > 4 s.e. of 20,000 draws' rate
    elif name != "mixture":
        assert s["acceptance_rate"] > 0.8


@pytest.mark.slow
def test_mixture_from_a_far_start_reaches_the_posterior(glm):
    """Chains started 40 Laplace s.d. from the mode, where the quadratic proxy is far off (the minibatch grows), with
    proxy HMC mixed with a Laplace-shaped random walk under MHminibatch: after 600 draws of burn-in every chain sits
    in the posterior and the pooled draws match the quadrature moments (|z| < 4, ESS > 3200). Proxy HMC alone stays
    stuck there (its trajectories on the wrong quadratic keep landing where the true posterior is lower), and so can
    the proxy-gradient MALA; the random walk needs no proxy."""
    model, data, proxy, mean, var, mode, cov = glm
    far = mode + 40.0 * np.sqrt(np.diag(cov)) * np.array([1.0, -1.0])
    prop = mixture([proxy_hmc(proxy, model.log_prior, 0.8, num_steps=3, cov=cov), random_walk(cov=cov)], [0.5, 0.5])
    res = sample(
        model,
        data,
        jnp.asarray(far, jnp.float32),
        proposal=prop,
        test=mh_minibatch(batch_size=50),
        estimator=proxy,
        num_samples=3600,
        num_chains=8,
        key=13,
        progress=False,
        block_size=3200,
    )
    after = np.asarray(res.positions)[:, 600:]
    z = np.abs(after.mean(1) - mean) / np.sqrt(var)
    assert np.all(z < 1.0), z  # each chain's mean within one posterior s.d.: no chain left behind
    _check(res, mean, var, burn=600)
