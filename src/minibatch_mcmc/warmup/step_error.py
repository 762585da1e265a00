"""The penalty test's per-step acceptance error at a minibatch size, estimated by running its minibatches on sampled rows.

What is predicted is what the check after sampling measures (``diagnostics.posterior_error``'s ``disagreement``): the
probability that the minibatch test and the exact full-data Metropolis test, on the same proposal and the same uniform,
decide differently, ``E |a(Delta* - u_B(s2)) - a(Delta)|`` with ``a(x) = min(1, e^x)``. The earlier prediction,
``normality.minibatch_shape``'s ``min(edgeworth + variance, sd (1 + sd / 2))``, is a bound, and on issue 32's cases 7-15x
the measured figure: the slope of ``a`` is taken as 1 where half of a global move's ``Delta`` lie above 0 (slope 0) and
the rest below (slope ``e^Delta``), ``E|noise|`` as the normal's s.d. where rare rows make the noise mostly a small
shift and rarely a large jump (a 50-row minibatch misses a 30-row group 99.5% of the time; the s.d. is set by the
jumps), and the Edgeworth sup over the CDF where ``a`` integrates it against a density.

Here the residuals of ``R`` sampled rows (or positions of an importance-weighted population, terms ``r_i / n_i``) at
each move stand for the ``n_pop`` rows, each for ``n_pop / R``; ``DRAWS`` random orders of them are read in chunks of
``m`` exactly as the test reads its minibatch (grown while ``s2 >= sigma_max^2``, ``s2 = (n/K)^2 var / b (1 - b/n)``,
the penalty ``u_B(s2)`` of ``acceptance.penalty``), and ``Delta`` is the move's residual sum ``T / K``: for a global
move on the proxy posterior (proxy HMC, the Laplace independence proposal) the rest of the ratio, the proxy posterior's
part against the proposal's, is about 0. The error is the mean over moves and orders.

With ``exact`` given, the minibatch reads the terms as the estimator computes them in the model's precision
(``batch_choice.Terms.read``), and ``Delta`` is the sum of the exact residuals (``Terms.exact``: each term within its
row's float32 resolution counted as 0, as the check's exact twin counts it); the sizing itself passes ``Terms.exact``
alone (``batch_choice``'s docstring says why), ``benchmarks/twin_gap.py`` both. The difference is float32 rounding: a
few units of ``eps |l_i|`` per row, which no proxy removes and which the estimate's ``n / m`` scaling makes noise of
about ``n eps |l_i| / sqrt(m)`` nats, growing with ``N``. Issue 32: on the Student-t regression with ``nu`` and ``sigma`` estimated (``heavy_tails.py``'s
``robust_nu``) the sizing read the rounded-to-0 terms for both and predicted a small fraction of the disagreement the
check measured, which an audit of every decision in float64 put mostly on the run's test, by that noise, not on the twin
(``benchmarks/twin_gap.py``; the figures in ``docs/benchmarks.md``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

DRAWS = 32
"""Random orders of the sampled rows (minibatches) simulated per move."""
MAX_CHUNKS = 32
"""Chunks of ``m`` rows simulated per minibatch at most (its growth while too noisy); one still too noisy there counts as
decided on them."""


class StepError(NamedTuple):
    """The predicted per-step error and the rows the test would read, both means over the moves."""

    error: float
    """Mean of ``E |a(Delta* - u_B) - a(Delta)|`` over the moves."""
    rows: float
    """Mean rows read per test (the minibatch grown while too noisy)."""


def penalty_np(s2: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``acceptance.penalty.penalty`` in float64 numpy: ``u_B`` for a variance ``s2`` estimated from ``count`` rows."""
    b = np.maximum(count, 2).astype(np.float64)
    return s2 / 2.0 + s2 * s2 / (4.0 * (b + 1.0)) + s2**3 / (3.0 * (b + 1.0) * (b + 3.0))


def accept(x: np.ndarray) -> np.ndarray:
    """Metropolis: ``min(1, e^x)``."""
    return np.exp(np.minimum(x, 0.0))


def orders(rows: int, rng: np.random.Generator) -> np.ndarray:
    """``DRAWS`` random orders of ``rows`` sampled rows (the simulated minibatches are their prefixes)."""
    return np.argsort(rng.random((DRAWS, rows)), axis=1)


def move_error(
    d: np.ndarray,
    order: np.ndarray,
    n_pop: int,
    batch_size: int,
    sigma_max: float,
    temperature: float,
    exact: np.ndarray | None = None,
) -> tuple[float, float]:
    """For one move's terms ``d`` over the sampled rows (as the test reads them): the mean over ``order``'s rows of
    ``|a(Delta* - u_B) - a(Delta)|`` and of the rows read, ``Delta = T / K`` with ``T`` the sum of the ``exact`` residuals
    (default ``d``) over the ``n_pop`` rows the sample stands for. A minibatch still too noisy after ``MAX_CHUNKS``
    chunks (or all sampled rows) counts as decided there (its noise and penalty then, about those of the first end below
    ``sigma_max``: an error near the test's largest)."""
    r = d.size
    unit = n_pop / temperature
    centre = unit * float(np.mean(d))  # what the test's estimate centres on: its own terms' sum
    delta = centre if exact is None else unit * float(np.mean(exact))
    reach = min(r, MAX_CHUNKS * batch_size)
    y = d[order[:, :reach]] - np.mean(d)  # shifted by the population mean: the prefix sums' rounding stays small
    s1, s2 = np.cumsum(y, axis=1), np.cumsum(y * y, axis=1)
    ends = np.arange(batch_size, reach + 1, batch_size)
    b = ends.astype(np.float64)
    mean = s1[:, ends - 1] / b
    var = np.maximum(s2[:, ends - 1] / b - mean * mean, 0.0) * b / np.maximum(b - 1.0, 1.0)
    est_var = unit * unit * var / b * np.maximum(n_pop - b, 0.0) / n_pop
    small = est_var < sigma_max * sigma_max
    done = np.any(small, axis=1)
    first = np.where(done, np.argmax(small, axis=1), ends.size - 1)  # the first chunk end whose s2 is below sigma_max^2
    pick = np.arange(order.shape[0])
    noise, s2_at, count = unit * mean[pick, first], est_var[pick, first], b[first]
    error = np.abs(accept(centre + noise - penalty_np(s2_at, count)) - accept(np.asarray(delta)))
    rows = np.where(done, count, reach)  # a minibatch still growing: at least the rows read so far
    return float(np.mean(error)), float(np.mean(rows))


def step_error(
    residuals: np.ndarray,
    order: np.ndarray,
    n_pop: int,
    batch_size: int,
    sigma_max: float,
    temperature: float = 1.0,
    exact: np.ndarray | None = None,
) -> StepError:
    """The predicted per-step error and rows per test at ``batch_size``, from the terms ``(moves, R)`` the test reads on
    ``R`` sampled rows of ``n_pop`` at each move and the ``exact`` residuals whose sum is ``Delta`` (the same shape;
    default: the terms themselves; module docstring)."""
    if residuals.shape[0] == 0:
        return StepError(float("nan"), float("nan"))
    if batch_size >= min(n_pop, residuals.shape[1]):
        return StepError(0.0, float(min(batch_size, n_pop)))
    exact = residuals if exact is None else exact
    out = np.array(
        [move_error(d, order, n_pop, batch_size, sigma_max, temperature, e) for d, e in zip(residuals, exact)]
    )
    return StepError(float(np.mean(out[:, 0])), float(np.mean(out[:, 1])))
