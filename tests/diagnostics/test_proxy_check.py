"""The Pareto-k check of the proxy after sampling: it warns where the proxy is wrong across the draws (five Cauchy
rows, whose posterior has polynomial tails, draws spread as over-dispersed chains leave them), and stays quiet on
a well-behaved model and once the rows the proxy cannot see are an exact stratum. On draws exactly from the proxy
posterior its power is lower (``benchmarks/stratum_cost.py`` measures it)."""

from __future__ import annotations

import re
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, mode_and_factor, posterior_a
from helpers_glm import glm_data, glm_quadrature

from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.diagnostics.proxy_check import (
    WEIGHTS_MATTER,
    ProxyCheck,
    check_proxy,
    pareto_threshold,
    spread_ratio,
    warn_check,
)
from minibatch_mcmc.models import logistic_regression


def _laplace_draws(centre, factor, count, seed):
    """``(1, 2 * count, d)``: draws of the Laplace approximation (the check reads the second half)."""
    z = np.random.default_rng(seed).standard_normal((2 * count, centre.size))
    return jnp.asarray((centre + z @ factor.T)[None], jnp.float32)


@pytest.fixture(scope="module")
def cauchy():
    data, idx = cauchy_rows_data(2_000)
    centre, factor = mode_and_factor(data)
    model = cauchy_rows_model()
    return model, data, idx, taylor_proxy(model, data, jnp.asarray(centre, jnp.float32)), centre, factor


def test_warns_when_the_proxy_is_wrong_over_the_draws(cauchy):
    """Draws from the Laplace approximation widened twice, where the posterior of ``a`` has Cauchy-row tails: the
    importance ratios' k-hat is above the 100-draw threshold 0.5 and the warning states it (k-hat was 0.87 to
    2.16 over seeds 0-4 of these draws, so the seed is not picked)."""
    model, data, _, proxy, centre, factor = cauchy
    with pytest.warns(
        UserWarning, match=r"Pareto k-hat of the full-data / proxy importance ratios is \d\.\d\d > 0\.50"
    ):
        out = check_proxy(model, data, proxy, proxy.centre, _laplace_draws(centre, 2.0 * factor, 100, 0))
    assert not out.ok and out.num_draws == 100 and out.k_hat > pareto_threshold(100) == 0.5


def test_quiet_with_the_stratum(cauchy):
    """The same draws, with the five rows exact: the ratios left are those of Gaussian rows, no warning."""
    model, data, idx, proxy, centre, factor = cauchy
    est = stratify(model, data, proxy, idx)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_proxy(model, data, est, proxy.centre, _laplace_draws(centre, 2.0 * factor, 100, 0))
    assert out.ok and out.log_ratio_range < 0.05


