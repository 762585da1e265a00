"""The minibatch the default test needs at this ``N``: its per-step acceptance error, predicted before sampling.

``choose_batch_size`` predicts, at ``MOVES`` pairs of independent draws from the Laplace fit (a global move: proxy HMC's
``pi/2`` trajectory on a Gaussian proxy posterior lands independently of its start, and an independence proposal does),
the penalty test's per-step acceptance error, the probability that its decision differs from the exact test's on the
same proposal and uniform (``warmup.step_error``: the test's own minibatches, growth and penalty run on the residuals of
``ROWS`` rows of the population drawn without replacement, all of them when there are fewer), and returns the smallest
``m``, from the test's own up by factors of ``GROWTH``, whose predicted error is at most ``PREDICTED_MAX``; the check
after sampling measures the same figure (``diagnostics.posterior_error``'s ``disagreement``).

The residuals are the estimator's own terms over its population, each within its row's float32 resolution counted as
0 as the check counts it (``Terms.exact``). Issue 32 tried sizing on the terms as the test reads them (``Terms.read``,
float32 rounding and all, with ``Delta`` from ``Terms.exact``; ``step_error(..., exact=...)`` still predicts that way,
for ``benchmarks/twin_gap.py``): it predicted the disagreement the check measured on the heavy-tails robust regression,
but sent ``benchmarks/first_fit.py``'s Student-t regression at ``N = 10^6`` (no shared term declared) from the test's
own rows per test to the grid's cap with a warning, and ``Terms.exact`` itself drops true residuals under the floor, so part of what
it counts as rounding noise may be that floor's bias; it was not kept (docs/benchmarks.md). Since then each row's
difference is integrated in float32 (``models.shared_term.row_difference``): ``Terms.read`` carries no such rounding and
predicts the error ``benchmarks/twin_gap.py`` audits, while ``Terms.exact``'s floor, set for the old rounding, drops true
residuals and predicts less; sizing on ``Terms.read`` (and a floor at the integrated terms' rounding for the check) is
the change that would make them agree again (not done). Under importance weights
(``control_variates.importance``) the positions' ``r_i / n_i`` over ``M`` positions, so the skewness and kurtosis reported
(``BatchChoice``) are the weighted estimate's. Before issue 32's calibration the prediction was ``proxy_check``'s bound
(``normality.minibatch_shape``), 7-15x the measured error on the centred 16-group logistic (0.268 predicted at 50 rows,
3.75% of decisions differed), so the sizing asked for 20x the rows; ``tests/warmup/test_step_error.py`` holds the
prediction within 1.5x of the error measured independently.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.penalty import SIGMA_MAX
from minibatch_mcmc.compiling import ONE_OFF_WORK, compile_options
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.influence import without_rounding
from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.diagnostics.normality import minibatch_shape
from minibatch_mcmc.diagnostics.proxy_check import ACCEPTANCE_ERROR_MAX
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.warmup.step_error import StepError, orders, step_error

PyTree = Any

MOVES = 128
"""Laplace-drawn moves the error is predicted at."""
ROWS = 1 << 14
"""Rows of the population the test's minibatches are simulated on (all rows when there are fewer), each read once and
evaluated at every move: at most ``ROWS`` rows read whatever ``N``."""
PREDICTED_MAX = 0.75 * ACCEPTANCE_ERROR_MAX
"""Largest predicted per-step error accepted: 3/4 of the check's 0.02, a margin for the prediction's sampled rows and
moves and for the chains' draws, which are the posterior's, not the Laplace fit's."""
GROWTH = 1.1
"""Ratio of successive minibatch sizes tried."""
MAX_GROWTH = 20
"""Largest minibatch chosen, as a multiple of the test's own ``m`` (1000 rows for the default 50): past it a step costs
more than the proxy saves, and the warm-up warns with the predicted error instead of growing on."""


class BatchChoice(NamedTuple):
    """The chosen minibatch and what the prediction measured."""

    batch_size: int
    """The chosen ``m``."""
    predicted_error: float
    """The predicted per-step acceptance error at ``batch_size`` (``step_error``: the probability that the test's decision
    differs from the exact test's)."""
    initial_error: float
    """The predicted per-step error at the test's own ``m``."""
    data_used: int
    """Rows read (each evaluated at every move)."""
    skewness: float = 0.0
    """Median over the moves of the ``batch_size``-row estimate's skewness ``g1 / sqrt(m)`` (its residuals: the
    estimator's terms, ``r_i / n_i`` under importance weights)."""
    excess_kurtosis: float = 0.0
    """Median over the moves of the ``batch_size``-row estimate's excess kurtosis ``g2 / m``."""
    rows: float = 0.0
    """Predicted rows read per test at ``batch_size`` (the minibatch grown while too noisy)."""


