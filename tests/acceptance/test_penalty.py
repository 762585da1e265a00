"""The penalty test: detailed balance of one step against the exact float64 log ratio, its acceptance against the
closed form for Gaussian noise, the estimated-variance penalty against a chi-square quadrature, posteriors at
temperature 1 against exact ones, and its argument checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import glm_data, glm_quadrature
from helpers_ratio import compile_program
from scipy import stats

from minibatch_mcmc.acceptance import penalty_test
from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.acceptance.penalty import penalty
from minibatch_mcmc.control_variates import proxy_hmc, taylor_proxy
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean, logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample

N_ROWS, STEP, GAP = 5_000, 8e-4, -0.3
"""A one-step pair: ``theta = 0``, ``theta' = STEP`` on ``N_ROWS`` Gaussian rows whose mean is ``GAP``: the per-row
ratios ``STEP (x_i - STEP/2)`` are Gaussian, ``Delta`` is about -1.2 and the 50-row estimate's s.d. about 0.57."""
KEYS = 100_000


def _gaussian_acceptance(delta: float, s: float) -> float:
    """Mean acceptance of ``min(1, exp(x - s^2/2))`` for ``x ~ N(delta, s^2)`` (closed form)."""
    return stats.norm.cdf((delta - s * s / 2) / s) + np.exp(delta) * stats.norm.cdf((-delta - s * s / 2) / s)


@pytest.fixture(scope="module")
def one_step():
    """Forward and reverse acceptance rates of the pair over ``KEYS`` keys, the exact ``Delta`` and the estimate's exact s.d."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(N_ROWS)
    x = (x - x.mean() + GAP).astype(np.float32)
    r64 = STEP * (x.astype(np.float64) - STEP / 2)  # log p(x|theta') - log p(x|theta), unit noise, in float64
    delta = float(r64.sum())  # flat prior and symmetric proposal: psi = 0
    s = N_ROWS * np.sqrt(r64.var() * (N_ROWS - 50) / (N_ROWS - 1) / 50)
    test = penalty_test(batch_size=50)
    data = jnp.asarray(x)

    def rate(keys: jax.Array, sign: jax.Array) -> jax.Array:
        def decide(key):
            log_ratio = lambda rows: sign * STEP * (rows - STEP / 2)  # the reverse move flips every per-row term
            return test.decide(key, Statistics(log_ratio, data, N_ROWS, jnp.float32(0.0), jnp.float32(1.0))).accepted

        return jnp.mean(jax.vmap(decide)(keys))

    keys = jax.random.split(jax.random.key(11), 2 * KEYS)
    forward, reverse = keys[:KEYS], keys[KEYS:]
    run = compile_program(rate, forward, jnp.float32(1.0), optimise=True)  # 2 x 10^5 decisions: worth optimising
    return float(run(forward, jnp.float32(1.0))), float(run(reverse, jnp.float32(-1.0))), delta, s


def test_one_step_satisfies_detailed_balance(one_step):
    """``a(theta -> theta') / a(theta' -> theta) = exp(Delta)`` with ``Delta`` the exact float64 log ratio, within 4
    binomial standard errors of the log ratio (about 0.02 here). A test without the penalty (the naive plug-in) is off
    by about ``s^2 / 2 = 0.16``, a penalty of the wrong sign by twice that; so is one that tempers or drops the
    reverse move's flipped terms."""
    fwd, rev, delta, s = one_step
    se = np.sqrt((1 - fwd) / (fwd * KEYS) + (1 - rev) / (rev * KEYS))
    assert 0.45 < s < 0.7 and -1.6 < delta < -0.8  # the regime the tolerances were set for
    assert abs(np.log(fwd / rev) - delta) < 4 * se, (np.log(fwd / rev), delta, se)


def test_one_step_acceptance_is_the_gaussian_closed_form(one_step):
    """With Gaussian per-row terms the 50-row mean is Gaussian, so each direction's acceptance is
    ``Phi((D - s^2/2)/s) + e^D Phi((-D - s^2/2)/s)`` with ``s`` the estimate's exact s.d. (without replacement), within
    4 binomial standard errors (<= 0.006). A penalty of ``s^2`` or 0 moves it by ~0.05 (forward); the estimated variance's series
    moves it by less than 1e-4 (``test_penalty_series_balances_an_estimated_variance``)."""
    fwd, rev, delta, s = one_step
    for rate, d in ((fwd, delta), (rev, -delta)):
        ref = _gaussian_acceptance(d, s)
        assert abs(rate - ref) < 4 * np.sqrt(ref * (1 - ref) / KEYS), (rate, ref, d, s)


def _balance_error(pen, s: float, rows: int) -> float:
    """``max_D |log(a(D) / a(-D)) - D|`` for ``x ~ N(D, s^2)`` and a variance estimate ``v ~ s^2 chi2_{rows-1} / (rows-1)``
    independent of it, accepting with ``min(1, exp(x - pen(v)))`` (quadrature over ``v``, closed form over ``x``)."""
    q = (np.arange(20_000) + 0.5) / 20_000
    v = s * s * stats.chi2.ppf(q, rows - 1) / (rows - 1)
    u = pen(v)

    def a(d):
        return np.mean(stats.norm.cdf((d - u) / s) + np.exp(d - u + s * s / 2) * stats.norm.cdf((u - d - s * s) / s))

    return max(abs(np.log(a(d) / a(-d)) - d) for d in np.linspace(-3.0, 3.0, 13))