def test_quiet_on_a_well_behaved_model():
    """Logistic regression, N = 5000, draws from its Laplace approximation (moves between them larger than a tuned
    step): no warning; the normality check's mean acceptance-probability error is below 0.02 (it was 1.2e-3)."""
    data = glm_data(5_000, (0.3, -0.8), 8)
    _, _, mode, cov = glm_quadrature(data, 5.0, points=3)
    model = logistic_regression(prior_scale=5.0)
    proxy = taylor_proxy(model, data, jnp.asarray(mode, jnp.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draws = _laplace_draws(mode, np.linalg.cholesky(cov), 100, 1)
        out = check_proxy(model, data, proxy, proxy.centre, draws, records=_records(draws, residual_sd=1e-3))
    assert out.ok and out.data_used == 100 * 5_000 and out.batch_size == 50 and out.acceptance_error < 0.02, out


def _records(draws, batch_size=50, residual_sd=1e-7):
    """The per-step records ``check_proxy`` reads: the minibatch size and the residual s.d. the run saw."""
    shape = np.asarray(draws).shape[:2]
    return {"batch_size": np.full(shape, batch_size), "residual_sd": np.full(shape, residual_sd)}


def test_normality_check_flags_rows_left_to_the_minibatch(cauchy):
    """Issue 19's Cauchy case with no stratum: at moves between Laplace draws the exact residuals over all 2000 rows
    are five spikes, so the 50-row mean is far from normal (excess kurtosis 22, skewness 2.6 here) and the mean
    acceptance-probability error (0.24) is far above 0.02. The warning names the measured value, the threshold and the fix.
    (Pareto-k flags these draws too, k-hat 1.01; on a sampled run of this case it did not, k-hat 0.35.)"""
    model, data, _, proxy, centre, factor = cauchy
    draws = _laplace_draws(centre, factor, 100, 0)
    with pytest.warns(UserWarning) as caught:
        out = check_proxy(model, data, proxy, proxy.centre, draws, records=_records(draws))
    message = " ".join(str(w.message) for w in caught)
    assert re.search(
        r"mean acceptance-probability error of 0\.\d+ > 0\.02 per step.*Enable the exact stratum", message
    ), message
    assert not out.normal_ok and out.batch_size == 50 and out.acceptance_error > 0.1, out
    assert out.excess_kurtosis > 4 and out.sd_ratio > 1e3, out
    with pytest.warns(UserWarning, match="the minibatches saw the residuals") as caught:  # rows seen: no stratum advice
        warn_check(out._replace(sd_ratio=1.03, k_hat=0.0))
    assert "exact stratum" not in str(caught[0].message)


def test_normality_check_quiet_with_the_stratum(cauchy):
    """The same moves with the five rows exact (the rest are Gaussian rows, residuals ~0): the mean
    acceptance-probability error stays far below 0.02 (it was 1e-5 here), and nothing warns."""
    model, data, idx, proxy, centre, factor = cauchy
    draws = _laplace_draws(centre, factor, 100, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_proxy(model, data, stratify(model, data, proxy, idx), proxy.centre, draws, records=_records(draws))
    assert out.ok and out.acceptance_error < 1e-3, out


@pytest.mark.slow
def test_auto_sample_runs_flagged_and_not():
    """(~100 s.) Sampled runs, N = 2000, 4 chains x 1000: issue 19's Cauchy case with the stratum off has a large
    per-step acceptance-probability error (0.21 measured), kept as information. The warm-up sized its minibatch to
    1000 rows, so its posterior is nearly right: ``a``'s s.d. is off by +6.5% (run s.e. 2.4%) against quadrature,
    which the coupled exact continuation (issue 32) estimated as +6.2% (s.e. 4.6%), not beyond the 5% tolerance by
    2 s.e., so it stays quiet; its estimate must agree with quadrature. With the stratum on (6.5e-6) and on a
    logistic regression (2e-3) nothing warns. (The five Cauchy rows' warning: ``test_posterior_error.py``.)"""
    from minibatch_mcmc.warmup import auto_sample

    data, _ = cauchy_rows_data(2_000)
    runs = {}
    for stratum in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res, w = auto_sample(
                cauchy_rows_model(),
                data,
                jnp.zeros(2),
                num_samples=1000,
                num_chains=4,
                key=1,
                progress=False,
                stratum=stratum,
            )
        runs[stratum] = (
            w.proxy_check,
            [str(c.message) for c in caught if "moved the posterior" in str(c.message)],
            res,
        )
    (off, off_warned, res), (on, on_warned, _) = runs[False], runs[True]
    assert not off.normal_ok and off.acceptance_error > 0.1 and off.ok == (not off_warned), off
    post, (_, sa) = off.posterior, posterior_a()
    a = np.asarray(res.kernel_positions)[:, 500:, 0].ravel()
    true_sd = sa / a.std() - 1.0
    assert abs(post.sd_error[0] - true_sd) < 3 * np.hypot(post.sd_se[0], 0.03), (post, true_sd)
    assert on.ok and on.acceptance_error < 1e-3 and not on_warned, on
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, w = auto_sample(
            logistic_regression(prior_scale=5.0),
            glm_data(2_000, (0.3, -0.8), 8),
            jnp.zeros(2),
            num_samples=1000,
            num_chains=4,
            key=1,
            progress=False,
        )
    assert w.proxy_check.ok and w.proxy_check.acceptance_error < 0.02, w.proxy_check
    assert not [c for c in caught if "moved the posterior" in str(c.message)]


def test_pareto_part_quiet_only_where_the_weights_cannot_matter():
    """A k-hat above the threshold fails unless the log ratios' s.d. is within ``WEIGHTS_MATTER`` (0.05 nats, where no
    mean can move by 5% of an s.d.); at 4x that spread the same k-hat fails. Catches a gate that silences every k-hat,
    or one that ignores the spread."""
    base = ProxyCheck(
        k_hat=1.0,
        threshold=0.5,
        num_draws=100,
        log_ratio_sd=WEIGHTS_MATTER,
        log_ratio_range=0.3,
        data_used=0,
        seconds=0.0,
    )
    assert base.pareto_ok and base._replace(k_hat=0.4, log_ratio_sd=1.0).pareto_ok
    assert not base._replace(log_ratio_sd=4 * WEIGHTS_MATTER).pareto_ok


def test_spread_ratio_where_the_run_recorded_no_spread():
    """``sd_ratio`` is the exact residual s.d. over the recorded one; a run whose minibatches all had one residual (a
    rare-category logistic: the rows without it do not move under the rare coefficient's move) recorded 0, which
    divided by zero: inf where the exact residuals spread, 1 where they do not, nan where nothing was recorded."""
    assert spread_ratio(3.0, 1.5) == 2.0
    assert spread_ratio(1e-9, 0.0) == float("inf") and spread_ratio(0.0, 0.0) == 1.0
    assert np.isnan(spread_ratio(1.0, float("nan")))
