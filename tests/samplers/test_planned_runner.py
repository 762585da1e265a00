"""An out-of-core run compiles no host callback (so JAX's persistent cache keeps its block) and draws what the same
run on the rows in memory draws, whether its steps read only their first minibatch or grow past it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.acceptance import naive_minibatch, penalty_test, scalable_mh, tunamh
from minibatch_mcmc.acceptance.thinning import ROWS_AHEAD
from minibatch_mcmc.control_variates import glm_proxy
from minibatch_mcmc.data.memmap import open_npy
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample


def logistic_rows(n: int) -> dict:
    """A small logistic regression's rows (float32), fixed seed."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(x @ np.array([0.5, -0.3, 0.2]))))).astype(np.float32)
    return {"x": x, "y": y}


def on_disk(tmp_path, rows: dict):
    """The rows as ``.npy`` files opened out of core."""
    for k, v in rows.items():
        np.save(tmp_path / f"{k}.npy", v)
    return open_npy({k: tmp_path / f"{k}.npy" for k in rows})


def callbacks_traced(monkeypatch) -> list:
    """Every ``jax.pure_callback`` traced from now on (what keeps a program out of JAX's persistent cache)."""
    seen, original = [], jax.pure_callback

    def counting(*args, **kwargs):
        seen.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(jax, "pure_callback", counting)
    return seen


FIXED = dict(proposal=random_walk(0.05), test=naive_minibatch(20), num_samples=50, num_chains=2, key=7)
"""A run whose test reads a fixed minibatch of 20 rows at every step."""
START = jnp.asarray([0.5, -0.3, 0.2], jnp.float32)


def test_out_of_core_block_has_no_host_callback(tmp_path, monkeypatch):
    """A run whose test reads a fixed minibatch from a memory-mapped source traces no host callback: its rows are read
    on the host between chunks (before, every step's rows came through ``jax.pure_callback`` inside the compiled block,
    which JAX never writes to its persistent cache)."""
    source = on_disk(tmp_path, logistic_rows(400))
    seen = callbacks_traced(monkeypatch)
    disk = sample(logistic_regression(10.0), source, START, progress=False, **FIXED)
    assert seen == []
    assert disk.records["batch_size"].max() == 20


@pytest.mark.slow  # two block programs compiled: ~15 s on the loaded 2-core machine
def test_planned_rows_draw_the_in_memory_draws(tmp_path):
    """The run above draws what it draws on the rows in memory: a row looked up wrongly among the planned ones, or a
    plan made from other keys, would change the accepted moves; rounding is the only difference allowed (the two
    programs fuse differently)."""
    rows = logistic_rows(400)
    disk = sample(logistic_regression(10.0), on_disk(tmp_path, rows), START, progress=False, **FIXED)
    memory = sample(logistic_regression(10.0), rows, START, progress=False, **FIXED)
    np.testing.assert_array_equal(disk.records["accepted"], memory.records["accepted"])
    np.testing.assert_allclose(disk.positions, memory.positions, rtol=1e-5, atol=1e-6)
    assert 0.1 < disk.records["accepted"].mean() < 0.95  # moves both accepted and rejected: the draws have power


@pytest.mark.slow  # two block programs compiled (planned and callback): ~20 s on the loaded 2-core machine
def test_grown_minibatch_reruns_on_the_source(tmp_path):
    """Steps whose penalty test grows its minibatch past the first chunk (the plain estimator, no proxy) read rows that
    were not planned; their chunk is rerun on the source, so the draws and the rows read are still the in-memory run's
    (a step kept from the planned run would have used wrong rows)."""
    rows = logistic_rows(2000)
    source = on_disk(tmp_path, rows)
    kwargs = dict(proposal=random_walk(0.01), test=penalty_test(20), num_samples=50, num_chains=2, key=3)
    start = jnp.asarray([0.5, -0.3, 0.2], jnp.float32)
    disk = sample(logistic_regression(10.0), source, start, progress=False, **kwargs)
    memory = sample(logistic_regression(10.0), rows, start, progress=False, **kwargs)
    assert memory.records["batch_size"].max() > 20  # the case: some steps grew
    np.testing.assert_array_equal(disk.records["batch_size"], memory.records["batch_size"])
    np.testing.assert_array_equal(disk.records["accepted"], memory.records["accepted"])
    np.testing.assert_allclose(disk.positions, memory.positions, rtol=1e-5, atol=1e-6)


def bounded_run(rows: dict, test, step: float) -> dict:
    """``sample``'s settings for an exact bound-based test on the logistic rows: the GLM proxy's bounds and rows drawn by
    its alias table (a state-free ``row_draw``), a random walk of scale ``step``."""
    centre = jnp.asarray([0.5, -0.3, 0.2], jnp.float32)
    estimator = glm_proxy(rows, centre, family="logistic")
    return dict(proposal=random_walk(step), test=test, estimator=estimator, num_samples=60, num_chains=2, key=3)


@pytest.mark.slow  # two block programs compiled: ~40-80 s on the loaded 2-core machine
@pytest.mark.parametrize("build", [scalable_mh, tunamh], ids=["smh", "tunamh"])
def test_bound_based_tests_plan_their_rows(tmp_path, monkeypatch, build):
    """Scalable MH and TunaMH on an out-of-core source trace no host callback (their first rows, named from each step's
    key by the contract's ``rows_ahead``, are read between chunks) and draw what the run on the rows in memory draws:
    rows named from another key, or drawn otherwise than the pass draws them, would change the accepted moves."""
    rows = logistic_rows(2000)
    kwargs = bounded_run(rows, build(), 0.03)
    seen = callbacks_traced(monkeypatch)
    disk = sample(logistic_regression(10.0), on_disk(tmp_path, rows), START, progress=False, **kwargs)
    assert seen == []
    memory = sample(logistic_regression(10.0), rows, START, progress=False, **kwargs)
    assert disk.records["batch_size"].max() > 1 and 0.1 < disk.records["accepted"].mean() < 0.95  # power
    np.testing.assert_array_equal(disk.records["batch_size"], memory.records["batch_size"])
    np.testing.assert_array_equal(disk.records["accepted"], memory.records["accepted"])
    np.testing.assert_allclose(disk.positions, memory.positions, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # three block programs compiled (planned, callback, in memory): ~60-120 s on the loaded machine
def test_bound_based_steps_past_their_planned_rows_rerun_on_the_source(tmp_path):
    """With a step large enough that some TunaMH steps read more than ``ROWS_AHEAD`` rows or fall back to the full data,
    their chunks are rerun on the source: the draws and rows read are still the in-memory run's (a step kept from the
    planned run would have used substituted rows)."""
    rows = logistic_rows(2000)
    kwargs = bounded_run(rows, tunamh(), 0.12)
    disk = sample(logistic_regression(10.0), on_disk(tmp_path, rows), START, progress=False, **kwargs)
    memory = sample(logistic_regression(10.0), rows, START, progress=False, **kwargs)
    assert memory.records["batch_size"].max() > ROWS_AHEAD  # the case: some steps read past their planned rows
    np.testing.assert_array_equal(disk.records["batch_size"], memory.records["batch_size"])
    np.testing.assert_array_equal(disk.records["accepted"], memory.records["accepted"])
    np.testing.assert_allclose(disk.positions, memory.positions, rtol=1e-5, atol=1e-6)
