"""MINT (Li and Wong, Algorithm 1): exact acceptance probabilities, the tempered stationary law, bad settings."""

from itertools import combinations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers_ratio import acceptance_draws

from minibatch_mcmc import MetropolisTest, random_walk, sample
from minibatch_mcmc.acceptance import mint, mint_temperature, resolve_mint
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean

DRAWS = 40_000


def exact_mint_probability(r: np.ndarray, m: int, lam: float, psi: float, temperature: float = 1.0) -> float:
    """P(accept) of MINT by enumerating every minibatch of ``m`` of the ``n`` ratios (all equally likely)."""
    n = r.shape[0]
    scale = float(n) ** lam / temperature
    probs = [min(1.0, np.exp(scale * np.mean(r[list(s)], dtype=np.float64) + psi)) for s in combinations(range(n), m)]
    return float(np.mean(probs))


@pytest.mark.parametrize(("lam", "psi", "temperature"), [(0.4, -0.2, 1.0), (0.55, 0.1, 2.0)])
def test_acceptance_probability_matches_enumeration_over_minibatches(lam, psi, temperature):
    # n = 9 ratios, m = 4: 126 equally likely minibatches, enumerated exactly
    r = np.random.default_rng(3).normal(-0.3, 1.0, size=9).astype(np.float32)
    test = mint(batch_size=4, alpha=lam / (np.log(4) / np.log(9)))
    s = test.settings(9)
    assert s.batch_size == 4 and abs(s.lam - lam) < 1e-12
    p = exact_mint_probability(r, 4, lam, psi, temperature)
    acc, bs, _ = acceptance_draws(test, r, psi, DRAWS, seed=5, temperature=temperature)
    se = np.sqrt(p * (1 - p) / DRAWS)
    assert abs(acc.mean() - p) < 4 * se, (acc.mean(), p, se)
    assert np.all(bs == 4)


def test_parameterisations_agree():
    n = 10**6
    a = resolve_mint(n, tau=0.5, lam=0.25)
    b = resolve_mint(n, batch_size=1000, alpha=0.5)
    assert a.batch_size == b.batch_size == 1000
    assert abs(a.lam - b.lam) < 1e-12 and abs(a.tau - b.tau) < 1e-12
    assert a.temperature == pytest.approx(mint_temperature(n, 0.25)) == pytest.approx(n**0.75)
    assert mint(tau=0.5, lam=0.25).temperature_factor(n) == pytest.approx(n**0.75)


@pytest.fixture(scope="module")
def conjugate():
    n = 5000
    settings = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)
    x = np.random.default_rng(42).normal([1.0, -0.5], 1.0, size=(n, 2)).astype(np.float32)
    return settings, x


@pytest.mark.parametrize(
    "make_test", [lambda: mint(batch_size=500, alpha=0.5), lambda: mint(tau=0.6, lam=0.3)], ids=["m-alpha", "tau-lam"]
)
def test_stationary_distribution_is_the_tempered_posterior(conjugate, make_test):
    settings, x = conjugate
    test = make_test()
    t = test.temperature_factor(x.shape[0])
    mean, var = exact_posterior(x, t, settings)
    sd = float(np.sqrt(var))
    res = sample(
        gaussian_mean(settings),
        x,
        jnp.asarray(mean + 2 * sd, jnp.float32),
        proposal=random_walk(scale=1.5 * sd),
        test=test,
        num_samples=4000,
        num_chains=4,
        key=11,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 500:], mean, var)
    assert np.all(chk.ess > 400), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    assert res.summary()["mean_batch_size"] == test.settings(x.shape[0]).batch_size
    np.testing.assert_allclose(res.temperature, t, rtol=1e-12)  # the implied temperature is on the result
    idata = res.to_inference_data()
    np.testing.assert_allclose(idata.sample_stats["temperature"].values, t, rtol=1e-6)


def test_noise_inflates_the_variance_when_lambda_approaches_tau(conjugate):
    # the scaled minibatch noise is ~ n^(lambda - tau) of the tempered posterior's scale: at n = 5000 with
    # tau - lambda = 0.15 it is ~0.28 and the plug-in test widens the chain (the paper's result is asymptotic)
    settings, x = conjugate
    test = mint(tau=0.6, lam=0.45)
    mean, var = exact_posterior(x, test.temperature_factor(x.shape[0]), settings)
    sd = float(np.sqrt(var))
    res = sample(
        gaussian_mean(settings),
        x,
        jnp.asarray(mean, jnp.float32),
        proposal=random_walk(scale=1.5 * sd),
        test=test,
        num_samples=4000,
        num_chains=4,
        key=11,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 500:], mean, var)
    assert np.all(chk.z_var() > 4) and np.all(chk.var > 1.1 * var), (chk.var, var)


def test_untempered_target_is_far_from_mint(conjugate):
    # the same MINT run is NOT a sample of the untempered posterior: its variance is T times larger
    settings, x = conjugate
    t = mint(batch_size=500, alpha=0.5).temperature_factor(x.shape[0])
    _, var_t = exact_posterior(x, t, settings)
    _, var_1 = exact_posterior(x, 1.0, settings)
    assert var_t / var_1 > 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(tau=0.5, lam=0.5), "lambda < tau"),
        (dict(tau=0.5, lam=0.7), "lambda < tau"),
        (dict(tau=1.5, lam=0.1), "tau=1.5"),
        (dict(tau=0.5, lam=-0.1), "lam=-0.1"),
        (dict(batch_size=1, alpha=0.5), "batch_size m=1"),
        (dict(batch_size=100, alpha=1.0), "alpha=1.0"),
        (dict(tau=0.5), "either"),
        (dict(tau=0.5, lam=0.2, batch_size=10, alpha=0.5), "either"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mint(**kwargs)


def test_batch_larger_than_data_raises(conjugate):
    settings, x = conjugate
    with pytest.raises(ValueError, match="exceeds the number of data points"):
        sample(
            gaussian_mean(settings),
            x[:100],
            jnp.zeros(2),
            proposal=random_walk(scale=0.1),
            test=mint(batch_size=500, alpha=0.5),
            num_samples=10,
            progress=False,
        )


def test_tempered_full_data_baseline_matches(conjugate):
    # the baseline of the paper: full-data Metropolis at MINT's temperature
    settings, x = conjugate
    t = mint(batch_size=500, alpha=0.5).temperature_factor(x.shape[0])
    mean, var = exact_posterior(x, t, settings)
    res = sample(
        gaussian_mean(settings),
        x,
        jnp.asarray(mean, jnp.float32),
        proposal=random_walk(scale=1.5 * float(np.sqrt(var))),
        test=MetropolisTest(),
        num_samples=2000,
        num_chains=4,
        temperature=t,
        key=3,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 200:], mean, var)
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4)
