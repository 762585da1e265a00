"""The exact twin reading a sample of the rows where it settles the decision (``diagnostics.twin_sums``): the same
decisions as reading every row at every step, at a fraction of the row evaluations, and every row read again as soon
as an estimate strays from a full sum."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, mode_and_factor

from minibatch_mcmc.acceptance import penalty_test
from minibatch_mcmc.compiling import fast_compile_options
from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.control_variates.importance import importance_sample
from minibatch_mcmc.data.arrays import distinct_rows
from minibatch_mcmc.diagnostics import exact_twin, twin_sums
from minibatch_mcmc.diagnostics.posterior_error import check_posterior
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers.driver import sample

N = 1 << 16
"""Rows: the fewest at which the twin samples (``SAMPLE_FACTOR * MIN_SAMPLED`` is half of it)."""


@pytest.fixture(scope="module")
def run():
    """A logistic regression (d = 4) sampled with the penalty test on 20 rows and a first-order Taylor proxy at its
    float64 mode (residuals large enough that the minibatch and exact decisions differ at some steps), a random walk
    at 1.2 posterior s.d. (4 x 60 draws): the run the check continues."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 4)).astype(np.float32)
    y = (rng.random(N) < 1 / (1 + np.exp(-x @ np.array([1.0, -0.5, 0.3, 0.0])))).astype(np.float32)
    b, xd = np.zeros(4), x.astype(np.float64)
    for _ in range(10):
        p = 1 / (1 + np.exp(-xd @ b))
        hess = -(xd.T * (p * (1 - p))) @ xd
        b = b - np.linalg.solve(hess, xd.T @ (y - p))
    sd = np.sqrt(np.diag(np.linalg.inv(-hess)))
    model, data, centre = logistic_regression(), {"x": x, "y": y}, jnp.asarray(b, jnp.float32)
    estimator, proposal = (
        taylor_proxy(model, data, centre, order=1),
        random_walk(scale=jnp.asarray(1.2 * sd, jnp.float32)),
    )
    starts = jnp.asarray(b + sd * rng.standard_normal((4, 4)), jnp.float32)
    res = sample(
        model,
        data,
        starts,
        proposal=proposal,
        test=penalty_test(20),
        estimator=estimator,
        num_samples=60,
        num_chains=4,
        key=0,
        batched_init=True,
        progress=False,
    )
    return model, data, proposal, estimator, centre, res


def _check(run, **kw):
    model, data, proposal, estimator, centre, res = run
    return check_posterior(
        model,
        data,
        proposal,
        penalty_test(20),
        estimator,
        res.kernel_positions,
        run_key=0,
        records=res.records,
        starts=32,
        steps=8,
        centre=centre,
        warn=False,
        **kw,
    )


def test_sampled_twin_decides_as_the_full_data_twin_at_a_fraction_of_the_rows(run, monkeypatch):
    """32 starts x 8 steps at N = 2^16: reading every row at every step costs 256 passes; sampled, the twin reads every
    row only for the 8 first-step probe and audit starts and for undecided starts, plus 32 x 3,072 gathered rows a
    step (20 passes in all; 40 with the former blocks of 8,192 rows), so well under 100 passes. Its estimates equal the full-data twin's to float32 summation
    (1e-3 of an s.d.): one decision taken differently would move a start's final position by a random-walk step (1.2
    s.d.), its estimate by ~1.2 / 32 s.d.; the run's decisions differ from the exact ones at some steps, so the twins
    do move apart from the run. On the original code the check read 256 passes (and more from the run)."""
    sampled = _check(run)
    monkeypatch.setattr(exact_twin, "sampling_plan", lambda *a: twin_sums.Sampling(0, 0, 0))
    full = _check(run)
    assert full.passes > 256 and sampled.passes < 100, (full.passes, sampled.passes)
    np.testing.assert_allclose(sampled.mean_bias, full.mean_bias, atol=1e-3)
    np.testing.assert_allclose(sampled.sd_error, full.sd_error, atol=1e-3)
    assert sampled.disagreement == full.disagreement > 0


COMPILES = [0]
"""XLA backend compilations since this module was imported."""


