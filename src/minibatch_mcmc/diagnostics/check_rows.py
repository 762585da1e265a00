"""The rows the proxy check reads after sampling and its streamed residual sums over them (``proxy_check``).

At every checked draw ``theta`` and its next distinct draw ``theta'`` one streamed pass takes the sums of ``e_i(c, theta)``
and its square and the power sums of the test's residuals ``e_i(theta, theta')`` over the rows ``R`` the minibatches are
drawn from. Its cost does not grow with ``N``.

Past ``CHECK_ROWS`` rows of ``R`` the sums are taken over a uniform sample of ``M = CHECK_ROWS``
of them without replacement (the head of the keyed bijection minibatches use), scaled by ``|R| / M``; up to it every row is
read, as before. Its Monte Carlo error: every quantity is a mean over rows of ``x_i = e_i`` or ``d_i^k`` (k <= 4), whose
estimate has s.d. ``sqrt(Var(x) / M * (1 - M / |R|))``. For ``log w`` that is ``|R| sd(e) / sqrt(M)`` nats per draw, measured
on the sample itself (``ProxyCheck.log_ratio_mc_sd``, stated in the warning). For the normality part, on residuals near
normal the sample skewness and excess kurtosis have s.d. ``sqrt(6 / M)`` and ``sqrt(24 / M)`` (0.014 and 0.027 at
``M = 2^15``), which move the Edgeworth error by at most ``0.40 / 6 * 0.014 / sqrt(m) + 0.55 / 24 * 0.027 / m``
(``max |phi He2| = 0.40``, ``max |phi He3| = 0.55``): 1.4e-4 at ``m = 50``, 1/140 of ``proxy_check.ACCEPTANCE_ERROR_MAX``. Heavier tails
make it larger, and a kind of row with frequency ``f`` is missed by the sample with probability ``exp(-f M)`` (1% at
``f = 4.6 / M``, 1.4e-4): such rare rows are the warm-up's full influence pass's to find (``control_variates.influence``).
Where the estimator's terms are float32 subtractions of row values (``Estimator.subtracts_rows``), a residual within
float32 resolution of its row's terms counts as 0 (``influence.without_rounding``): summed over ``N`` rows, rounding is
not evidence against the proxy; other estimators' terms (each row's difference integrated) are counted as read.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.influence import sampled_rows, without_rounding
from minibatch_mcmc.data.arrays import slice_rows, take
from minibatch_mcmc.data.passes import same_size_chunks
from minibatch_mcmc.models.base import Model

PyTree = Any

SHIFT_ROWS = 256
"""Rows whose mean residual shifts the power sums (so float32 sums do not cancel)."""
CHECK_ROWS = 1 << 15
"""``M``: rows of ``R`` the check reads at most (a uniform sample past it; module docstring for its error). 100 draws x 2
evaluations of 2^15 rows cost about what 0.65 s of a d = 10 logistic regression's check cost at N = 100,000."""
CHECK_CHUNK = 2048
"""Rows per chunk of the check's pass: every checked draw's residuals of a chunk stay in cache (0.43 s against
0.70 s at 16384 rows for 100 draws of a d = 10 logistic regression at N = 100,000)."""


