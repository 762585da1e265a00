"""The automatic warm-up: from a poor start it finds the mode, a Laplace covariance and a tuned proposal, and
``auto_sample`` then matches a quadrature posterior at temperature 1 with small minibatches, its warm-up cost
reported apart."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import glm_data, glm_quadrature

from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch, mh_minibatch_skew, no_test, scalable_mh
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.samplers import sample
from minibatch_mcmc.warmup import TARGET_ACCEPT, auto_sample, decision_rule, warmup

EARLIER_DEFAULT = dict(proposal="langevin", test="mhminibatch")
"""``auto_sample``'s default before issue 21 (proxy-gradient MALA, tuned, with MHminibatch on 50 rows)."""


@pytest.fixture(scope="module")
def glm():
    data = glm_data(5_000, (0.3, -0.8), 8)
    mean, var, mode, _ = glm_quadrature(data, 5.0)
    return data, mean, var, mode


def test_warmup_finds_mode_and_reports_cost(glm):
    """From theta0 = (3, 3), many posterior s.d.s away, the warm-up's centre is within half a posterior s.d. of the
    quadrature mode (the lean warm-up's documented stop, a number here, not read from the code), MALA's tuned acceptance
    under MHminibatch is near the Barker-MALA optimum, and every phase reports rows, passes over N, seconds and compile
    seconds (summary() adds them up)."""
    data, mean, var, mode = glm
    w = warmup(
        logistic_regression(prior_scale=5.0),
        data,
        jnp.asarray([3.0, 3.0]),
        key=0,
        test="mhminibatch",
        proposal="langevin",
    )
    assert np.max(np.abs(np.asarray(w.centre) - mode) / np.sqrt(var)) < 0.5
    assert abs(w.acceptance - TARGET_ACCEPT[("barker", "langevin")]) < 0.15
    assert set(w.cost) == {"mode", "proxy", "influence", "tuning", "setup"} and w.influence.rows.size == 0
    assert w.cost["proxy"].data == 5_000 and w.total_data > 5_000 and w.total_seconds > 0
    s = w.summary()
    assert s["total_passes"] == pytest.approx(w.total_data / 5_000) and s["phases"]["proxy"]["passes"] == 1.0
    assert all(0 <= p["compile_seconds"] <= p["seconds"] for p in s["phases"].values())
    assert (
        s["phases"]["influence"]["rows"] == 2048
    )  # its first round rode on the proxy's pass: only the bulk rows were read


@pytest.fixture(scope="module")
def default_run(glm):
    """``auto_sample`` with its defaults (proxy HMC, the penalty test on 50 rows) from (3, 3): 4 chains x 1500 draws."""
    return auto_sample(
        logistic_regression(prior_scale=5.0),
        glm[0],
        jnp.asarray([3.0, 3.0]),
        num_samples=1500,
        num_chains=4,
        key=2,
        progress=False,
    )


def test_auto_sample_matches_quadrature(glm, default_run):
    """auto_sample at its defaults (proxy HMC from the Laplace fit, untuned; the penalty test) matches the quadrature
    posterior means and variances within |z| < 4 at ESS > 4000 per coordinate (the variance's s.e. is then at most
    2.3%, so a 5% s.d. error, 10.25% in the variance, shows as |z| > 4.5), reading 50 points per test."""
    data, mean, var, _ = glm
    res, w = default_run
    assert (w.kind, w.test.name, w.cost["tuning"].data) == ("proxy_hmc", "penalty", 0) and "batch" in w.cost  # m sized
    assert (w.why, w.summary()["proposal"]) == (
        "rule: no exact stratum, one mode",
        "proxy_hmc",
    )  # the ordinary GLM keeps proxy HMC
    chk = check_moments(np.asarray(res.positions)[:, 100:], mean, var)
    assert np.all(chk.ess > 4000), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
    assert res.summary()["data_per_test"] < 50.5 and w.proxy_check.ok