def count_backend_compiles(event: str, duration: float, **_) -> None:
    """Monitoring listener: count XLA backend compilations."""
    if event == "/jax/core/compile/backend_compile_duration":
        COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(count_backend_compiles)


def test_the_check_compiles_two_programs_whatever_it_reads(run):
    """The check compiles the twin's step (the starts' states, the decision and the next candidates: ``advance``) and
    the gathered residual sums, once each, however many steps, starts, larger samples and full reads it makes (this run
    reads more than its planned passes: some decisions are left open and read again); no eager operation. Fails if
    the step is split into separate programs again (the original compiled init, proposing and deciding apart: 4
    programs, 13 compilations in a fresh process) or if a shape changes between steps or rounds (one compilation more
    per new shape). The probe of XLA's options (``compiling.backend_knows``, once per process) is made first."""
    fast_compile_options(0, 1)
    before = COMPILES[0]
    out = _check(run)
    planned = twin_sums.planned_evaluations(twin_sums.sampling_plan(N, 32, 8, run[4]), 32, 8, N) / N
    assert out.passes > planned, (out.passes, planned)
    assert COMPILES[0] - before <= 2, COMPILES[0] - before


@pytest.mark.slow
def test_an_estimate_that_strays_sends_every_later_step_to_every_row(run, monkeypatch):
    """With the decision and audit margins at 0 s.e. (so the first audited start's full sum lies outside its estimate's
    interval, ``SLACK`` shrunk to 0 as well), the twin must stop sampling after the first step: every later step reads
    every row for every start: 32 x 8 = 256 passes, plus the first step's sample (32 x 3,072 rows: 1.5 passes) and
    the run's own rows (under a pass)."""
    for name in ("AUDIT_Z", "DECISION_Z", "SLACK"):
        monkeypatch.setattr(twin_sums, name, 0.0)
    strayed = _check(run)
    sample = 32 * twin_sums.sampling_plan(N, 32, 8, run[4]).block / N
    assert 256 + sample <= strayed.passes < 256 + sample + 1, strayed.passes


@pytest.mark.slow
def test_rows_the_heavy_set_misses_are_caught_by_the_audit(monkeypatch):
    """Five Cauchy rows among 2^16 Gaussian ones (``helpers_cauchy``; a Taylor proxy at the float64 mode is exact on the
    Gaussian rows, so only the five carry residuals), the penalty test on 20 rows missing them. With the default heavy
    set the five are in it and the twin samples (under 100 passes); with a heavy set of one row the other four are left
    to a sample of 3,071 rows that mostly misses them, their s.e. reads 0, and the first step's audit must send the
    twin back to every row (over 256 passes). Both make the full-data twin's decisions: a twin that trusted the sample
    would take the minibatch's side where the four rows decide, and its s.d. estimate for ``a`` would move by several
    of its s.e. (the run misses the rows: about +20% in ``a``'s s.d.)."""
    data, _ = cauchy_rows_data(N)
    model, (mode, factor) = cauchy_rows_model(), mode_and_factor(data)
    centre = jnp.asarray(mode, jnp.float32)
    estimator = taylor_proxy(model, data, centre)
    proposal = random_walk(scale=jnp.asarray(1.5 * np.diag(factor), jnp.float32))
    starts = jnp.asarray(mode + np.diag(factor) * np.random.default_rng(1).standard_normal((4, 2)), jnp.float32)
    res = sample(
        model,
        data,
        starts,
        proposal=proposal,
        test=penalty_test(20),
        estimator=estimator,
        num_samples=100,
        num_chains=4,
        key=0,
        batched_init=True,
        progress=False,
    )
    run = (model, data, proposal, estimator, centre, res)
    sampled = _check(run)
    monkeypatch.setattr(twin_sums, "HEAVY_ROWS", 1)
    audited = _check(run)
    monkeypatch.setattr(exact_twin, "sampling_plan", lambda *a: twin_sums.Sampling(0, 0, 0))
    full = _check(run)
    assert sampled.passes < 100 and audited.passes > 256, (sampled.passes, audited.passes)
    for out in (sampled, audited):
        np.testing.assert_allclose(out.mean_bias, full.mean_bias, atol=1e-3)
        np.testing.assert_allclose(out.sd_error, full.sd_error, atol=1e-3)
    assert full.disagreement > 0


