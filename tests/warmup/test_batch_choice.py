"""The default test's minibatch sized before sampling: the size chosen is the smallest on its grid whose predicted
per-step error is under ``PREDICTED_MAX`` (the prediction itself against an independent measurement:
``test_step_error.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup import auto_sample
from minibatch_mcmc.warmup.batch_choice import (
    MAX_GROWTH,
    MOVES,
    PREDICTED_MAX,
    choose_batch_size,
    laplace_pairs,
    residual_matrix,
    size_grid,
    smallest_batch,
)
from minibatch_mcmc.warmup.step_error import orders, step_error

N = 3000


@pytest.fixture(scope="module")
def moves():
    """A logistic regression (N = 3000, d = 3) with its proxy at the true coefficients, and 128 move pairs of s.d. 0.1
    per coordinate (about four times the posterior's), whose 50-row predicted error is above ``PREDICTED_MAX``: the residuals
    over all rows and the simulated minibatches' orders."""
    data, theta = make_logistic_data(jax.random.key(0), N, 3)
    model = logistic_regression(prior_scale=10.0)
    proxy = taylor_proxy(model, data, jnp.asarray(theta, jnp.float32))
    at, moved = laplace_pairs(0.1 * np.eye(3), MOVES, np.random.default_rng(0))
    d = residual_matrix(model, proxy, data, proxy.centre, at, moved).exact
    return model, data, proxy, d, orders(N, np.random.default_rng(1))


def test_the_smallest_size_under_the_limit_is_chosen(moves):
    """The chosen m's predicted error is at most ``PREDICTED_MAX`` and the size before it on the grid is above it; an error
    already under the limit (the same residuals at temperature 10) keeps the test's own m."""
    *_, d, order = moves
    choice = smallest_batch(d, order, N, 50, 1.0)
    assert choice.initial_error > PREDICTED_MAX >= choice.predicted_error and choice.batch_size > 50
    sizes = size_grid(50, N)
    before = sizes[sizes.index(choice.batch_size) - 1]
    assert step_error(d, order, N, before, 1.0).error > PREDICTED_MAX
    assert smallest_batch(d, order, N, 50, 10.0).batch_size == 50


def test_growth_stops_at_its_cap_with_a_warning(moves):
    """Residuals far too large for any affordable minibatch (the same ones at temperature 0.01: the estimate's s.d. 100x):
    the penalty test would grow its minibatch past ``MAX_GROWTH`` times m, which the warning names with the rows it would
    read; and a spike in one row of 3000 standing for 10^6 (hit by a 1000-row minibatch a third of the time) errs by
    more than ``PREDICTED_MAX`` at the cap, which the warning names too; nothing silent."""
    *_, d, order = moves
    with pytest.warns(
        UserWarning, match=r"would need more than m=1000 rows per test \(of 3000\).*reading \d+ rows per test"
    ):
        choice = smallest_batch(d, order, N, 50, 0.01)
    assert choice.rows > MAX_GROWTH * 50
    spike = np.random.default_rng(2).normal(0.0, 1e-9, (MOVES, N))
    spike[:, 7] += 1e-3 * np.linspace(-1.0, 1.0, MOVES)
    with pytest.warns(
        UserWarning, match=r"would need more than m=1000 rows per test \(of 1000000\).*predicted acceptance error"
    ):
        choice = smallest_batch(spike, order, 10**6, 50, 1.0)
    assert choice.batch_size == MAX_GROWTH * 50 == 1000 and choice.predicted_error > PREDICTED_MAX


def test_a_population_within_the_minibatch_is_left_alone(moves):
    """With m at least the population (every row read: the exact test) nothing is read or changed."""
    model, data, proxy, *_ = moves
    out = choose_batch_size(model, as_data_source(data), proxy, proxy.centre, np.eye(3), N, jax.random.key(0))
    assert (out.batch_size, out.data_used) == (N, 0)


@pytest.mark.slow
def test_readme_logistic_at_its_small_size_passes_the_check():
    """The README's logistic regression (d = 10) at its test size, N = 20,000, 4 chains x 400 draws: ``auto_sample`` at its
    defaults sizes the penalty test's minibatch (a ``batch`` phase), every step reads that many rows, and the check after
    sampling measures the per-step error the sizing predicted to be under ``PREDICTED_MAX``: its coupled decisions
    differ at under 0.02 of the steps (1.06% at key 1, with m = 50: before issue 32's calibration the sizing read the
    check's bound and asked for more rows). ~40 s."""
    data, _ = make_logistic_data(jax.random.key(0), 20_000, 10)
    model = logistic_regression(prior_scale=10.0)
    res, w = auto_sample(model, data, jnp.zeros(10), num_samples=400, num_chains=4, key=1, progress=False)
    assert "batch" in w.cost and w.proxy_check.ok, w.proxy_check
    assert np.all(np.asarray(res.records["batch_size"]) == w.test.batch_size)
    assert w.proxy_check.posterior is not None and w.proxy_check.posterior.disagreement < 0.02, w.proxy_check.posterior


@pytest.mark.slow
def test_weighted_residuals_need_fewer_rows():
    """Five Cauchy rows among 5,000 (``helpers_cauchy``): the uniform minibatch's predicted per-step error stays above
    ``PREDICTED_MAX`` up to the cap (warning with the estimate's skewness and kurtosis and naming the exact tests; 0.098 at
    1,000 rows, growing to 1,400), while rows drawn by their probe weights (``control_variates.importance``) get under it
    below the cap (791 rows), their error at 50 rows under 0.6 of the uniform one's (0.052 and 0.097) and their per-row
    excess kurtosis (``g2 = m`` times the estimate's) a tenth of the uniform one's or less: the sizing reads the weighted
    residuals, not the uniform ones. (Under the earlier bound the weighted rows needed at most a fifth of the cap; the
    per-step disagreement the sizing now predicts falls with the estimate's s.d. itself, not only its shape.)"""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "control_variates"))
    from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, mode_and_factor

    from minibatch_mcmc.control_variates.importance import importance_sample, probe_weights

    data, _ = cauchy_rows_data(5000, seed=3)
    centre, factor = mode_and_factor(data)
    model = cauchy_rows_model()
    proxy = taylor_proxy(model, data, jnp.asarray(centre, jnp.float32))
    weights = probe_weights(model, proxy, data, proxy.centre, factor, jax.random.key(1)).weights
    weighted = importance_sample(proxy, data, weights)
    source = as_data_source(data)
    with pytest.warns(UserWarning, match="excess kurtosis .*test='smh', 'mhss' or 'tunamh'"):
        uniform = choose_batch_size(model, source, proxy, proxy.centre, factor, 50, jax.random.key(2))
    chosen = choose_batch_size(model, source, weighted, proxy.centre, factor, 50, jax.random.key(2))
    assert uniform.batch_size == MAX_GROWTH * 50 and uniform.predicted_error > PREDICTED_MAX
    assert chosen.batch_size < uniform.batch_size and chosen.predicted_error <= PREDICTED_MAX
    assert chosen.initial_error < 0.6 * uniform.initial_error
    assert chosen.excess_kurtosis * chosen.batch_size < 0.1 * uniform.excess_kurtosis * uniform.batch_size
