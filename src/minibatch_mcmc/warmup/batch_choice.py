"""The minibatch the default test needs at this ``N``: the check's acceptance-error bound, predicted before sampling.

The check after sampling (``proxy_check``) bounds the acceptance error of the ``m``-row normal approximation by
``normality.minibatch_shape``: for the penalty test's Metropolis rule the smaller of the Edgeworth terms and a cap of
about the estimate's s.d. Under a second-order proxy that s.d. falls as ``N^(-1/2)`` at posterior-scale moves, so at
small ``N`` the bound of a 50-row minibatch can pass the check's threshold (the README's logistic regression, d = 10, at
N = 20,000); both terms fall as ``m^(-1/2)``. ``choose_batch_size`` predicts the bound at ``MOVES`` pairs of independent
draws from the Laplace fit (a global move: proxy HMC's ``pi/2`` trajectory on a Gaussian proxy posterior lands
independently of its start, and an independence proposal does), from the exact power sums of the test's residuals over
``ROWS`` rows of the population drawn without replacement (all of them when there are fewer), and returns the smallest
``m``, from the test's own up by factors of ``GROWTH``, whose predicted mean bound is at most ``PREDICTED_MAX``.

The residuals are the estimator's own terms over its population: under importance weights
(``control_variates.importance``) the positions' ``r_i / n_i`` over ``M`` positions, so the skewness and kurtosis measured
(``BatchChoice``) are the weighted estimate's. On the centred 16-group logistic of issue 32 (groups down to 30 rows,
N = 1e5) uniform rows need more than ``MAX_GROWTH`` times the default 50 rows (predicted bound 0.062 at m = 1000), the
weighted ones 56 (``benchmarks/heavy_tails.py``, ``docs/benchmarks.md``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.compiling import ONE_OFF_WORK, compile_options
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.influence import without_rounding
from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.diagnostics.normality import minibatch_shape
from minibatch_mcmc.diagnostics.proxy_check import ACCEPTANCE_ERROR_MAX
from minibatch_mcmc.models.base import Model

PyTree = Any

MOVES = 64
"""Laplace-drawn moves the bound is predicted at."""
ROWS = 1 << 13
"""Rows of the population the residuals are summed over (all rows when there are fewer), each read once and evaluated
at every move: at most ``ROWS`` rows read whatever ``N``."""
PREDICTED_MAX = 0.75 * ACCEPTANCE_ERROR_MAX
"""Largest predicted mean bound accepted: 3/4 of the check's threshold, a margin for the prediction's few moves and
for the chains' draws, which are the posterior's, not the Laplace fit's."""
GROWTH = 1.1
"""Ratio of successive minibatch sizes tried."""
MAX_GROWTH = 20
"""Largest minibatch chosen, as a multiple of the test's own ``m`` (1000 rows for the default 50): past it a step costs
more than the proxy saves, and the warm-up warns with the predicted bound instead of growing on."""


class BatchChoice(NamedTuple):
    """The chosen minibatch and what the prediction measured."""

    batch_size: int
    """The chosen ``m``."""
    predicted_error: float
    """The predicted mean acceptance-error bound at ``batch_size``."""
    initial_error: float
    """The predicted mean bound at the test's own ``m``."""
    data_used: int
    """Rows read (each evaluated at every move)."""
    skewness: float = 0.0
    """Median over the moves of the ``batch_size``-row estimate's skewness ``g1 / sqrt(m)`` (its residuals: the
    estimator's terms, ``r_i / n_i`` under importance weights)."""
    excess_kurtosis: float = 0.0
    """Median over the moves of the ``batch_size``-row estimate's excess kurtosis ``g2 / m``."""