def test_the_first_step_reads_only_the_probe_starts_and_keeps_their_heavy_set(run, monkeypatch):
    """The first step reads every row for the ``PROBE_STARTS`` probe starts alone (two halves, which audit each other's
    heavy sets), not for 4 further audit starts as well (8 full reads: this test fails there), and its sums, flags and
    heavy set equal those of reading the probe starts in one pass with the rows' largest residuals (the heavy set the
    former code kept)."""
    model, data, _, estimator, centre, res = run
    k, steps = 32, 8
    plan = twin_sums.sampling_plan(N, k, steps, centre)
    reader = exact_twin.sampled_reader(model, estimator, centre, k, 4, steps, plan, N)
    draws = np.asarray(res.kernel_positions)
    at, to = draws[:, 30:38].reshape(k, 4), draws[:, 31:39].reshape(k, 4)
    calls = []
    original = twin_sums.full_sums
    monkeypatch.setattr(twin_sums, "full_sums", lambda *a, **kw: calls.append(a[4]) or original(*a, **kw))
    edge = np.zeros(k)
    lam, bad, reading = twin_sums.read_step(reader, twin_sums.first_reading(), 1, data, at, to, edge)
    probe = np.arange(twin_sums.PROBE_STARTS)
    assert sum(c.size for c in calls[:2]) == probe.size and not reading.full, [c.size for c in calls]
    lam_p, bad_p, rowmax = original(reader, data, at, to, probe, top=probe.size)
    np.testing.assert_allclose(lam[probe], lam_p, rtol=1e-6)
    np.testing.assert_array_equal(bad[probe], bad_p)
    np.testing.assert_array_equal(reading.heavy, twin_sums.heaviest(rowmax, plan.heavy)[0])


def test_a_lone_open_start_takes_the_nearest_decided_one_along():
    """A full read evaluates a group of ``FULL_STARTS`` starts whole: a lone open start is read with the decided start
    nearest its edge in s.e. (never a start already known), so that one is decided exactly and audited at no cost; an
    even number of open starts takes none."""
    est, edge, se = np.array([0.0, 5.0, 1.0, 9.0, 2.0]), np.zeros(5), np.ones(5)
    known = np.array([False, False, True, False, False])
    open_ = np.array([True, False, False, False, False])
    np.testing.assert_array_equal(twin_sums.paired(open_, known, est, edge, se), [0, 4])
    open_[3] = True
    np.testing.assert_array_equal(twin_sums.paired(open_, known, est, edge, se), [0, 3])


def importance_run(run):
    """The run's estimator drawn by weights ``1 + |x_1|^3`` (``M`` about 4 N positions) and its distinct rows."""
    model, data, _, estimator, centre, res = run
    est = importance_sample(estimator, data, 1.0 + np.abs(np.asarray(data["x"])[:, 0]) ** 3)
    return est, distinct_rows(est.population(data), est.size)