def test_default_kernel_reaches_the_posterior_from_far(glm, default_run):
    """The default kernel (the warm-up's proxy HMC, penalty test and estimator) from 8 starts 10 Laplace s.d. from the
    mode (whitened, every 45 degrees) reaches the posterior: after 100 steps, quadrature means and variances within
    |z| < 4 at ESS > 4000 (a 5% s.d. error shows as |z| > 4.5). At 20 s.d. proxy HMC alone can stay put for hundreds of
    steps in some directions (the quadratic proxy is far from the log-likelihood there, so the move back is rejected):
    the ``mixture`` proposal's random walk brings such a chain back (the slow test below)."""
    data, mean, var, mode = glm
    _, w = default_run
    res = sample(
        logistic_regression(prior_scale=5.0),
        data,
        far_starts(mode, w.covariance, 10.0),
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=800,
        num_chains=8,
        key=3,
        batched_init=True,
        progress=False,
    )
    x = np.asarray(res.positions)
    chk = check_moments(x[:, 100:], mean, var)
    assert np.all(chk.ess > 4000), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())


@pytest.mark.slow
def test_mixture_reaches_the_posterior_from_twenty_sd(glm):
    """``proposal="mixture"`` (proxy HMC, or a tuned random walk) with the penalty test from 8 starts 20 Laplace s.d.
    away: after 300 steps, quadrature means and variances within |z| < 4 at ESS > 4000 (a 5% s.d. error shows)."""
    data, mean, var, mode = glm
    w = warmup(logistic_regression(prior_scale=5.0), data, jnp.asarray([3.0, 3.0]), key=0, proposal="mixture")
    res = sample(
        logistic_regression(prior_scale=5.0),
        data,
        far_starts(mode, w.covariance, 20.0),
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=1500,
        num_chains=8,
        key=3,
        batched_init=True,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 300:], mean, var)
    assert np.all(chk.ess > 4000), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())


def far_starts(mode: np.ndarray, cov: np.ndarray, distance: float) -> jnp.ndarray:
    """Eight starts ``distance`` Laplace s.d. (whitened by ``cov``) from ``mode``, every 45 degrees."""
    angles = np.arange(8) * np.pi / 4
    u = np.stack([np.cos(angles), np.sin(angles)], 1)
    return jnp.asarray(mode + distance * u @ np.linalg.cholesky(cov).T, jnp.float32)


def test_targets_follow_the_decision_rule():
    """MHminibatch approximates Barker's rule (acceptance <= 1/2 for small moves), so it gets Barker's targets."""
    assert mh_minibatch().decision_rule == "barker" and MetropolisTest().decision_rule == "metropolis"
    assert mh_minibatch_skew().decision_rule == "barker"
    # the warm-up reads the declared rule: Barker's targets for Barker tests, Metropolis' for every other
    assert decision_rule(mh_minibatch()) == "barker" and decision_rule(scalable_mh()) == "metropolis"
    assert decision_rule(no_test()) == "metropolis"
    assert TARGET_ACCEPT[("barker", "langevin")] < 0.5 < TARGET_ACCEPT[("metropolis", "langevin")]


def test_bad_settings_raise(glm):
    data = glm[0]
    with pytest.raises(ValueError, match="proposal='hmc' must be one of 'langevin', 'random_walk'"):
        warmup(logistic_regression(), data, jnp.zeros(2), proposal="hmc")
    with pytest.raises(ValueError, match="target_accept=0.5 has no effect with proposal='proxy_hmc'"):
        warmup(logistic_regression(), data, jnp.zeros(2), proposal="proxy_hmc", target_accept=0.5)
    with pytest.raises(
        ValueError, match="target_accept=0.5 has no effect with proposal=None.*or name a tuned proposal"
    ):
        warmup(logistic_regression(), data, jnp.zeros(2), target_accept=0.5)
    with pytest.raises(ValueError, match="recentre=1 must be True or False"):
        warmup(logistic_regression(), data, jnp.zeros(2), recentre=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["langevin", "proxy_hmc", "mixture", "independence_t", "auto"])
