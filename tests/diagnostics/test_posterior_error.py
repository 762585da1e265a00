"""The coupled exact continuation after sampling (``diagnostics.posterior_error``): on runs whose posterior is known
(closed form, quadrature, a long exact chain) it warns where a mean or an s.d. is off by more than the tolerance, and
only there, naming the parameters, and its estimate of each error agrees with the known error within its stated
Monte Carlo error (and the run's own). Each case fails on the original code: the check did not exist there, it stayed
quiet on the five Cauchy rows at N = 10^5 (acceptance error read 0 on its 2^15-row sample), and the per-step figure is
what warned on heavy tails (``benchmarks/posterior_check.py``)."""

from __future__ import annotations

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, posterior_a
from helpers_posterior import linear_data, linear_model, linear_posterior, student_t_data, student_t_model

from minibatch_mcmc.acceptance import mh_minibatch, naive_minibatch, penalty_test
from minibatch_mcmc.acceptance.exact import MetropolisTest
from minibatch_mcmc.diagnostics.exact_twin import coupled_accept, exact_continuation, start_steps, too_few_draws
from minibatch_mcmc.diagnostics.posterior_error import check_posterior
from minibatch_mcmc.models import exact_posterior, gaussian_mean
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.keys import as_run_key
from minibatch_mcmc.warmup import auto_sample


def _run_error(draws: np.ndarray, mean: np.ndarray, sd: np.ndarray):
    """The run's true error against the truth (``(truth - run mean) / run sd``, ``truth sd / run sd - 1``) and the
    run's own Monte Carlo s.e. of each (from ArviZ's ESS and the draws' kurtosis), over the second half the check reads."""
    late = draws[:, draws.shape[1] // 2 :]
    flat = late.reshape(-1, late.shape[-1])
    m, s = flat.mean(0), flat.std(0)
    ess = np.asarray(az.ess(az.convert_to_dataset(late[None] if late.ndim == 2 else late)).to_array()).ravel()
    kurt = np.mean(((flat - m) / s) ** 4, axis=0)
    return (mean - m) / s, 1.0 / np.sqrt(ess), sd / s - 1.0, np.sqrt((kurt - 1.0) / (4.0 * ess))


def _agrees(out, draws, mean, sd, width=3.0):
    """Each estimate within ``width`` combined s.e. of the known error; returns the table for the assertion message."""
    tm, tm_se, ts, ts_se = _run_error(draws, mean, sd)
    ok_m = np.abs(out.mean_bias - tm) <= width * np.hypot(out.mean_se, tm_se)
    ok_s = np.abs(out.sd_error - ts) <= width * np.hypot(out.sd_se, ts_se)
    table = {
        "estimated mean": out.mean_bias.round(3),
        "true mean": tm.round(3),
        "estimated sd": out.sd_error.round(3),
        "true sd": ts.round(3),
        "se": (out.mean_se.round(3), out.sd_se.round(3), tm_se.round(3), ts_se.round(3)),
    }
    return bool(np.all(ok_m) and np.all(ok_s)), table


def test_exact_twin_accepts_at_the_exact_rate():
    """The exact chain's decision on the run's random numbers accepts with ``min(1, e^Delta)`` (penalty, naive) and
    ``sigmoid(Delta)`` (MHminibatch, to the correction table's error) over 20,000 keys: a coupling that changed the
    exact chain's law (e.g. the penalty's ``u_B`` kept, or a uniform reused for the normal draw) would be caught
    (binomial s.e. 0.0035)."""
    keys = jax.random.split(jax.random.key(3), 20_000)
    deltas = np.array([-1.0, 0.3])
    metropolis, barker = np.minimum(1.0, np.exp(deltas)), 1.0 / (1.0 + np.exp(-deltas))
    for test, want in ((penalty_test(50), metropolis), (naive_minibatch(20), metropolis), (mh_minibatch(50), barker)):
        rates = jax.jit(  # one program per test, not op by op
            lambda ks, ds: jnp.mean(jax.vmap(lambda k: jax.vmap(lambda d: coupled_accept(test, k, d))(ds))(ks), axis=0)
        )
        rate = np.asarray(rates(keys, jnp.asarray(deltas, jnp.float32)))
        assert np.all(np.abs(rate - want) < 4 * np.sqrt(want * (1 - want) / keys.size) + 2e-3), (test.name, rate, want)


def _gaussian_run(test, estimator=None, n=2_000, seed=0):
    """A 2-d Gaussian mean (closed form) sampled with ``test`` and a random walk at the posterior scale (4 x 2000)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, 2)) + np.array([1.0, -0.5])).astype(np.float32)
    model = gaussian_mean()
    mean, var = exact_posterior(x)
    prop = random_walk(scale=1.5 * float(np.sqrt(var)))
    starts = jnp.asarray(mean + np.sqrt(var) * rng.standard_normal((4, 2)), jnp.float32)
    res = sample(
        model,
        x,
        starts,
        proposal=prop,
        test=test,
        estimator=estimator,
        num_samples=2000,
        num_chains=4,
        key=seed,
        batched_init=True,
        progress=False,
    )
    return model, x, prop, res, mean, np.full(2, np.sqrt(var))


def test_warns_on_a_wrong_run_and_estimates_its_error():
    """A run made wrong on purpose: the naive plug-in test on 20 of 2,000 rows, no proxy (its chain is far too wide).
    The check, on the run's own draws and keys (what ``auto_sample`` does, and the only way now), warns naming both
    coordinates' s.d., and its estimates agree with the closed form's errors."""
    model, x, prop, res, mean, sd = _gaussian_run(naive_minibatch(20))
    with pytest.warns(UserWarning, match=r"theta\[0\]: .*s\.d\. off by -\d+%.*theta\[1\]") as caught:
        out = check_posterior(
            model, x, prop, naive_minibatch(20), None, res.kernel_positions, run_key=0, records=res.records
        )
    assert "a larger minibatch (naive_minibatch" in str(caught[0].message)
    ok, table = _agrees(out, np.asarray(res.kernel_positions), mean, sd)
    assert not out.ok and np.all(out.sd_flagged) and ok, table


def test_exact_twin_retraces_the_run_on_its_keys():
    """Run with the exact Metropolis test, the exact twin started at a draw and stepped on the keys the run drew next
    (``exact_continuation``) retraces the run's next ``T`` draws, to float32 rounding, at every start: a key taken one
    step off, from another chain, or split another way would leave the run's path at the first proposal (a random walk
    at 1.5 posterior s.d.s), and with it the coupling the check's power rests on."""
    model, x, prop, res, _, _ = _gaussian_run(MetropolisTest())
    draws = np.asarray(res.kernel_positions, np.float64)
    chain, step = start_steps(4, draws.shape[1], 64, 8)
    assert set(chain) == {0, 1, 2, 3} and step.min() >= draws.shape[1] // 2 and step.max() + 8 < draws.shape[1]
    path, accepted, _ = exact_continuation(
        model,
        x,
        prop,
        MetropolisTest(),
        None,
        x.shape[0],
        jnp.asarray(draws[chain, step], jnp.float32),
        chain,
        step,
        as_run_key(0, 4),
        4,
        8,
        1.0,
        lambda v: v,
    )
    ahead = step[:, None] + np.arange(1, 9)
    np.testing.assert_allclose(np.asarray(path), draws[chain[:, None], ahead], rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.asarray(accepted), np.asarray(res.records["accepted"])[chain[:, None], ahead])
    assert 0.2 < np.mean(np.asarray(accepted)) < 0.9  # the path moves: retracing it is not retracing a standing chain


