"""The one streaming estimator behind every minibatch test.

Each test reads its minibatch chunk by chunk (rows drawn without replacement) and folds the
per-datum terms ``lam_i`` into a ``StreamingSums`` with ``add_rows``; the test keeps only its growth
rule (when to read another chunk) and its decision. The sums are kept relative to a ``shift`` (the
first chunk's mean) and, on request, in units of the first chunk's largest ``|lam_i - shift|``, so the
powers stay near 1 whatever the scale ``N / K`` is; ``s1`` carries a Neumaier compensation term.

What ``lam_i`` is belongs to the estimator of the log-likelihood difference (``Statistics.log_ratio``):
the plain per-datum ratio, or a control-variate residual whose data-free part is ``Statistics.known_sum``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, compensated_add
from minibatch_mcmc.data.arrays import take


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
    return StreamingSums(jnp.zeros((), jnp.int32), zero, jnp.ones((), dtype), zero, zero, zero, zero, zero, jnp.zeros((), bool))


def add_rows(sums: StreamingSums, lam: jax.Array, valid: jax.Array, *, normalise: bool = False, higher: bool = False) -> StreamingSums:
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


def decision_dtype(stats: Statistics):
    """The float dtype decisions are computed in (``psi``'s, at least float32)."""
    return jnp.result_type(stats.psi, jnp.float32)