def test_auto_sample_with_proxy_moves_matches_quadrature(glm, kind):
    """auto_sample with MHminibatch m=40 (Seita et al.'s Barker-type test) and the proxy-gradient MALA (tuned to the Barker
    target, the default before issue 21), an untuned proxy-posterior move (or proxy HMC mixed with a tuned random walk, or
    the move chosen by measured effective draws per second), from (3, 3): quadrature means and variances within |z| < 4
    at ESS > 3200 (a 5% s.d. error would show)."""
    data, mean, var, _ = glm
    res, w = auto_sample(
        logistic_regression(prior_scale=5.0),
        data,
        jnp.asarray([3.0, 3.0]),
        num_samples=6000 if kind == "langevin" else 3000,
        num_chains=4,
        key=2,
        test=mh_minibatch(batch_size=40),
        proposal=kind,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 200:], mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
    assert (w.cost["tuning"].data == 0) == (kind not in ("mixture", "langevin"))
    assert ("choose" in w.cost) == (kind == "auto")


@pytest.mark.slow
def test_auto_sample_sees_sparse_influential_rows():
    """Issue 19, case 1: 100,000 rows x ~ N(b, 1) and five rows x ~ Cauchy(a, 1), prior N(0, 10^2). auto_sample
    puts the five rows in an exact stratum and matches the quadrature mean (|z| < 4) and variance (|z| < 3) of
    ``a``; the variance's Monte Carlo s.e. (ESS-based, ~3% here) is asserted small enough that a 5% s.d. error
    (a >= 9.75% variance error) gives |z| > 3 and fails. On today's main the s.d. comes back near the Laplace
    s.d., ~20% low. ~60 s. (Keys 2, 3, 4 also pass: z of the variance 0.74, 0.14, 0.71.) With the earlier default,
    MALA + MHminibatch (``EARLIER_DEFAULT``): under today's proxy HMC + penalty test the variance's s.e. was ~2.5x
    larger at 1.6x the draws (the posterior of ``a`` is not the Laplace fit's), too little power for this check. With
    no proposal named, the warm-up's rule takes ``mixture`` here (the 5-row stratum): power 2.5 at these draws (key 1),
    4.0-6.0 at 20,000 draws on keys 1-4, all passing, so the test of the rule is the rare-category one below."""
    from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, posterior_a

    data, idx = cauchy_rows_data(100_000)
    mean, sd = posterior_a()
    res, w = auto_sample(
        cauchy_rows_model(),
        data,
        jnp.zeros(2),
        num_samples=5000,
        num_chains=4,
        key=1,
        progress=False,
        **EARLIER_DEFAULT,
    )
    np.testing.assert_array_equal(w.influence.rows, np.sort(idx))
    a = np.asarray(res.positions)[:, 500:, 0]
    chk = check_moments(a[..., None], np.array([mean]), np.array([sd**2]))
    assert chk.ess[0] > 2000, chk.ess
    assert 0.0975 * sd**2 / chk.se_var[0] > 3, chk.se_var  # the power to see a 5% s.d. error
    assert abs(chk.z_mean()[0]) < 4 and abs(chk.z_var()[0]) < 3, (
        chk.mean,
        chk.var,
        mean,
        sd**2,
        chk.z_mean(),
        chk.z_var(),
    )
    assert w.proxy_check.ok


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, draws", [(EARLIER_DEFAULT, 10_000), ({}, 24_000)], ids=["earlier_default", "default"]
)
def test_auto_sample_matches_a_rare_category_posterior(options, draws):
    """(~40 s: a mode search over 100,020 rows, 32 chains x 10,000 draws.) Issue 19, case 1, its realistic form:
    logistic regression with an intercept and a rare category (20 of 100,020 rows, 19 successes), prior N(0, 5^2).
    The warm-up puts exactly the 20 rare rows in the exact stratum (on the main before issue 19 there was none, and
    the test trusted the quadratic proxy on them), and the rare coefficient's mean and variance match 2-d quadrature
    (``helpers_rare.posterior_rare_coefficient``: mean 3.261, s.d. 1.138, skewness 0.88) within |z| < 4.

    Each s.e. is the larger of two honest ones: from ArviZ's ESS of the mean (``check_moments``) and from the spread
    of the 32 independent chains' own estimates. The skewed tail is visited in rare, long excursions: the bulk ESS
    of the squared deviations overstated their precision 3.6x (the cause of the variance z -3.7 and -4.0 that kept
    this test from being asserted), and on 16-chain runs even the ESS of the mean left the variance z-scores of nine
    seeds with s.d. ~1.8 instead of 1. Power: the variance's s.e. is asserted small enough that a 5% s.d. error (a
    9.75% variance error) gives an expected |z| >= 6, so it fails with probability > 0.97. (Key 3: s.d. 1.1339, the two
    variance s.e.s 0.0178 and 0.0177, z of the mean 0.86 and of the variance -0.55, power 7.1 s.e.s.) With the earlier
    default, MALA + MHminibatch (``EARLIER_DEFAULT``): under today's proxy HMC + penalty test the 32 chains' variance
    estimates spread so that 1.6x the draws left the power at 5.4 s.e.s (the skewed tail is not the Laplace fit's).

    ``default``: no proposal named, the warm-up's rule (``laplace_moves.default_kind``) sees the 20-row stratum and takes
    ``mixture`` (proxy HMC with a tuned random walk; asserted, with its reason), at 24,000 draws (~25-35 s). This is the
    test of the rule on a posterior the Laplace fit describes poorly: proxy HMC alone at the same draws and key had power
    1.3 s.e.s (its variance s.e. 5.6x the mixture's; at 16,000 draws, variance z -4.4), failing the power check. (Mixture,
    key 3: power 7.5, z of the mean -0.21 and of the variance 0.09; key 2: 6.9, -0.01, -0.61.) A rule that kept proxy HMC
    here fails the first assert, and a 5% s.d. error fails as above."""
    from helpers_rare import PRIOR_SCALE, posterior_rare_coefficient, rare_category_data

    data, idx = rare_category_data()
    mean, sd = posterior_rare_coefficient(data)
    res, w = auto_sample(
        logistic_regression(prior_scale=PRIOR_SCALE),
        data,
        jnp.zeros(2),
        num_samples=draws,
        num_chains=32,
        key=3,
        progress=False,
        **options,
    )
    assert (w.kind, w.why) == (
        (options["proposal"], "named") if options else ("mixture", "rule: an exact stratum of 20 rows")
    )
    np.testing.assert_array_equal(w.influence.rows, np.sort(idx))
    b = np.asarray(res.positions)[:, 1000:, 1]
    chk = check_moments(b[..., None], np.array([mean]), np.array([sd**2]))
    chains = b.shape[0]
    se_mean = max(chk.se_mean[0], b.mean(axis=1).std(ddof=1) / np.sqrt(chains))
    se_var = max(chk.se_var[0], b.var(axis=1).std(ddof=1) / np.sqrt(chains))
    assert 0.0975 * sd**2 / se_var > 6, (chk.se_var, se_var)  # the power to see a 5% s.d. error
    z_mean, z_var = (b.mean() - mean) / se_mean, (b.var() - sd**2) / se_var
    assert abs(z_mean) < 4 and abs(z_var) < 4, (b.mean(), b.var(), mean, sd**2, z_mean, z_var)
    assert w.proxy_check.ok, w.proxy_check


def test_auto_sample_reports_the_check_as_a_phase(glm, default_run):
    """The check after sampling is a ``check`` phase of the cost the user sees (its rows: all N = 5000 here, under
    ``CHECK_ROWS``, plus the continuation's; its seconds those ``ProxyCheck`` measured), listed by ``summary()`` and kept out of the warm-up's
    totals. Before, its seconds were reported nowhere but in ``w.proxy_check``."""
    _, w = default_run
    check, post = w.cost["check"], w.proxy_check.posterior
    rows = 5_000 + post.data_used  # issue 32: the coupled exact continuation's rows, K T N and the run's minibatches
    assert w.proxy_check.rows_read == 5_000 and post.data_used >= post.starts * post.steps * 5_000, w.proxy_check
    assert check.data == rows and check.passes == rows / 5_000, check
    assert check.seconds >= w.proxy_check.seconds > 0, (check, w.proxy_check)
    summary = w.summary()
    assert summary["phases"]["check"]["rows"] == rows
    assert w.total_seconds == pytest.approx(sum(c.seconds for k, c in w.cost.items() if k not in ("sampling", "check")))
    assert summary["total_rows"] == sum(c.data for k, c in w.cost.items() if k not in ("sampling", "check"))