def test_penalty_series_balances_an_estimated_variance():
    """Ceperley and Dewing's series ``u_B`` for a variance estimated from ``b`` rows keeps detailed balance to < 2e-4 in
    the log ratio at the default bound ``s = sigma_max = 1`` and ``b = 50`` (the known-variance penalty ``v/2`` alone is
    off by ~5e-3, and a second term of the wrong size, ``v^2/(2(b+1))``, by ~3e-3: each fails); with all ``N`` rows the
    estimate is exact (``s2 = 0``) and the penalty vanishes."""

    def code(v):
        return np.asarray(
            penalty(jnp.asarray(v, jnp.float64 if jax.config.x64_enabled else jnp.float32), jnp.asarray(50)), np.float64
        )

    assert _balance_error(code, 1.0, 50) < 2e-4
    assert _balance_error(lambda v: v / 2, 1.0, 50) > 2e-3
    assert _balance_error(lambda v: v / 2 + v * v / (2 * 51), 1.0, 50) > 1e-3
    assert float(penalty(jnp.zeros(()), jnp.asarray(5000))) == 0.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 1}, "batch_size m=1 must be"),
        ({"batch_size": 2.5}, "batch_size m=2.5 must be"),
        ({"sigma_max": 0.0}, "sigma_max=0.0 must be"),
        ({"sigma_max": 2.5}, "sigma_max=2.5 must be"),
        ({"sigma_max": float("nan")}, "sigma_max=nan must be"),
        ({"sigma_max": True}, "sigma_max=True must be"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, message):
    """Each bad setting raises a ValueError naming the value and what is allowed (a silent m = 1 would divide by zero
    in the sample variance; a huge ``sigma_max`` would accept a perfect move less than a third of the time)."""
    with pytest.raises(ValueError, match=message):
        penalty_test(**kwargs)


def test_batch_larger_than_the_data_is_refused():
    """``validate(N)`` names ``m`` and ``N`` when the first minibatch cannot fit."""
    with pytest.raises(ValueError, match="batch_size m=50 exceeds the number of data points N=40"):
        penalty_test(batch_size=50).validate(40)


@pytest.mark.slow
def test_glm_posterior_with_proxy_hmc():
    """A 2-parameter logistic regression (N = 5000, K = 1, posterior by quadrature) with proxy HMC and the penalty test
    on 50 rows of the second-order proxy's residuals: means and variances within 4 ESS-based standard errors with
    ESS > 3200 (a 5% error in a posterior s.d. fails); acceptance near 1 (> 0.8: a Metropolis-type test)."""
    data = glm_data(5_000, (-0.5, 1.0), 21)
    mean, var, mode, cov = glm_quadrature(data, 10.0)
    model = logistic_regression(prior_scale=10.0)
    proxy = taylor_proxy(model, data, jnp.asarray(mode, jnp.float32), order=2)
    res = sample(
        model,
        data,
        jnp.asarray(mode, jnp.float32),
        proposal=proxy_hmc(proxy, model.log_prior, 0.8, num_steps=3, cov=cov),
        test=penalty_test(batch_size=50),
        estimator=proxy,
        num_samples=1600,
        num_chains=4,
        key=11,
        progress=False,
        block_size=1600,
    )
    _check(res, mean, var, burn=100)
    s = res.summary()
    assert s["acceptance_rate"] > 0.8 and s["data_per_test"] < 70, s


@pytest.mark.slow
def test_noisy_random_walk_posterior():
    """A conjugate Gaussian mean (N = 1000, d = 1, K = 1) with a random walk and no control variate: the 50-row estimate's
    s.d. is above ``sigma_max`` for most moves (the minibatch grows to ~165 rows), where both the penalty and the growth
    matter. Mean and variance within 4 ESS-based standard errors with ESS > 3200 (a 5% s.d. error fails; the same test
    with the penalty set to 0 gave a posterior s.d. 17% too wide, z = 15 on the variance)."""
    settings = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)
    x = np.random.default_rng(3).normal(0.4, 1.0, size=(1_000, 1)).astype(np.float32)
    mean, var = exact_posterior(x, 1.0, settings)
    res = sample(
        gaussian_mean(settings),
        x,
        jnp.asarray(mean, jnp.float32),
        proposal=random_walk(scale=0.45 * float(np.sqrt(var))),
        test=penalty_test(batch_size=50),
        num_samples=8400,
        num_chains=16,
        key=5,
        progress=False,
        block_size=4200,
    )
    _check(res, np.asarray(mean), np.asarray([var]), burn=200)
    s = res.summary()
    assert s["data_per_test"] > 55, s  # the noise reached the bound: the minibatch grew


def _check(res, mean, var, burn):
    chk = check_moments(np.asarray(res.positions)[:, burn:], mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