def laplace_pairs(factor: np.ndarray, moves: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``moves`` pairs ``(L z, L z')`` of independent draws from the Laplace fit about its centre (flat, float64): a global
    move's (proxy HMC's ``pi/2`` trajectory on a Gaussian proxy posterior lands independently of its start)."""
    z = rng.standard_normal((2, moves, factor.shape[0]))
    return z[0] @ np.asarray(factor, np.float64).T, z[1] @ np.asarray(factor, np.float64).T


def residual_sums(model: Model, estimator: Estimator, rows: PyTree, centre: PyTree, at: np.ndarray,
                  moved: np.ndarray) -> np.ndarray:
    """Power sums ``sum_i d_i^k``, ``k = 1..4``, of the test's residuals ``d_i = e_i(theta, theta')`` about their mean over
    ``rows``, per move ``(centre + at, centre + moved)`` (flat offsets; float64, a move with a non-finite residual dropped;
    a residual within its row's float32 resolution counted as 0, as ``proxy_check`` counts it)."""
    flat, unravel = ravel_pytree(centre)

    def one(a: jax.Array, b: jax.Array) -> jax.Array:
        d = estimator.log_ratio(model, unravel(flat + a), unravel(flat + b))(rows)
        return without_rounding(d, model, flat, unravel, rows)  # as the check counts them

    work = 2 * at.shape[0] * jax.tree_util.tree_leaves(rows)[0].shape[0] * flat.size  # both ends of every move, every row
    run = jax.jit(jax.vmap(one), compiler_options=compile_options(work, ONE_OFF_WORK))
    d = np.asarray(run(jnp.asarray(at, flat.dtype), jnp.asarray(moved, flat.dtype)), np.float64)
    d = d[np.all(np.isfinite(d), axis=1)]
    d = d - d.mean(axis=1, keepdims=True)
    return np.stack([np.sum(d**k, axis=1) for k in range(1, 5)], axis=1)


def predicted_error(sums: np.ndarray, n_pop: int, batch_size: int, temperature: float, rule: str) -> float:
    """The mean over moves of ``minibatch_shape``'s acceptance error for a ``batch_size``-row minibatch, from the
    residuals' power sums over all ``n_pop`` rows (shape ``(moves, 4)``)."""
    return float(np.mean(minibatch_shape(sums, n_pop, batch_size, temperature, rule).acceptance_error))


def choose_batch_size(model: Model, source: DataSource, estimator: Estimator, centre: PyTree, factor: np.ndarray,
                      batch_size: int, key: jax.Array, *, temperature: float = 1.0, rule: str = "metropolis") -> BatchChoice:
    """The smallest minibatch from ``batch_size`` up whose predicted check bound is at most ``PREDICTED_MAX`` (module
    docstring); ``factor`` is the Laplace covariance's lower Cholesky factor (flat order), ``centre`` the proxy's centre."""
    n_pop = estimator.population_size(source.n)
    if batch_size >= n_pop:
        return BatchChoice(int(batch_size), 0.0, 0.0, 0)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())  # numpy's: jax.random compiles per shape
    rows = min(n_pop, ROWS)
    idx = np.arange(n_pop) if rows == n_pop else np.sort(rng.choice(n_pop, rows, replace=False))
    sample = take(estimator.population(source.arrays()), jnp.asarray(idx, jnp.int32))
    sums = residual_sums(model, estimator, sample, centre, *laplace_pairs(np.asarray(factor, np.float64), MOVES, rng))
    if sums.shape[0] == 0:  # every move left the model's support: nothing to predict from
        return BatchChoice(int(batch_size), float("nan"), float("nan"), rows)
    return smallest_batch(sums * (n_pop / rows), n_pop, int(batch_size), temperature, rule)._replace(data_used=rows)


def next_size(m: int, n_pop: int) -> int:
    """The size tried after ``m``: ``GROWTH`` times larger (at least one row more), at most ``n_pop``."""
    return min(max(math.ceil(m * GROWTH), m + 1), n_pop)


def smallest_batch(sums: np.ndarray, n_pop: int, batch_size: int, temperature: float, rule: str) -> BatchChoice:
    """The first of ``batch_size``, ``next_size(batch_size)``, ... whose ``predicted_error`` is at most ``PREDICTED_MAX``,
    from the residuals' power sums over all ``n_pop`` rows (``data_used`` 0); at most ``MAX_GROWTH`` times
    ``batch_size`` or all ``n_pop`` rows, with a warning if the bound there is still above ``PREDICTED_MAX``."""
    cap = min(MAX_GROWTH * batch_size, n_pop)
    first = error = predicted_error(sums, n_pop, batch_size, temperature, rule)
    m = batch_size
    while error > PREDICTED_MAX and m < cap:
        m = next_size(m, cap)
        error = predicted_error(sums, n_pop, m, temperature, rule)
    shape = minibatch_shape(sums, n_pop, m, temperature, rule)
    skew, kurt = float(np.median(shape.skewness)), float(np.median(shape.excess_kurtosis))
    if error > PREDICTED_MAX:
        warnings.warn(
            f"the default test's minibatch would need more than m={m} rows per test (of {n_pop}) for its normal approximation: "
            f"predicted acceptance-error bound {error:.3g} at m={m} (above {PREDICTED_MAX:g}; the check after sampling warns above "
            f"{ACCEPTANCE_ERROR_MAX:g}; the estimate's median skewness {skew:.3g}, excess kurtosis {kurt:.3g}): the proxy leaves "
            f"large or heavy-tailed residuals at posterior-scale moves. Sampling at m={m}; for an exact chain pass an exact "
            "test (test='smh', 'mhss' or 'tunamh' for a GLM: logistic, probit, Poisson, Gaussian or Student-t regression with "
            "nu and sigma fixed; or MetropolisTest)", stacklevel=4)
    return BatchChoice(m, error, first, 0, skew, kurt)
