"""The plain estimator's per-row differences (``PlainDifference.log_ratio``): in float32 each row's
``l_i(theta') - l_i(theta)`` accurate relative to the difference, against float64 references computed independently
(numpy and scipy), the plain difference where the integral fails (a kink), and float64 draws as before."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.acceptance import penalty_test
from minibatch_mcmc.control_variates.base import PlainDifference, plain
from minibatch_mcmc.models import Model
from minibatch_mcmc.models.glm import poisson_regression, student_t_regression
from minibatch_mcmc.models.logistic import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample

EPS = float(np.finfo(np.float32).eps)
ROWS, NU = 2000, 4.0
MOVES = {"small": 1e-5, "posterior": 1e-3}  # per coordinate; 1e-3 is a posterior s.d. at N = 10^6


def family_case(family: str, rng: np.random.Generator) -> tuple[Model, dict, np.ndarray]:
    """A model, float32 rows ``(x, y)`` with an intercept and two covariates, and a parameter near the truth."""
    x = np.column_stack([np.ones(ROWS), rng.standard_normal((ROWS, 2))]).astype(np.float32)
    theta = np.array([0.4, -0.6, 0.3])
    eta = x.astype(np.float64) @ theta
    if family == "student_t":
        y, model = eta + rng.standard_t(NU, ROWS), student_t_regression(nu=NU, sigma=1.0)
    elif family == "logistic":
        y, model = (rng.random(ROWS) < 1.0 / (1.0 + np.exp(-eta))).astype(float), logistic_regression()
    else:
        y, model = rng.poisson(np.exp(eta + 1.5)).astype(float), poisson_regression()
        theta = theta + [1.5, 0.0, 0.0]
    return model, {"x": x, "y": y.astype(np.float32)}, theta


def reference(family: str, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row in float64 (scipy): ``l_i``, the size of the terms forming ``dl_i/deta`` and a bound on ``|d2l_i/deta2|``."""
    eta = x @ theta
    if family == "student_t":
        r = y - eta
        return stats.t.logpdf(y, NU, loc=eta), (NU + 1) * np.abs(r) / (NU + r * r), np.full_like(r, (NU + 1) / NU)
    if family == "logistic":
        p = 1.0 / (1.0 + np.exp(-eta))
        return stats.bernoulli.logpmf(y, p), np.abs(y) + p, p * (1.0 - p)
    mu = np.exp(eta)
    return stats.poisson.logpmf(y, mu), np.abs(y) + mu, mu