def test_an_exact_run_is_skipped_with_its_reason():
    """The same model sampled with the exact Metropolis test has no minibatch error: the check reads no row, steps no
    chain, says why and stays quiet (before, it ran 128 x 16 full-data steps to estimate errors of 0). Without the run's
    key and records it is one clear error (there is no second way that steps the run's kernel again)."""
    model, x, prop, res, _, _ = _gaussian_run(MetropolisTest())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_posterior(
            model, x, prop, MetropolisTest(), None, res.kernel_positions, run_key=0, records=res.records
        )
    assert (
        out.ok
        and out.starts == 0
        and out.data_used == 0
        and "metropolis" in out.skipped
        and "no minibatch error" in out.skipped
    )
    with pytest.raises(ValueError, match="run_key= .* records="):
        check_posterior(model, x, prop, MetropolisTest(), None, res.kernel_positions, run_key=None, records=None)


@pytest.mark.parametrize("samples", [20, 31, 32, 33, 34, 100])
def test_a_run_too_short_for_the_continuations_is_skipped_not_refused(samples):
    """A short run (20 draws, 16 steps) used to end the whole fit in a ValueError from the check; now the check is
    skipped with the reason exactly when no start in the second half (from draw ``samples // 2``) leaves 16 draws after
    it: below ``2 * 16 + 1 = 33`` draws, counted here by hand (at 32 the second half starts at 16, and 16 + 16 > 31;
    at 33 it starts at 16 and 16 + 16 = 32 is the last draw). ``start_steps`` refuses exactly those runs."""
    first_start, last_start = samples // 2, samples - 1 - 16
    too_short = last_start < first_start
    assert too_short == (samples < 33)
    why = too_few_draws(samples, 16)
    assert bool(why) == too_short
    assert not why or (f"{samples} draws" in why and "at least 33" in why)
    if too_short:
        with pytest.raises(ValueError, match="at least 33"):
            start_steps(2, samples, 5, 16)
    else:
        chain, step = start_steps(2, samples, 5, 16)
        assert step.min() >= samples // 2 and step.max() + 16 <= samples - 1


