"""Importance-sampled minibatches: rows drawn in proportion to a weight that predicts their residual.

The proxy leaves per-row residuals ``r_i`` whose sum ``T`` a minibatch test estimates. Drawn uniformly, a few rows with
large residuals (heavy tails, rare groups, a rare feature) dominate the variance and are mostly missed. Here row ``i``
appears ``n_i >= 1`` times in a population of ``M = sum_i n_i`` positions (``data.arrays.RowsRepeated``), each position
carrying the term ``y = r_i / n_i``; the test draws ``m`` positions uniformly without replacement, exactly as before,
and its estimate ``M mean(y)`` is the Hansen-Hurwitz estimator ``sum_j r_(i_j) / (m p_(i_j))`` with ``p_i = n_i / M``:

    E[M mean(y)] = T,
    Var[M mean(y)] = (M - m) / (M - 1) * (sum_i r_i^2 / p_i - T^2) / m,

the with-replacement variance times the finite-population factor of the ``M`` positions (``docs/notes-on-the-papers.md``,
"Importance-sampled minibatches"). The tests' sample variance of the ``y`` with that factor is its unbiased estimate,
so the penalty test and MHminibatch run unchanged. Reading all ``M`` positions gives ``T`` exactly.

Limiting cases: equal weights give ``n_i = 1`` (after dividing by their common factor), ``M = N``: the estimator is
returned unwrapped and every draw is today's. A row with ``n_i`` so large that every minibatch holds it is better
evaluated exactly: that is the exact stratum (``stratified.py``), which this wraps (weights are over the rows left to
the minibatch).

The copies are ``n_i = max(1, ceil(w_i / u))`` with ``u`` the smallest unit keeping ``M <= budget N``: rows of small
weight keep one copy each (at least ``1 / budget`` of the uniform rate: the variance is never more than ``budget``
times the uniform's, whatever the residuals), rows of large weight are drawn in proportion to it.

Weights: ``probe_weights`` (any estimator) takes each row's root-mean-square residual over pairs of Laplace draws
(the ``p_i`` minimising the mean Hansen-Hurwitz variance over those moves is proportional to it, by Cauchy-Schwarz),
and predicts the variance ratio against uniform sampling on other, held-out draws; ``bound_weights`` (a GLM proxy)
takes the rows' bound weights (``glm.GLMProxy.row_weights``).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.control_variates.base import Estimator, no_row_draw
from minibatch_mcmc.data.arrays import RowsRepeated, as_data_source, slice_rows, split_copies
from minibatch_mcmc.models.base import Model

PyTree = Any

BUDGET = 4
"""Largest ``M / N``: every row keeps at least ``1 / BUDGET`` of its uniform draw rate."""
PROBE_PAIRS = 4
"""Pairs of independent Laplace draws the weights are taken at (and as many held-out pairs for the prediction)."""
WEIGHT_CHUNK = 4096
"""Rows per compiled read of the weights pass."""
HELPS = 0.5
"""The warm-up draws by weight when the held-out predicted variance is at most this fraction of the uniform one
(the rows the penalty test reads for its ``sigma_max`` scale with that variance). Measured at N = 1e5
(``benchmarks/heavy_tails.py``): 0.87 on a plain d = 10 logistic regression and 0.74 on a Student-t regression (weights
nearly equal), 0.045 with 0.1% huge Poisson counts, 4e-4 to 0.009 with a feature in 30 rows (two probe draws), 0.011 with
16 groups down to 30 rows."""
NOISE_FLOOR = 0.02
"""Nor unless the uniform estimate's s.d. at ``REFERENCE_BATCH`` rows exceeds this (nats): below it the acceptance error
of the normal approximation is below the check's 0.02 whatever the residuals' shape (``normality.minibatch_shape``
caps it near that s.d.), so weights cannot help (0.013 for the Poisson case above, 0.10 and 0.57 for the other two)."""
REFERENCE_BATCH = 50
"""The default test's minibatch, at which the rule compares."""