def test_an_importance_sampled_population_is_read_by_its_distinct_rows(run):
    """An importance-sampled estimator (row ``i`` at ``n_i`` positions, term ``r_i / n_i``): a full read evaluates each
    distinct row once, weighted by its copies (N evaluations, not M), and gives the sum over every position (reading
    all M positions with weight 1, the former full read) to float32 rounding of the sums (1e-5 relative; a row counted
    once instead of ``n_i`` times, or a position's row mistaken, moves a sum by a whole term); a sampled call's weights
    leave out exactly the drawn positions whose row is in the heavy set."""
    model, data, _, estimator, centre, res = run
    est, units = importance_run(run)
    assert units.position.size == N and est.size > 2 * N
    k, steps = 32, 8
    plan = twin_sums.sampling_plan(N, k, steps, centre)
    reader = exact_twin.sampled_reader(model, est, centre, k, 4, steps, plan, est.size, units)
    by_position = reader._replace(units=distinct_rows(None, est.size))
    draws = np.asarray(res.kernel_positions)
    at, to = draws[:, 30:38].reshape(k, 4), draws[:, 31:39].reshape(k, 4)[::-1]
    which = np.arange(8)
    lam, _, rowmax = twin_sums.full_sums(reader, data, at, to, which, top=4)
    every, _, _ = twin_sums.full_sums(by_position, data, at, to, which)
    np.testing.assert_allclose(lam, every, rtol=1e-5)
    assert np.all(lam != 0) and rowmax.size == N
    heavy, in_heavy = twin_sums.heaviest(rowmax, plan.heavy)
    reading = twin_sums.first_reading()._replace(heavy=heavy, in_heavy=in_heavy)
    idx, exact, sampled = twin_sums.draw_rows(plan, reading, est.size, (0, 1), True, units)
    drawn_rows = np.searchsorted(np.cumsum(units.copies), idx[heavy.size :], side="right")
    np.testing.assert_array_equal(idx[: heavy.size], units.position[heavy])
    np.testing.assert_array_equal(exact[: heavy.size], units.copies[heavy])
    np.testing.assert_array_equal(sampled[heavy.size :], ~in_heavy[drawn_rows])


@pytest.mark.slow
def test_an_importance_sampled_run_is_checked_as_by_every_position(run, monkeypatch):
    """On the run's draws and keys with the importance-sampled estimator, the sampled twin (distinct rows in full reads,
    positions sampled by the run's own weights) makes the full-data twin's decisions (every position at every step,
    ``exact_twin``'s streamed pass): the same estimates to float32 summation (1e-3 of an s.d.; one decision taken
    differently moves an estimate by ~1.2 / 32 s.d.), at under 100 passes over N against 256 over M."""
    model, data, proposal, _, centre, res = run
    est, _ = importance_run(run)

    def check():
        return _check((model, data, proposal, est, centre, res))

    sampled = check()
    monkeypatch.setattr(exact_twin, "sampling_plan", lambda *a: twin_sums.Sampling(0, 0, 0))
    full = check()
    assert sampled.passes < 100 and full.passes > 256 * est.size / N, (sampled.passes, full.passes)
    np.testing.assert_allclose(sampled.mean_bias, full.mean_bias, atol=1e-3)
    np.testing.assert_allclose(sampled.sd_error, full.sd_error, atol=1e-3)
    assert sampled.disagreement == full.disagreement


def test_one_call_a_block_serves_every_start(run):
    """The gathered sums take every start of a block in one call (one dispatch and one read back a block): a full read
    of the 8 probe and audit starts makes one call per block of rows, a sampled estimate for all 32 starts one call,
    where the original code made one per group of ``FULL_STARTS`` (4 and 16: this test fails there). Each start's sum
    equals reading that start alone (its group then padded with a copy), to float32 rounding of the per-block sums
    (1e-6 relative): a lone start is not mixed up with its padding."""
    model, data, _, estimator, centre, res = run
    k, steps = 32, 8
    plan = twin_sums.sampling_plan(N, k, steps, centre)
    reader = exact_twin.sampled_reader(model, estimator, centre, k, 4, steps, plan, N)
    calls = []
    counted = reader._replace(gathered=lambda *a: calls.append(1) or reader.gathered(*a))
    draws = np.asarray(res.kernel_positions)
    at = draws[:, 30:38].reshape(k, 4)
    to = at[::-1]  # every start paired with another draw: no sum is 0 by a rejected step
    first = np.arange(8)
    lam, bad, _ = twin_sums.full_sums(counted, data, at, to, first)
    assert len(calls) == -(-N // plan.block), (len(calls), -(-N // plan.block))
    alone = [twin_sums.full_sums(reader, data, at, to, np.array([i]))[0][0] for i in first]
    np.testing.assert_allclose(lam, alone, rtol=1e-6)
    assert not bad.any() and np.all(lam != 0)
    calls.clear()
    reading = twin_sums.read_step(reader, twin_sums.first_reading(), 1, data, at, to, np.zeros(k))[2]
    twin_sums.sampled_sums(counted, reading, (0, 2), data, at, to, 1)
    assert len(calls) == 1, len(calls)
