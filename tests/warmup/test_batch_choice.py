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


def test_integrated_terms_are_counted_as_read_to_their_float64_sum():
    """A Student-t regression (nu = 4, sigma = 1, intercept 100, N = 20,000) and its Taylor proxy, whose residuals take
    each row's difference integrated along the move (``models.shared_term.row_difference``): the terms the sizing and the
    check count (``Terms.exact``) are the terms as read, and each move's sum over the rows is within its float32
    rounding, ``4 eps sum_i (|l_i(theta') - l_i(theta)| + |q_i|)``, of the float64 sum computed independently (numpy, the
    proxy's ``q_i`` from the closed-form derivatives). The rounding floor set for a subtraction of ``l_i`` values
    (``influence.rounding_floors``, intercept 100 makes it ~1e-4 a row) would drop most of these true residuals and miss
    that bound on most moves: this fails if the floor is applied to them again."""
    from jax.flatten_util import ravel_pytree

    from minibatch_mcmc.control_variates.influence import rounding_floors
    from minibatch_mcmc.models.glm import student_t_regression

    n, nu = 20_000, 4.0
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 2))]).astype(np.float32)
    beta = np.array([100.0, 0.5, -0.3])
    y = (x @ beta + rng.standard_t(nu, n)).astype(np.float32)
    data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
    model = student_t_regression(nu=nu, sigma=1.0, prior_scale=10.0)
    proxy = taylor_proxy(model, data, jnp.asarray(beta, jnp.float32))
    at, moved = laplace_pairs(0.02 * np.eye(3), 32, np.random.default_rng(1))  # about 3 posterior s.d.s
    t = residual_matrix(model, proxy, data, proxy.centre, at, moved)
    np.testing.assert_array_equal(t.exact, t.read)

    c32 = np.asarray(proxy.centre)
    th0, th1 = ((c32 + v.astype(np.float32)).astype(np.float64) for v in (at, moved))  # the positions as evaluated
    x64, y64, c = x.astype(np.float64), y.astype(np.float64), c32.astype(np.float64)

    def log_lik(eta: np.ndarray) -> np.ndarray:  # up to a constant
        return -0.5 * (nu + 1.0) * np.log1p((y64 - eta) ** 2 / nu)

    r_c = y64 - x64 @ c
    grad, hess = (nu + 1.0) * r_c / (nu + r_c**2), (nu + 1.0) * (r_c**2 - nu) / (nu + r_c**2) ** 2
    xu, xv = (th1 - th0) @ x64.T, 0.5 * ((th1 - c) + (th0 - c)) @ x64.T
    diff, q = log_lik(th1 @ x64.T) - log_lik(th0 @ x64.T), grad * xu + hess * xu * xv
    exact64 = np.sum(diff - q, axis=1)
    bound = 4.0 * np.finfo(np.float32).eps * np.sum(np.abs(diff) + np.abs(q), axis=1)
    assert np.all(np.abs(t.exact.sum(axis=1) - exact64) <= bound)
    floor = np.asarray(rounding_floors(model, proxy.centre, ravel_pytree(proxy.centre)[1], data, jnp.float32))
    floored = np.where(np.abs(t.read) <= floor, 0.0, t.read).sum(axis=1)
    assert np.mean(np.abs(floored - exact64) > bound) > 0.5  # the test's power: the old floor misses the bound