def _auto(model, data, theta0, **kw):
    """``auto_sample`` (4 x 1000) with its warnings caught."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, w = auto_sample(model, data, theta0, num_samples=1000, num_chains=4, progress=False, key=0, **kw)
    said = [str(c.message) for c in caught]
    assert not [m for m in said if "normal approximation is off" in m or "Pareto k-hat" in m], said  # information now
    return res, w, [m for m in said if "minibatch test moved the posterior" in m]


@pytest.mark.slow
@pytest.mark.parametrize("n", [20_000, 100_000])
def test_linear_model_on_cauchy_noise_is_quiet(n):
    """Issue 32's first false alarm: a Gaussian linear model (noise s.d. 1 known) on Cauchy-noise data. Its draws equal
    the closed form; the check must not warn and its estimates agree with the closed form's (null) errors."""
    data = linear_data(n)
    res, w, said = _auto(linear_model(), data, jnp.zeros(3))
    assert not said and w.proxy_check.ok, said
    mean, sd = linear_posterior(data)
    ok, table = _agrees(w.proxy_check.posterior, np.asarray(res.kernel_positions), mean, sd)
    assert ok, table


@pytest.mark.slow
@pytest.mark.parametrize("n", [20_000, 100_000])
def test_five_cauchy_rows_left_to_the_minibatch_warn(n):
    """The true alarm: five Cauchy rows among Gaussian ones, the exact stratum off, so the minibatch misses them and
    ``a``'s s.d. comes out about 20% small (quadrature: 1.056). The check warns naming ``theta[0]`` (and not
    ``theta[1]``, which is right), advises the stratum, and its estimate of ``a``'s s.d. error agrees with
    the quadrature's. At N = 10^5 the exact twin reads a sample of the rows where it settles the decision
    (``twin_sums``: the five rows are in its heavy set, every other row's residual is 0), so the check reads under 400
    passes over N where reading every row at every step took 100 x 16 = 1,600 (the original code)."""
    data, _ = cauchy_rows_data(n)
    res, w, said = _auto(cauchy_rows_model(), data, jnp.zeros(2), stratum=False)
    out = w.proxy_check.posterior
    assert len(said) == 1 and "theta[0]: " in said[0] and "theta[1]" not in said[0] and "exact stratum" in said[0], said
    ma, sa = posterior_a()
    draws = np.asarray(res.kernel_positions)
    ok, table = _agrees(
        out._replace(
            names=out.names[:1],
            mean_bias=out.mean_bias[:1],
            mean_se=out.mean_se[:1],
            sd_error=out.sd_error[:1],
            sd_se=out.sd_se[:1],
        ),
        draws[..., :1],
        np.array([ma]),
        np.array([sa]),
    )
    assert out.sd_flagged[0] and ok, table
    assert n < 65_536 or out.passes < 400, out.passes


@pytest.mark.slow
def test_student_t_regression_on_skewed_heavy_tails_is_quiet():
    """Issue 32's robust regression, small: ``StudentT(nu, X beta, sigma)`` with ``nu`` and ``sigma`` estimated, on a
    right-skewed heavy-tailed response (N = 20,000). Against a long exact chain (the same proposal, the full-data
    Metropolis test, 4 x 3000) its draws agree; the check must not warn, and its estimates agree with the errors the
    exact chain shows."""
    model, data = student_t_model(), student_t_data(20_000)
    res, w, said = _auto(model, data, jnp.array([0.0, 0.0, 0.0, 0.0, 1.0]))
    assert not said and w.proxy_check.ok, said
    exact = sample(
        model,
        data,
        np.asarray(res.kernel_positions)[:, -1],
        proposal=w.proposal,
        test=MetropolisTest(),
        num_samples=3000,
        num_chains=4,
        key=5,
        batched_init=True,
        progress=False,
    )
    flat = np.asarray(exact.kernel_positions)[:, 300:].reshape(-1, 5)
    ok, table = _agrees(w.proxy_check.posterior, np.asarray(res.kernel_positions), flat.mean(0), flat.std(0), width=3.5)
    assert ok, table