class ImportanceProxy(NamedTuple):
    """An estimator whose minibatch is drawn with probability ``n_i / M`` and whose terms are ``r_i / n_i``."""

    inner: Any
    """The estimator whose residuals are sampled (a ``TaylorProxy``, ``StratifiedProxy`` or ``GLMProxy``)."""
    ends: jax.Array
    """Cumulative copies ``n_1, n_1 + n_2, ...`` over the inner population's rows (int32)."""
    size: int
    """``M``: positions of the repeated population."""
    variance_ratio: float = math.nan
    """Predicted variance of the estimate relative to uniform rows (held-out probe moves; NaN: not predicted)."""
    name: str = "importance"
    row_draw = staticmethod(no_row_draw)

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """``r_i / n_i`` for rows gathered from ``population`` (their ``COPIES`` column)."""
        inner = self.inner.log_ratio(model, current, candidate)

        def ratio(batch: PyTree) -> jax.Array:
            rows, copies = split_copies(batch)
            r = inner(rows)
            return r / copies.astype(r.dtype)

        return ratio

    def known_sum(self, current: PyTree, candidate: PyTree) -> jax.Array:
        """The inner estimator's (the proxy's exact sum, and its stratum's residuals)."""
        return self.inner.known_sum(current, candidate)

    def population(self, data: PyTree) -> RowsRepeated:
        """The inner population with row ``i`` repeated ``n_i`` times."""
        return RowsRepeated(self.inner.population(data), self.ends)

    def population_size(self, n_data: int) -> int:
        """``M``."""
        del n_data
        return self.size

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> None:
        """None: the exact tests draw by their own bounds (``glm.GLMProxy``)."""
        del model, current, candidate

    def subtracts_rows(self) -> bool:
        """The inner estimator's (``r_i / n_i`` keeps its residuals' relative rounding)."""
        return self.inner.subtracts_rows()

    def log_lik_sum(self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int):
        """The inner estimator's (the proposal's gradient minibatch stays uniform)."""
        return self.inner.log_lik_sum(model, key, data, n_data, batch_size)


def copies_for(weights: np.ndarray, budget: float = BUDGET) -> np.ndarray:
    """``n_i = max(1, ceil(w_i / u))`` with the smallest ``u`` keeping ``sum n_i <= budget N``, divided by their common
    factor (equal weights: all 1)."""
    w = np.asarray(weights, np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"row weights must be a non-empty 1-d array of finite values >= 0; got shape {w.shape}")
    budget = check_positive(budget, "budget")
    if budget < 1:
        raise ValueError(f"budget={budget}: M / N must be at least 1 (one copy per row)")
    top, n = float(w.max()), w.size
    if top <= 0:
        return np.ones(n, np.int64)
    count = lambda u: np.sum(np.maximum(np.ceil(w / u), 1.0))  # noqa: E731  decreasing in u
    lo, hi = top / (budget * n), top  # count(hi) = N <= budget N; count(lo) >= budget N unless all equal
    if count(lo) <= budget * n:
        hi = lo
    for _ in range(64):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if count(mid) <= budget * n else (mid, hi)
        if hi / lo < 1 + 1e-9:
            break
    copies = np.maximum(np.ceil(w / hi), 1.0).astype(np.int64)
    if copies.sum() >= 2**31:
        raise ValueError(f"{copies.sum()} positions exceed int32: lower budget={budget}")
    return copies // np.gcd.reduce(copies)


def hansen_hurwitz_variance(residuals: np.ndarray, copies: np.ndarray, batch_size: int) -> float:
    """``Var`` of ``M mean(y)`` over ``m = batch_size`` positions drawn without replacement (module docstring), float64."""
    r, n = np.asarray(residuals, np.float64), np.asarray(copies, np.float64)
    size, total = n.sum(), r.sum()
    return float((size - batch_size) / (size - 1) * (np.sum(r * r * size / n) - total * total) / batch_size)


def importance_sample(
    estimator: Estimator, data: Any, weights: np.ndarray, budget: float = BUDGET, variance_ratio: float = math.nan
) -> Estimator:
    """``estimator`` with its minibatch drawn in proportion to ``weights`` (one per row of its population); the
    estimator itself when the copies are all equal (uniform rows: the same draws as before)."""
    source = as_data_source(data)
    n_pop = estimator.population_size(source.n)
    weights = np.asarray(weights, np.float64)
    if weights.shape != (n_pop,):
        raise ValueError(
            f"weights has shape {weights.shape}; expected ({n_pop},), one per row of the estimator's population"
        )
    copies = copies_for(weights, budget)
    if np.all(copies == 1):
        return estimator
    ends = jnp.asarray(np.cumsum(copies), jnp.int32)
    return ImportanceProxy(
        inner=estimator,
        ends=ends,
        size=int(copies.sum()),
        variance_ratio=float(variance_ratio),
        name=f"{estimator.name}+importance",
    )


