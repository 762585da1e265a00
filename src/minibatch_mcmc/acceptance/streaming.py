"""The one streaming estimator behind every minibatch test.

Each test reads its minibatch chunk by chunk (rows drawn without replacement) and folds the
per-datum terms ``lam_i`` into a ``StreamingSums`` with ``add_rows``; ``grow`` is the one loop that
does so, and the test keeps only its growth rule (when to stop reading) and its decision. The sums are kept relative to a ``shift`` (the
first chunk's mean) and, on request, in units of the first chunk's largest ``|lam_i - shift|``, so the
powers stay near 1 whatever the scale ``N / K`` is; ``s1`` carries a Neumaier compensation term.

What ``lam_i`` is belongs to the estimator of the log-likelihood difference (``Statistics.log_ratio``):
the plain per-datum ratio, or a control-variate residual whose data-free part is ``Statistics.known_sum``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, compensated_add, uniform_from_bits
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import chunk_indices, permuted_index


class StreamingSums(NamedTuple):
    """Sums of ``z^k``, ``z = (lam_i - shift) / unit``, over the rows read so far."""

    count: jax.Array
    """Rows folded in (int32)."""
    shift: jax.Array
    """Mean of the first chunk's terms."""
    unit: jax.Array
    """Largest ``|lam_i - shift|`` of the first chunk when normalising, else 1."""
    s1: jax.Array
    """Sum of ``z``."""
    c1: jax.Array
    """Neumaier compensation of ``s1``."""
    s2: jax.Array
    """Sum of ``z^2``."""
    s3: jax.Array
    """Sum of ``z^3`` (kept only with ``higher=True``)."""
    s4: jax.Array
    """Sum of ``z^4`` (kept only with ``higher=True``)."""
    bad: jax.Array
    """True once a term was NaN or infinite (the driver raises)."""


def init_sums(dtype) -> StreamingSums:
    """Empty sums of the given float dtype."""
    zero = jnp.zeros((), dtype)
    return StreamingSums(
        jnp.zeros((), jnp.int32), zero, jnp.ones((), dtype), zero, zero, zero, zero, zero, jnp.zeros((), bool)
    )


def add_rows(
    sums: StreamingSums, lam: jax.Array, valid: jax.Array, *, normalise: bool = False, higher: bool = False
) -> StreamingSums:
    """Fold the ``valid`` entries of ``lam`` into the sums; a non-finite valid entry sets ``bad`` and counts as 0."""
    dtype = sums.s1.dtype
    bad = jnp.any(valid & ~jnp.isfinite(lam))
    lam = jnp.where(valid & jnp.isfinite(lam), lam, 0.0)
    w = valid.astype(dtype)
    cnt = jnp.sum(w)
    first = sums.count == 0
    shift = jnp.where(first, jnp.sum(lam) / jnp.maximum(cnt, 1.0), sums.shift)
    if normalise:
        spread = jnp.max(jnp.abs(lam - shift) * w)
        unit = jnp.where(first, jnp.where(spread > 0, spread, 1.0), sums.unit)
        z = (lam - shift) / unit * w
    else:
        unit = sums.unit
        z = (lam - shift) * w
    z2 = z * z
    s1, c1 = compensated_add(sums.s1, sums.c1, jnp.sum(z))
    s3, s4 = (sums.s3 + jnp.sum(z2 * z), sums.s4 + jnp.sum(z2 * z2)) if higher else (sums.s3, sums.s4)
    return StreamingSums(
        count=sums.count + cnt.astype(jnp.int32),
        shift=shift,
        unit=unit,
        s1=s1,
        c1=c1,
        s2=sums.s2 + jnp.sum(z2),
        s3=s3,
        s4=s4,
        bad=sums.bad | bad,
    )


def mean_and_variance(sums: StreamingSums) -> tuple[jax.Array, jax.Array]:
    """Running mean and sample variance (``n - 1`` denominator) of the terms, in their own units."""
    dtype = sums.s1.dtype
    t = jnp.maximum(sums.count, 1).astype(dtype)
    tot = sums.s1 + sums.c1
    var = jnp.maximum(sums.s2 - tot * tot / t, 0.0) / jnp.maximum(t - 1.0, 1.0)
    return sums.shift + sums.unit * (tot / t), sums.unit * sums.unit * var


def read_terms(stats: Statistics, idx: jax.Array, dtype) -> jax.Array:
    """The estimator's per-datum terms ``log_ratio_i`` (un-tempered) on rows ``idx``, in ``dtype``."""
    return stats.log_ratio(take(stats.data, idx)).astype(dtype)


def grow(
    key: jax.Array,
    round_keys: jax.Array,
    stats: Statistics,
    chunk_size: int,
    terms: Callable[[jax.Array], jax.Array],
    rule: Callable[[StreamingSums, Any], tuple[Any, jax.Array]],
    state: Any,
    sums: StreamingSums,
    *,
    end: Callable[[Any], jax.Array] | None = None,
    normalise: bool = False,
    higher: bool = False,
) -> tuple[StreamingSums, Any]:
    """The growth loop of every sequential minibatch test: read the next positions of the step's order in chunks.

    Each chunk takes up to ``chunk_size`` positions after the ``sums.count`` already read, never crossing
    ``end(state)`` (default ``N``), folds ``terms(log_ratio_i)`` into the sums and asks
    ``rule(sums, state) -> (state, done)``. The first chunk is always read (outside the loop: cheaper
    when it decides); the loop stops once ``done``.
    """
    n = stats.n_data
    dtype = sums.s1.dtype
    offsets = jnp.arange(chunk_size, dtype=jnp.int32)

    def add_chunk(carry: tuple[StreamingSums, Any, jax.Array]) -> tuple[StreamingSums, Any, jax.Array]:
        sums, state, _ = carry
        pos = sums.count + offsets
        valid = pos < (n if end is None else end(state))
        idx = permuted_index(key, jnp.where(valid, pos, 0), n, round_keys)
        sums = add_rows(sums, terms(read_terms(stats, idx, dtype)), valid, normalise=normalise, higher=higher)
        state, done = rule(sums, state)
        return sums, state, done

    sums, state, _ = jax.lax.while_loop(lambda c: ~c[2], add_chunk, add_chunk((sums, state, jnp.zeros((), bool))))
    return sums, state


def order_and_uniform(key: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
    """The random bits of a threshold test (AustereMH, MHSubLhd, naive): four Feistel round keys of the minibatch
    order and the uniform ``u`` of ``log u < Delta``."""
    bits = jax.random.bits(key, (5,), dtype=jnp.uint32)
    return bits[:4], uniform_from_bits(bits[4], dtype)


def first_chunk(key: jax.Array, round_keys: jax.Array, batch_size: int, n_data: int) -> jax.Array:
    """The rows of the first chunk of ``batch_size`` in the step's order (``batch_size <= N``: all valid)."""
    return chunk_indices(key, jnp.zeros((), jnp.int32), batch_size, n_data, round_keys)[0]


def decision_dtype(stats: Statistics):
    """The float dtype decisions are computed in (``psi``'s, at least float32)."""
    return jnp.result_type(stats.psi, jnp.float32)
