"""Rows read a Poisson number of times in proportion to their bounds: the pass Scalable MH, MH-SS and TunaMH share.

Every bound-based exact test draws ``B ~ Poisson(mean)`` rows, row ``i`` with probability ``b_i / sum_j b_j``
(the bounds' ``draw``; without one, uniformly with every ``b_i`` raised to ``b_max``), evaluates the residual
``r_i`` on each and marks it with a test-specific rule (an event for Scalable MH, an inclusion for
MH-SS/TunaMH). ``B`` is random and unbounded: rows are read ``chunk_size`` at a time in a ``lax.while_loop``
until ``B`` are read or the test says stop, so under ``vmap`` nothing truncates it. On a full-data step the
same loop reads all ``N`` rows in order and only sums the residuals.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome
from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.data.arrays import take

BOUND_SLACK = 1e-4
"""Relative slack before an evaluated ``|r_i|`` counts as above its bound (float32 rounding of both sides)."""

ROWS_AHEAD = 32
"""Rows of a bound-based step named before it runs (``rows_ahead``, rounded up to whole chunks): an out-of-core run
reads them ahead, and a step that reads more is run again on the source (``samplers.planned_runner``)."""

Mark = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
"""``mark(r, b, u, valid) -> (score, stop)``: a chunk's contribution to the test's score and whether to stop reading."""
Draw = Callable[[jax.Array, int], jax.Array]
"""``draw(key, count)``: rows drawn in proportion to their bounds (``ResidualBounds.draw``)."""


class Thinned(NamedTuple):
    """What one pass over the drawn rows found."""

    read: jax.Array
    """Rows evaluated (int32)."""
    stopped: jax.Array
    """The test's ``mark`` asked to stop (never on a full-data step)."""
    total: jax.Array
    """Sum of the tempered residuals ``r_i / K`` read (the data part of ``Delta`` on a full-data step)."""
    score: jax.Array
    """Sum of ``mark``'s scores (0 on a full-data step)."""
    bad: jax.Array
    """A residual read was NaN or infinite."""
    over: jax.Array
    """An evaluated ``|r_i|`` exceeded its bound on a thinned step."""


def bound_rate(stats: Statistics, dtype) -> tuple[jax.Array, jax.Array]:
    """``(sum_i b_i / K, b_max / K)``, the sum being ``N b_max / K`` when rows are drawn uniformly (no ``draw``)."""
    if stats.bounds is None:
        raise ValueError("bound_rate needs Statistics.bounds")
    bounds = stats.bounds
    b_max = jnp.asarray(bounds.largest, dtype) / stats.temperature
    rate = stats.n_data * b_max if bounds.draw is None else jnp.asarray(bounds.total, dtype) / stats.temperature
    return rate, b_max


def require_bounds(stats: Statistics, test: str) -> None:
    """Refuse a ``Statistics`` without per-datum bounds, saying what to supply."""
    if stats.bounds is None:
        raise ValueError(
            f"{test} needs per-datum bounds on the residuals: pass an estimator whose residual_bounds supplies "
            "|r_i| <= b_i (for a GLM: estimator=control_variates.glm_proxy(data, centre, family=...); "
            "auto_sample(test='smh') builds it for the shipped GLMs); the plain estimator and a general Taylor "
            "proxy have none"
        )


def most_expected(max_expected: float | None, n_data: int) -> float:
    """The Poisson mean above which a step falls back to full data: ``max_expected``, at most (and by default) ``N``."""
    return float(n_data) if max_expected is None else min(float(max_expected), float(n_data))


def poisson_count(
    key: jax.Array, mean: jax.Array, max_expected: float | None, n_data: int
) -> tuple[jax.Array, jax.Array]:
    """``(full, limit)``: whether the step falls back to full data (``mean`` above the cap, or NaN: a rule as symmetric in
    ``(theta, theta')`` as the bounds are) and the rows to read, ``B ~ Poisson(mean)`` or ``N``."""
    full = ~(mean <= most_expected(max_expected, n_data))
    count = jax.random.poisson(key, jnp.where(full, 0.0, mean)).astype(jnp.int32)
    return full, jnp.where(full, n_data, count)