def laplace_pairs(factor: np.ndarray, moves: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``moves`` pairs ``(L z, L z')`` of independent draws from the Laplace fit about its centre (flat, float64): a global
    move's (proxy HMC's ``pi/2`` trajectory on a Gaussian proxy posterior lands independently of its start)."""
    z = rng.standard_normal((2, moves, factor.shape[0]))
    return z[0] @ np.asarray(factor, np.float64).T, z[1] @ np.asarray(factor, np.float64).T


class Terms(NamedTuple):
    """Per move and sampled row (float64, shape ``(moves, rows)``): the terms the test reads and the exact residuals."""

    read: np.ndarray
    """``e_i(theta, theta')`` as the estimator computes them in the model's precision: what the test's minibatch reads,
    float32 rounding and all."""
    exact: np.ndarray
    """The same with each term within its row's float32 resolution counted as 0 (``influence.without_rounding``), as the
    check's exact twin counts them: their sum is the move's ``Delta``."""


def residual_matrix(
    model: Model, estimator: Estimator, rows: PyTree, centre: PyTree, at: np.ndarray, moved: np.ndarray
) -> Terms:
    """The test's terms ``d_i = e_i(theta, theta')`` over ``rows`` per move ``(centre + at, centre + moved)`` (flat
    offsets), as read and as the check counts them (``Terms``); a move with a non-finite term dropped."""
    flat, unravel = ravel_pytree(centre)

    def one(a: jax.Array, b: jax.Array, rows: PyTree) -> tuple[jax.Array, jax.Array]:
        d = estimator.log_ratio(model, unravel(flat + a), unravel(flat + b))(rows)
        return d, without_rounding(d, model, flat, unravel, rows)  # as read, and as the check counts them

    work = (
        2 * at.shape[0] * jax.tree_util.tree_leaves(rows)[0].shape[0] * flat.size
    )  # both ends of every move, every row
    # the rows an argument, not a constant of the program (16,384 rows were 197 KB of captured constants)
    run = jax.jit(jax.vmap(one, in_axes=(0, 0, None)), compiler_options=compile_options(work, ONE_OFF_WORK))
    read, exact = (
        np.asarray(v, np.float64) for v in run(jnp.asarray(at, flat.dtype), jnp.asarray(moved, flat.dtype), rows)
    )
    keep = np.all(np.isfinite(read), axis=1)
    return Terms(read[keep], exact[keep])


def power_sums(d: np.ndarray) -> np.ndarray:
    """Power sums ``sum_i d_i^k``, ``k = 1..4``, of each move's residuals about their mean (shape ``(moves, 4)``)."""
    d = d - d.mean(axis=1, keepdims=True)
    d2 = d * d
    return np.stack([np.sum(d, axis=1), np.sum(d2, axis=1), np.sum(d2 * d, axis=1), np.sum(d2 * d2, axis=1)], axis=1)


def residual_sums(
    model: Model, estimator: Estimator, rows: PyTree, centre: PyTree, at: np.ndarray, moved: np.ndarray
) -> np.ndarray:
    """``power_sums`` of ``residual_matrix``: what ``normality.minibatch_shape`` reads."""
    return power_sums(residual_matrix(model, estimator, rows, centre, at, moved).exact)


def choose_batch_size(
    model: Model,
    source: DataSource,
    estimator: Estimator,
    centre: PyTree,
    factor: np.ndarray,
    batch_size: int,
    key: jax.Array,
    *,
    temperature: float = 1.0,
    sigma_max: float = SIGMA_MAX,
) -> BatchChoice:
    """The smallest minibatch from ``batch_size`` up whose predicted per-step error is at most ``PREDICTED_MAX`` (module
    docstring) for the penalty test with ``sigma_max``; ``factor`` is the Laplace covariance's lower Cholesky factor (flat
    order), ``centre`` the proxy's centre."""
    n_pop = estimator.population_size(source.n)
    if batch_size >= n_pop:
        return BatchChoice(int(batch_size), 0.0, 0.0, 0)
    rng = np.random.default_rng(
        np.asarray(jax.random.key_data(key)).ravel().tolist()
    )  # numpy's: jax.random compiles per shape
    rows = min(n_pop, ROWS)
    idx = np.arange(n_pop) if rows == n_pop else np.sort(rng.choice(n_pop, rows, replace=False))
    sample = take(estimator.population(source.arrays()), jnp.asarray(idx, jnp.int32))
    d = residual_matrix(model, estimator, sample, centre, *laplace_pairs(np.asarray(factor, np.float64), MOVES, rng))
    if d.read.shape[0] == 0:  # every move left the model's support: nothing to predict from
        return BatchChoice(int(batch_size), float("nan"), float("nan"), rows)
    # sized on the residuals as the check counts them (rounding as 0), not on the terms as read: see the module docstring
    return smallest_batch(d.exact, orders(rows, rng), n_pop, int(batch_size), temperature, sigma_max)._replace(
        data_used=rows
    )


def next_size(m: int, n_pop: int) -> int:
    """The size tried after ``m``: ``GROWTH`` times larger (at least one row more), at most ``n_pop``."""
    return min(max(math.ceil(m * GROWTH), m + 1), n_pop)


def size_grid(batch_size: int, n_pop: int) -> list[int]:
    """``batch_size``, ``next_size(batch_size)``, ... up to ``MAX_GROWTH`` times ``batch_size`` or ``n_pop``."""
    cap, sizes = min(MAX_GROWTH * batch_size, n_pop), [batch_size]
    while sizes[-1] < cap:
        sizes.append(next_size(sizes[-1], cap))
    return sizes


def smallest_batch(
    d: np.ndarray, order: np.ndarray, n_pop: int, batch_size: int, temperature: float, sigma_max: float = SIGMA_MAX
) -> BatchChoice:
    """The first of ``size_grid(batch_size, n_pop)`` whose predicted per-step error (``step_error``, from the residuals
    ``d`` of sampled rows at each move, simulated in ``order``) is at most ``PREDICTED_MAX``, found by bisection (the error
    falls with ``m``; the simulations share their rows and orders), else the last, with a warning that names the
    predicted error there, as where the test is predicted to grow past the grid's last size (``data_used`` 0)."""
    sizes = size_grid(batch_size, n_pop)
    known: dict[int, StepError] = {}

    def at(k: int) -> StepError:
        if k not in known:
            known[k] = step_error(d, order, n_pop, sizes[k], sigma_max, temperature)
        return known[k]

    lo, hi = 0, len(sizes) - 1  # invariant: the answer lies in [lo, hi]
    if at(0).error > PREDICTED_MAX and at(hi).error <= PREDICTED_MAX:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if at(mid).error <= PREDICTED_MAX else (mid, hi)
    pick = 0 if at(0).error <= PREDICTED_MAX else hi
    m, error = sizes[pick], at(pick).error
    shape = minibatch_shape(power_sums(d) * (n_pop / d.shape[1]), n_pop, m, temperature, "metropolis")
    skew, kurt = float(np.median(shape.skewness)), float(np.median(shape.excess_kurtosis))
    cap, rows = sizes[-1], at(pick).rows
    if error > PREDICTED_MAX or rows > cap:
        warnings.warn(
            f"the default test's minibatch would need more than m={cap} rows per test (of {n_pop}) for its normal approximation: "
            f"predicted acceptance error {error:.3g} per step at m={m} (the probability that its decision differs from the exact "
            f"test's; the target is {PREDICTED_MAX:g}), reading {rows:.0f} rows per test as it grows while too noisy; the "
            f"estimate's median skewness {skew:.3g}, excess kurtosis {kurt:.3g}: the proxy leaves large or heavy-tailed "
            f"residuals at posterior-scale moves. Sampling at m={m}; for an exact chain pass an exact test (test='smh', "
            "'mhss' or 'tunamh' for a GLM: logistic, probit, Poisson, Gaussian or Student-t regression with nu and sigma fixed; "
            "or MetropolisTest)",
            stacklevel=4,
        )
    return BatchChoice(m, error, at(0).error, 0, skew, kurt, rows)
