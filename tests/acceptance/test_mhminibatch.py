import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_ratio import acceptance_draws, exact_delta, population
from scipy.special import expit

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.acceptance.correction import LOGISTIC_SD

DRAWS = 100_000
N = 20_000
M = 100


# (Delta, s.d. of Lambda_i): the initial minibatch's s^2 = sd^2 / m (1 - m/N) ranges from
# 0.25 (no growth) through ~4 (the batch grows to ~4m) to ~25 (it grows to ~25m).
CASES = [(-1.5, 5.0), (0.0, 9.0), (0.8, 20.0), (2.0, 50.0), (-0.4, 20.0)]


@pytest.mark.parametrize("delta, sd_lambda", CASES)
def test_acceptance_probability_matches_barker(delta, sd_lambda):
    r, psi = population(N, delta, sd_lambda, seed=7)
    test = mh_minibatch(batch_size=M, sigma=1.0)
    d = exact_delta(r, psi)
    p = expit(d)
    acc, bs, _ = acceptance_draws(test, r, psi, DRAWS, seed=11, optimise=True)
    se = np.sqrt(p * (1 - p) / DRAWS)
    assert abs(acc.mean() - p) < 3 * se + test.correction_error, (acc.mean(), p, bs.mean())
    # the minibatch grows in steps of m until s^2 < sigma^2: size ~ sd^2 / sigma^2, at least m
    assert np.all(bs % M == 0) and bs.min() >= M
    expected = max(M, sd_lambda**2 / (1 + sd_lambda**2 / N))
    assert 0.7 * expected < bs.mean() < 1.5 * expected + M


def test_larger_sigma_needs_smaller_batches():
    r, psi = population(N, 0.5, 30.0, seed=3)
    small = acceptance_draws(mh_minibatch(M, sigma=1.0), r, psi, 2000, seed=1)[1].mean()
    large = acceptance_draws(mh_minibatch(M, sigma=1.4), r, psi, 2000, seed=1)[1].mean()
    assert large < 0.7 * small


def test_exhausting_the_data_gives_the_exact_barker_test():
    # sd so large that the minibatch always grows to N: the decision is the exact Barker test
    n = 500
    r, psi = population(n, 0.7, 400.0, seed=5)
    acc, bs, ds = acceptance_draws(mh_minibatch(50), r, psi, DRAWS, seed=2, optimise=True)
    assert np.all(bs == n)
    d = exact_delta(r, psi)
    np.testing.assert_allclose(ds, d, atol=1e-3)
    p = expit(d)
    assert abs(acc.mean() - p) < 3 * np.sqrt(p * (1 - p) / DRAWS)


def test_enforcing_the_clt_bound_grows_the_batch():
    r, psi = population(N, 0.0, 5.0, seed=9, skew=True)
    free = mh_minibatch(M)
    strict = mh_minibatch(M, delta=0.2)
    acc, bs_free, _ = acceptance_draws(free, r, psi, 500, seed=1)
    _, bs_strict, _ = acceptance_draws(strict, r, psi, 500, seed=1)
    assert bs_free.mean() == M
    # epsilon >= (6.4 + 2) / sqrt(b) > 0.2 needs b > 1764
    assert bs_strict.min() >= 1764


def test_epsilon_is_recorded_and_uses_standardised_moments():
    # a two-point population +-c: every minibatch has standardised kurtosis ~1 (1/(4pq) - 3 + ...),
    # so epsilon = (6.4 * kurt^(3/4) + 2 * 1) / sqrt(m) ~ 0.84 for m = 100, whatever c is
    r = np.where(np.arange(N) % 2 == 0, 1.0, -1.0).astype(np.float32) * (5.0 / N)
    test = mh_minibatch(M)
    stats = Statistics(lambda b: b, jnp.asarray(r), N, jnp.float32(0.0), jnp.float32(1.0))
    out = test.decide(jax.random.key(0), stats)
    out2 = test.decide(jax.random.key(0), stats._replace(log_ratio=lambda b: 0.5 * b))
    assert int(out.batch_size) == int(out2.batch_size) == M
    assert abs(float(out.epsilon) - 8.4 / np.sqrt(M)) < 0.05
    # standardised moments: rescaling every Lambda_i (same minibatch) leaves epsilon unchanged
    np.testing.assert_allclose(float(out.epsilon), float(out2.epsilon), rtol=1e-4)


def test_nan_ratio_is_flagged_and_rejected():
    r, psi = population(1000, 0.0, 5.0, seed=1)
    r[17] = np.nan
    acc, bs, _ = acceptance_draws(mh_minibatch(1000), r, psi, 10, seed=1)
    assert not acc.any()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size m=0"),
        ({"batch_size": -5}, "batch_size m=-5"),
        ({"batch_size": 1}, ">= 2"),
        ({"batch_size": 2.5}, "integer"),
        ({"sigma": 0.0}, "sigma=0.0"),
        ({"sigma": LOGISTIC_SD}, "pi/sqrt\\(3\\)"),
        ({"sigma": 2.5}, "sigma=2.5"),
        ({"sigma": float("nan")}, "sigma=nan"),
        ({"delta": 0.0}, "delta=0.0"),
        ({"delta": 1.5}, "delta=1.5"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mh_minibatch(**kwargs)


def test_batch_larger_than_data_is_rejected():
    with pytest.raises(ValueError, match="m=200 exceeds the number of data points N=100"):
        mh_minibatch(200).validate(100)