def loop_settings(chunk_size: int, max_expected: float | None) -> tuple[int, float | None]:
    """Checked ``chunk_size`` (an integer >= 1) and ``max_expected`` (> 0, or None for ``N``)."""
    chunk_size = check_int(chunk_size, "chunk_size", low=1)
    return chunk_size, None if max_expected is None else check_positive(max_expected, "max_expected")


def picked_rows(key: jax.Array, read: jax.Array, n_data: int, draw: Draw | None, chunk_size: int) -> tuple:
    """``(rows, mark_key)`` of the loop iteration that starts after ``read`` rows: ``chunk_size`` rows drawn by ``draw``
    (uniformly without one) from ``key`` and ``read`` alone, never from the state."""
    k_pick, k_mark = jax.random.split(jax.random.fold_in(key, read))
    if draw is None:
        return jax.random.randint(k_pick, (chunk_size,), 0, n_data, jnp.int32), k_mark  # exactly uniform
    return draw(k_pick, chunk_size), k_mark


def rows_ahead(key: jax.Array, n_data: int, draw: Draw | None, chunk_size: int) -> jax.Array:
    """The rows a thinned pass with ``key`` reads in its first ``ceil(ROWS_AHEAD / chunk_size)`` iterations, in order:
    every row of a step that reads at most that many (a full-data step reads others, and says so by ``fallback``)."""
    chunks = -(-ROWS_AHEAD // chunk_size)
    reads = [picked_rows(key, jnp.int32(j * chunk_size), n_data, draw, chunk_size)[0] for j in range(chunks)]
    return jnp.concatenate(reads).astype(jnp.int32)


def thinned_pass(
    key: jax.Array,
    stats: Statistics,
    limit: jax.Array,
    full: jax.Array,
    go: jax.Array,
    b_max: jax.Array,
    chunk_size: int,
    dtype,
    mark: Mark,
) -> Thinned:
    """Read ``limit`` rows (drawn in proportion to their bounds, or all ``N`` in order when ``full``) while ``go``."""
    n, c = stats.n_data, chunk_size
    temp = stats.temperature
    bounds = stats.bounds
    offsets = jnp.arange(c, dtype=jnp.int32)

    def more(carry):
        read, stopped = carry[:2]
        return go & (read < limit) & ~stopped

    def chunk(carry):
        read, stopped, total, score, bad, over = carry
        pos = read + offsets
        valid = pos < limit
        picked, k_mark = picked_rows(key, read, n, bounds.draw, c)
        idx = jnp.where(full, jnp.minimum(pos, n - 1), picked)
        rows = take(stats.data, idx)
        r = stats.log_ratio(rows).astype(dtype) / temp
        b = b_max if bounds.draw is None else bounds.per_datum(rows).astype(dtype) / temp
        b = jnp.broadcast_to(b, r.shape)
        bad = bad | jnp.any(valid & ~jnp.isfinite(r))
        over = over | (~full & jnp.any(valid & (jnp.abs(r) > b * (1.0 + BOUND_SLACK))))
        add, stop = mark(r, b, jax.random.uniform(k_mark, (c,), dtype), valid)
        total = total + jnp.sum(jnp.where(valid, r, 0.0))
        score = score + jnp.where(full, 0.0, add)
        return read + jnp.sum(valid.astype(jnp.int32)), stopped | (~full & stop), total, score, bad, over

    zero = jnp.zeros((), dtype)
    no = jnp.zeros((), bool)
    out = jax.lax.while_loop(more, chunk, (jnp.zeros((), jnp.int32), no, zero, zero, no, no))
    return Thinned(*out)


def bound_outcome(accepted, pas: Thinned, delta_star, bad, expected, full) -> TestOutcome:
    """The record of a bound-based step: rows read, the Poisson mean (0 on a full-data step), fallback and bound flags."""
    zero = jnp.zeros((), delta_star.dtype)
    return TestOutcome(
        accepted=accepted,
        batch_size=pas.read,
        s2=zero,
        epsilon=zero,
        delta_star=delta_star,
        nonfinite=bad,
        hidden_data=jnp.zeros((), jnp.int32),
        residual_sd=zero,
        pvalue_threshold=zero,
        half_width=zero,
        expected_batch_size=jnp.where(full, 0.0, expected).astype(delta_star.dtype),
        fallback=full,
        bound_exceeded=pas.over,
    )