class ProbeWeights(NamedTuple):
    """Row weights from probe moves and what they predict."""

    weights: np.ndarray
    """Per row of the population: the root-mean-square residual over the weight pairs (nats)."""
    variance_ratio: float
    """Held-out predicted variance of the weighted estimate over the uniform one (mean over the held-out pairs)."""
    uniform_variance: float
    """Held-out mean variance of a one-row uniform estimate of the residual sum, ``N sum r_i^2 - T^2`` (nats^2)."""
    rows_read: int
    """Rows read (one pass over the population)."""
    seconds: float
    """Wall time of the pass."""


def laplace_points(centre: PyTree, factor: np.ndarray, count: int, key: jax.Array) -> jax.Array:
    """``count`` flat draws from the Laplace fit ``N(c, L L')`` (float64 on the host, in the centre's dtype)."""
    flat = ravel_pytree(centre)[0]
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    z = rng.standard_normal((count, flat.shape[0]))
    return jnp.asarray(np.asarray(flat, np.float64) + z @ np.asarray(factor, np.float64).T, flat.dtype)


def probe_weights(
    model: Model,
    estimator: Estimator,
    data: Any,
    centre: PyTree,
    factor: np.ndarray,
    key: jax.Array,
    *,
    pairs: int = PROBE_PAIRS,
    budget: float = BUDGET,
    chunk: int = WEIGHT_CHUNK,
) -> ProbeWeights:
    """Per row, the RMS of the estimator's residual over ``pairs`` pairs of independent Laplace draws (a global move's),
    and on ``pairs`` held-out pairs the predicted ratio of the weighted to the uniform Hansen-Hurwitz variance."""
    pairs = check_int(pairs, "pairs", 1)
    t0 = time.perf_counter()
    source = as_data_source(data)
    n_pop = estimator.population_size(source.n)
    population = estimator.population(source.arrays())
    unravel = ravel_pytree(centre)[1]
    points = laplace_points(centre, factor, 4 * pairs, key)
    chunk = min(chunk, n_pop)

    def residuals(rows: PyTree) -> jax.Array:
        one = lambda a, b: estimator.log_ratio(model, unravel(a), unravel(b))(rows)  # noqa: E731
        return jax.vmap(one)(points[0::2], points[1::2])

    run = jax.jit(residuals)
    parts, done = [], 0
    while done < n_pop:
        start = min(done, n_pop - chunk)  # the last chunk overlaps its predecessor: one compilation
        parts.append(np.asarray(run(slice_rows(population, start, chunk)), np.float64)[:, done - start :])
        done = start + chunk
    d = np.concatenate(parts, axis=1)
    d = np.where(np.isfinite(d), d, 0.0)
    weights = np.sqrt(np.mean(d[:pairs] ** 2, axis=0))
    held = d[pairs:]
    copies = copies_for(weights, budget)
    size = copies.sum()
    total = held.sum(axis=1)
    weighted = np.sum(held * held * (size / copies), axis=1) - total * total
    uniform = n_pop * np.sum(held * held, axis=1) - total * total
    ratio = float(np.mean(weighted) / np.mean(uniform)) if np.mean(uniform) > 0 else 1.0
    return ProbeWeights(weights, ratio, float(np.mean(uniform)), n_pop, time.perf_counter() - t0)


def bound_weights(proxy: Any, data: Any, chunk: int = WEIGHT_CHUNK) -> np.ndarray:
    """A GLM proxy's per-row bound weights (``glm.GLMProxy.row_weights``) over all rows, streamed."""
    source = as_data_source(data)
    arrays = source.arrays()
    run = jax.jit(proxy.row_weights)
    parts, done, chunk = [], 0, min(chunk, source.n)
    while done < source.n:
        start = min(done, source.n - chunk)
        parts.append(np.asarray(run(slice_rows(arrays, start, chunk)), np.float64)[done - start :])
        done = start + chunk
    return np.concatenate(parts)


def weighted_estimator(
    model: Model,
    estimator: Estimator,
    data: Any,
    centre: PyTree,
    factor: np.ndarray,
    key: jax.Array,
    helps: float = HELPS,
    batch_size: int = REFERENCE_BATCH,
) -> tuple[Estimator, ProbeWeights]:
    """The warm-up's rule: ``estimator`` drawn by its probe weights when the held-out predicted variance ratio is at most
    ``helps`` and the uniform ``batch_size``-row estimate's s.d. exceeds ``NOISE_FLOOR`` nats, else ``estimator`` itself
    (uniform rows), with the weights' measurements."""
    found = probe_weights(model, estimator, data, centre, factor, key)
    noisy = math.sqrt(found.uniform_variance / batch_size) > NOISE_FLOOR
    if not (found.variance_ratio <= helps and noisy):
        return estimator, found
    return importance_sample(estimator, data, found.weights, variance_ratio=found.variance_ratio), found