def residual_sums(model: Model, estimator: Estimator, centre: PyTree):
    """``(rows, keep, theta, theta', shift) -> [sum e_i(c, theta), sum d_i, .. sum d_i^4, sum e_i(c, theta)^2]`` and a non-finite
    flag over the kept rows of a chunk, ``d_i`` the test's residual ``e_i(theta, theta')`` less ``shift``, each residual
    counted as ``influence.without_rounding`` counts it; vectorised over the draws."""
    flat_centre, unravel = ravel_pytree(centre)

    def one(
        rows: PyTree, keep: jax.Array, theta: PyTree, moved: PyTree, shift: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        w = estimator.log_ratio(model, centre, theta)(rows)
        d = estimator.log_ratio(model, theta, moved)(rows)
        bad = jnp.any(keep & (~jnp.isfinite(w) | ~jnp.isfinite(d)))
        w = without_rounding(w, estimator, model, flat_centre, unravel, rows)
        d = without_rounding(d, estimator, model, flat_centre, unravel, rows) - shift
        w, d = jnp.where(keep, w, 0.0), jnp.where(keep, d, 0.0)
        d2 = d * d
        return jnp.stack([jnp.sum(w), jnp.sum(d), jnp.sum(d2), jnp.sum(d2 * d), jnp.sum(d2 * d2), jnp.sum(w * w)]), bad

    return jax.vmap(one, in_axes=(None, None, 0, 0, 0))


def check_chunks(n_pop: int, key: jax.Array) -> tuple[list[tuple[PyTree, np.ndarray]], int]:
    """``(rows, keep)`` chunks of ``CHECK_CHUNK`` rows covering the rows the check reads (all ``n_pop`` up to ``CHECK_ROWS``,
    else a uniform sample of ``CHECK_ROWS``; the last chunk padded with masked rows), as readers, and how many rows."""
    if n_pop <= CHECK_ROWS:
        return [((start, size), keep) for start, size, keep in same_size_chunks(n_pop, CHECK_CHUNK)], n_pop
    rows = sampled_rows(key, n_pop, CHECK_ROWS)
    size = min(CHECK_CHUNK, CHECK_ROWS)
    out = []
    for start in range(0, CHECK_ROWS, size):
        part = rows[start : start + size]
        out.append((np.resize(part, size).astype(np.int32), np.arange(size) < part.size))
    return out, CHECK_ROWS


def read_chunk(population: PyTree, where: Any) -> PyTree:
    """The rows of one ``check_chunks`` chunk: a contiguous ``(start, size)`` block, or gathered row indices. Over several
    processes (a row-partitioned source: ``data/shards.py``) a block is gathered too, so every process reads the same
    rows from their owners: the check reads at most ``CHECK_ROWS`` rows whatever ``N``, so it needs no pass per process."""
    if isinstance(where, tuple) and jax.process_count() > 1:
        where = jnp.arange(where[0], where[0] + where[1], dtype=jnp.int32)
    return slice_rows(population, *where) if isinstance(where, tuple) else take(population, where)


def streamed_sums(
    model: Model,
    estimator: Estimator,
    centre: PyTree,
    population: PyTree,
    n_pop: int,
    at: PyTree,
    moved: PyTree,
    key: jax.Array | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``residual_sums`` over the rows the check reads (``check_chunks``) at every checked move, in float64 and scaled to
    all ``n_pop`` rows, the moves with a non-finite term, and the rows read.

    One streamed pass serves all the draws; every chunk has the same size (one compilation), the sums of each
    chunk are added on the host in float64, and ``shift`` is the mean ``d_i`` over the first ``SHIFT_ROWS`` rows read,
    by the same compiled function (so the float32 power sums do not cancel)."""
    sums = jax.jit(residual_sums(model, estimator, centre))
    count = jax.tree_util.tree_leaves(at)[0].shape[0]
    if n_pop < 1:  # every row is in the stratum: no residual left to the proxy
        return np.zeros((count, 6)), np.zeros(0, bool), 0
    chunks, read = check_chunks(n_pop, jax.random.key(0) if key is None else key)
    first = read_chunk(population, chunks[0][0])
    head = min(SHIFT_ROWS, read)
    zero = np.zeros(count, np.float32)  # host arrays in: no compiled transfer or fill
    shift = np.asarray(
        np.asarray(sums(first, np.arange(len(chunks[0][1])) < head, at, moved, zero)[0])[:, 1] / head, np.float32
    )
    total, bad = 0.0, False
    for j, (where, keep) in enumerate(chunks):
        part, flag = sums(first if j == 0 else read_chunk(population, where), keep, at, moved, shift)
        total, bad = total + np.asarray(part, np.float64), bad | np.asarray(flag)
    return total * (n_pop / read), bad, read


def sample_sd(total: np.ndarray, n_pop: int, read: int) -> np.ndarray:
    """Per draw, the Monte Carlo s.d. of the sampled estimate of ``sum_i e_i`` (``total`` scaled to ``n_pop`` rows)."""
    if read >= n_pop:
        return np.zeros(total.shape[0])
    mean, square = total[:, 0] / n_pop, total[:, 5] / n_pop
    return n_pop * np.sqrt(np.maximum(square - mean * mean, 0.0) / read * (1.0 - read / n_pop))