def rounding_tolerance(family: str, a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row, what float32 rounding of the inputs leaves in ``l_i(b) - l_i(a)`` computed without cancellation: a few
    ``eps`` of the difference, of ``dl/deta`` times ``x_i . u`` (the slope's own rounding; ``u = b - a``) and of
    ``d2l/deta2`` times ``x_i . u`` times the size of ``eta_i`` (and ``y_i``: the Student-t's residual), whose rounding
    moves the point the slope is taken at; 4 ``eps`` (8 units of roundoff) covers ``eta``'s three-term sum, a
    function's few ulps and the four nodes' weighted sum."""
    la, slope_a, curve_a = reference(family, a, x, y)
    lb, slope_b, curve_b = reference(family, b, x, y)
    reach = np.abs(x) @ np.abs(b - a)
    size = np.abs(x) @ np.maximum(np.abs(a), np.abs(b)) + (np.abs(y) if family == "student_t" else 0.0)
    return (
        4 * EPS * (np.abs(lb - la) + reach * np.maximum(slope_a, slope_b) + reach * size * np.maximum(curve_a, curve_b))
    )


@pytest.mark.parametrize("family", ["student_t", "logistic", "poisson"])
@pytest.mark.parametrize("move", list(MOVES))
def test_each_rows_difference_is_float32_accurate_relative_to_the_difference(family, move):
    """2,000 rows, two moves: every row's float32 difference is within its rounding tolerance of the float64 one
    (``rounding_tolerance``: eps of the difference and of the inputs' rounding, not of ``|l_i|``), where the plain
    float32 subtraction is off by a few ``eps |l_i|``, more than 5x the tolerance in the median row (so a return to
    the plain subtraction, or a fallback taken where the integral was right, fails)."""
    rng = np.random.default_rng(["student_t", "logistic", "poisson"].index(family))
    model, data, theta = family_case(family, rng)
    x64, y64 = data["x"].astype(np.float64), data["y"].astype(np.float64)
    rows = jax.tree_util.tree_map(jnp.asarray, data)
    ours = jax.jit(lambda a, b: plain().log_ratio(model, a, b)(rows))
    subtraction = jax.jit(lambda a, b: model.log_lik(b, rows) - model.log_lik(a, rows))
    for _ in range(2):
        a = np.float32(theta + 0.05 * rng.standard_normal(3))
        b = np.float32(a + MOVES[move] * rng.standard_normal(3))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        want = reference(family, b64, x64, y64)[0] - reference(family, a64, x64, y64)[0]
        tol = rounding_tolerance(family, a64, b64, x64, y64)
        err = np.abs(np.asarray(ours(a, b), np.float64) - want)
        plain_err = np.abs(np.asarray(subtraction(a, b), np.float64) - want)
        assert np.all(err <= tol), (family, move, float(np.max(err / tol)))
        assert np.median(plain_err / tol) > 5.0, (family, move, float(np.median(plain_err / tol)))


def test_a_kink_inside_the_move_falls_back_to_the_plain_difference():
    """``l_i = -|y_i - x_i theta|`` (a Laplace regression) on a long move: rows whose residual changes sign inside the
    segment (the kink at 20-45% or 55-80% of it: the integral of the derivative misses ``2 |r|`` of the difference)
    get the plain float32 difference, bit for bit; the others, linear along the move, the float64 value to rounding."""
    model = Model(lambda t: jnp.zeros((), t.dtype), lambda t, b: -jnp.abs(b["y"] - b["x"] @ t), "laplace")
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 2.0, (400, 1)).astype(np.float32)
    a, b = np.float32([0.0]), np.float32([1.0])
    # where along the move the kink lies, for the first half: not near the middle, which symmetric nodes integrate exactly
    share = rng.uniform(0.2, 0.45, 400) + rng.choice([0.0, 0.35], 400)
    y = np.where(np.arange(400) < 200, share * x[:, 0], x[:, 0] * rng.choice([-0.5, 1.5], 400)).astype(np.float32)
    rows = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
    got, subtraction = jax.jit(
        lambda a, b: (plain().log_ratio(model, a, b)(rows), model.log_lik(b, rows) - model.log_lik(a, rows))
    )(a, b)
    got, subtraction = np.asarray(got), np.asarray(subtraction)
    np.testing.assert_array_equal(got[:200], subtraction[:200])
    want = -np.abs(y[200:] - x[200:, 0] * 1.0) + np.abs(y[200:].astype(np.float64))
    np.testing.assert_allclose(got[200:], want, rtol=4 * EPS, atol=4 * EPS)


class Subtraction(NamedTuple):
    """The plain estimator with each row's difference a plain subtraction: what ``PlainDifference`` computed before."""

    name: str = "plain"
    inner: Any = PlainDifference()

    def log_ratio(self, model, current, candidate):
        return lambda batch: model.log_lik(candidate, batch) - model.log_lik(current, batch)

    def known_sum(self, current, candidate):
        return self.inner.known_sum(current, candidate)

    def population(self, data):
        return data

    def population_size(self, n_data):
        return n_data

    def residual_bounds(self, model, current, candidate):
        return None

    def row_draw(self):
        return None

    def log_lik_sum(self, model, key, data, n_data, batch_size):
        return self.inner.log_lik_sum(model, key, data, n_data, batch_size)


def test_float64_draws_are_the_plain_subtractions():
    """In float64 the rows' differences are the plain subtraction (its rounding far below any test's noise): a logistic
    regression's penalty-test run on a fixed seed makes the same decisions and draws to rounding as with the
    subtraction written out (a float64 run integrated, or on another path, would move positions by more than 1e-12)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(4)
        x = np.column_stack([np.ones(3000), rng.standard_normal((3000, 2))])
        y = (rng.random(3000) < 1.0 / (1.0 + np.exp(-(x @ [0.3, -0.5, 0.8])))).astype(np.float64)
        data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
        runs = [
            sample(
                logistic_regression(prior_scale=10.0),
                data,
                jnp.asarray([0.3, -0.5, 0.8]),
                proposal=random_walk(scale=0.01),
                test=penalty_test(batch_size=50),
                estimator=est,
                num_samples=100,
                num_chains=2,
                key=5,
                progress=False,
            )
            for est in (plain(), Subtraction())
        ]
        np.testing.assert_array_equal(runs[0].records["accepted"], runs[1].records["accepted"])
        assert 0.1 < float(np.mean(runs[0].records["accepted"])) < 0.9  # decisions with both outcomes
        np.testing.assert_allclose(np.asarray(runs[0].positions), np.asarray(runs[1].positions), rtol=0, atol=1e-12)
