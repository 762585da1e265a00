import jax.numpy as jnp
import numpy as np
import pytest
from helpers_ratio import acceptance_draws, exact_delta, population

from minibatch_mcmc import random_walk, sample
from minibatch_mcmc.acceptance import naive_minibatch
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean

N = 2000
DRAWS = 20_000


def test_naive_test_is_biased_when_the_estimate_is_noisy():
    # Delta = -1.5, but the plug-in estimate N * mean + psi has s.d. ~ 30 / sqrt(100) = 3: moves that
    # look good by chance are accepted, P(accept) ~ 0.43 instead of e^-1.5 = 0.22
    r, psi = population(N, -1.5, 30.0, seed=1)
    p = float(np.exp(exact_delta(r, psi)))
    acc, bs, ds = acceptance_draws(naive_minibatch(100), r, psi, DRAWS, seed=2)
    se = np.sqrt(p * (1 - p) / DRAWS)
    assert acc.mean() - p > 20 * se, (acc.mean(), p)
    assert np.all(bs == 100)
    # the estimate itself is unbiased (without-replacement mean): the bias comes from the test
    assert abs(ds.mean() - exact_delta(r, psi)) < 4 * ds.std() / np.sqrt(DRAWS)


def test_naive_test_is_nearly_exact_when_the_estimate_is_precise():
    r, psi = population(N, -1.5, 0.5, seed=1)
    p = float(np.exp(exact_delta(r, psi)))
    acc, _, _ = acceptance_draws(naive_minibatch(100), r, psi, DRAWS, seed=2)
    assert abs(acc.mean() - p) < 0.01 + 3 * np.sqrt(p * (1 - p) / DRAWS)


def test_naive_chain_has_the_wrong_stationary_distribution():
    # conjugate Gaussian mean model (as in tests/samplers/test_conjugate.py): the noisy plug-in test
    # roughly doubles the posterior variance
    n, k = 5000, 50.0
    settings = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)
    x = np.random.default_rng(42).normal([1.0, -0.5], 1.0, size=(n, 2)).astype(np.float32)
    mean, var = exact_posterior(x, k, settings)
    sd = float(np.sqrt(var))
    res = sample(
        gaussian_mean(settings),
        x,
        jnp.asarray(mean + 2 * sd, jnp.float32),
        proposal=random_walk(scale=1.2 * sd),
        test=naive_minibatch(50),
        num_samples=3000,
        num_chains=4,
        temperature=k,
        key=123,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 500:], mean, var)
    assert np.all(chk.z_var() > 6), (chk.var, chk.exact_var, chk.se_var)
    assert np.all(chk.var > 1.4 * var)
    assert res.summary()["mean_batch_size"] == 50


@pytest.mark.parametrize("batch_size", [1, 0, 2.5, True])
def test_bad_batch_size_raises(batch_size):
    with pytest.raises(ValueError, match=f"batch_size m={batch_size!r} must be an integer >= 2"):
        naive_minibatch(batch_size)


def test_batch_larger_than_data_is_rejected():
    with pytest.raises(ValueError, match="m=200 exceeds the number of data points N=100"):
        naive_minibatch(200).validate(100)
