"""Each sampler against the exact (tempered) posterior of the conjugate Gaussian mean model."""

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import BarkerTest, MetropolisTest, mh_minibatch, random_walk, sample
from minibatch_mcmc.acceptance import austere_mh, mh_sublhd
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean

N, D, K = 5000, 2, 50.0
SETTINGS = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(42)
    x = rng.normal([1.0, -0.5], 1.0, size=(N, D)).astype(np.float32)
    mean, var = exact_posterior(x, K, SETTINGS)
    return x, mean, var


@pytest.mark.parametrize(
    "make_test",
    [
        MetropolisTest,
        BarkerTest,
        lambda: mh_minibatch(batch_size=50),
        lambda: mh_minibatch(batch_size=50, sigma=1.3),
        lambda: austere_mh(batch_size=100, epsilon=0.01),
        lambda: mh_sublhd(batch_size=100, gamma=1.5, p=2.0, delta=0.01),
    ],
    ids=["metropolis", "barker", "mhminibatch", "mhminibatch-sigma1.3", "austere_mh_c", "mhsublhd"],
)
def test_sampler_recovers_exact_posterior(problem, make_test):
    x, mean, var = problem
    sd = float(np.sqrt(var))
    start = jnp.asarray(mean + 2 * sd, jnp.float32)  # start off-centre; burn-in dropped below
    res = sample(
        gaussian_mean(SETTINGS),
        x,
        start,
        proposal=random_walk(scale=1.2 * sd),
        test=make_test(),
        num_samples=4000,
        num_chains=4,
        temperature=K,
        key=123,
        progress=False,
    )
    draws = np.asarray(res.positions)[:, 500:]
    chk = check_moments(draws, mean, var)
    assert np.all(chk.ess > 400), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    s = res.summary()
    assert 0.1 < s["acceptance_rate"] < 0.9
