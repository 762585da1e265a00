"""MHminibatch with a skew correction (Seita et al. 2017, supplement E): ``X_corr ~ C_{sigma,kappa}``.

The plain test treats ``T = delta_star - Delta + X_nc`` as ``N(0, sigma^2)``; its error is O(b^-1/2),
from the skew of the per-datum terms ``Lambda_i``. To first order, ``T`` has the density
``phi_sigma - kappa phi_sigma'''`` with

    kappa = -K3 (1 - f)(2 - f) / (6 b^2),        f = b / N,

where ``K3`` is the population's third k-statistic (``N^2 / ((N-1)(N-2))`` times its third central
moment). Two terms add up to it: the skew of the mean (third cumulant ``K3 (1-f)(1-2f) / b^2``, weight
``+1/6``) and the covariance of the mean with the estimated ``s2`` that sets ``X_nc``'s variance
(``K3 (1-f)^2 / b^2``, weight ``-1/2``); without replacement both carry the finite-population factors
above, and for ``f -> 0`` the sum is ``-K3 / (3 b^2)`` (docs/notes-on-the-papers.md gives the derivation).
``K3`` is estimated unbiasedly by the minibatch's k-statistic ``k3`` (unbiased without replacement
too); written with the minibatch's skewness ``g = k3 / k2^(3/2)`` and ``s2``,
``kappa = -g s2^(3/2) (2 - f) / (6 sqrt(b) sqrt(1 - f))``.

``X_corr`` is drawn from the shipped rows ``C_{sigma,kappa_r}`` (``kappa_r >= 0``): the two rows around
``|kappa|`` are mixed with linear weights (one uniform picks the row, two more drive the alias draw
within it), and a negative ``kappa`` mirrors the draw. A ``|kappa|`` beyond the table's ``KAPPA_MAX`` is
clipped to it (the skew is then only partly corrected). The growth rule and the minibatch are those
of :class:`~minibatch_mcmc.acceptance.mhminibatch.MHMinibatch`, so both tests read the same rows for
the same key.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import (
    Statistics,
    TestOutcome,
    check_batch_fits,
    population_fraction_left,
    untempered,
)
from minibatch_mcmc.acceptance.correction import SkewCorrectionTable, check_sigma, load_skew_correction
from minibatch_mcmc.acceptance.mhminibatch import first_chunk_indices, minibatch_outcome, read_estimate
from minibatch_mcmc.acceptance.streaming import StreamingSums
from minibatch_mcmc.checks import check_int, check_probability


class SkewSampler(NamedTuple):
    """Device arrays of a :class:`~minibatch_mcmc.acceptance.correction.SkewCorrectionTable`."""

    support: jax.Array
    alias_prob: jax.Array
    """``(rows, cells)``: cell ``c`` of row ``r`` keeps its atom with this probability."""
    alias_index: jax.Array
    """``(rows, cells)``: the atom taken otherwise."""
    kappa_step: float
    kappa_max: float


def make_skew_sampler(table: SkewCorrectionTable) -> SkewSampler:
    """Move a skew table's support and alias arrays to the device."""
    kappas = np.asarray(table.kappas)
    return SkewSampler(
        support=jnp.asarray(table.support),
        alias_prob=jnp.asarray(table.alias_prob),
        alias_index=jnp.asarray(table.alias_index, dtype=jnp.int32),
        kappa_step=float(kappas[1] - kappas[0]),
        kappa_max=float(kappas[-1]),
    )


def skew_correction_from_uniforms(
    kappa: jax.Array, u_index: jax.Array, u_coin: jax.Array, u_row: jax.Array, sampler: SkewSampler
) -> jax.Array:
    """``X_corr ~ C_{sigma,kappa}`` from three uniforms: ``u_row`` mixes the two rows around ``|kappa|`` (clipped)."""
    rows, cells = sampler.alias_prob.shape
    pos = jnp.clip(jnp.abs(kappa) / sampler.kappa_step, 0.0, rows - 1.0)
    low = jnp.clip(jnp.floor(pos).astype(jnp.int32), 0, rows - 2)
    row = low + (u_row < pos - low.astype(pos.dtype)).astype(jnp.int32)
    cell = jnp.clip(jnp.floor(u_index * cells).astype(jnp.int32), 0, cells - 1)
    keep = u_coin < sampler.alias_prob[row, cell].astype(u_coin.dtype)
    x = sampler.support[jnp.where(keep, cell, sampler.alias_index[row, cell])]
    return jnp.where(kappa < 0, -x, x)


def skew_kappa(mom: StreamingSums, n: int, s2: jax.Array) -> jax.Array:
    """``kappa = -g s2^(3/2) (2 - f) / (6 sqrt(b) sqrt(1 - f))`` from the streamed sums (0 without spread or data left)."""
    dtype = mom.s1.dtype
    b = jnp.maximum(mom.count, 3).astype(dtype)
    a = (mom.s1 + mom.c1) / b
    r2, r3 = mom.s2 / b, mom.s3 / b
    m2 = jnp.maximum(r2 - a * a, 0.0)
    m3 = r3 - 3.0 * a * r2 + 2.0 * a**3
    tiny = jnp.finfo(dtype).tiny
    spread = m2 > jnp.finfo(dtype).eps * jnp.maximum(r2, tiny)
    k2 = m2 * b / (b - 1.0)
    k3 = m3 * b * b / ((b - 1.0) * (b - 2.0))
    g = jnp.where(spread, k3 / jnp.maximum(k2, tiny) ** 1.5, 0.0)
    left = population_fraction_left(mom.count, n, dtype)
    kappa = -g * s2**1.5 * (1.0 + left) / (6.0 * jnp.sqrt(b) * jnp.sqrt(jnp.maximum(left, tiny)))
    return jnp.where(left > 0, kappa, 0.0)


class MHMinibatchSkew(NamedTuple):
    """MHminibatch whose correction ``C_{sigma,kappa}`` also cancels the skew of the minibatch mean (supplement E)."""

    batch_size: int
    """Initial minibatch size ``m``, also the growth increment."""
    sigma: float
    """Target s.d. of the minibatch noise; the minibatch grows while ``s2 >= sigma^2``."""
    delta: float | None
    """Bound on the CLT error ``epsilon``; ``None`` records ``epsilon`` without enforcing it."""
    correction: SkewSampler
    """O(1) sampler of ``X_corr ~ C_{sigma,kappa}``."""
    correction_error: float
    """Max CDF error of any row or two-row mixture of ``C_{sigma,kappa}`` against the standard logistic."""
    name: str = "mhminibatch_skew"
    decision_rule = "barker"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against the data size ``N``."""
        check_batch_fits(self.batch_size, n_data)

    temperature_factor = staticmethod(untempered)

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The first chunk of ``m`` rows (MHminibatch's)."""
        return first_chunk_indices(key, self.batch_size, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Grow the minibatch as MHminibatch does, then run the Barker test with ``X_corr ~ C_{sigma,kappa}``."""
        n = stats.n_data
        read = read_estimate(key, stats, self.batch_size, self.sigma, self.delta)
        u, delta_star = read.uniforms, read.delta_star
        kappa = jnp.clip(skew_kappa(read.mom, n, read.st.s2), -self.correction.kappa_max, self.correction.kappa_max)
        x_nc = (
            jnp.sqrt(2.0)
            * jax.scipy.special.erfinv(2.0 * u[0] - 1.0)
            * jnp.sqrt(jnp.maximum(self.sigma**2 - read.st.s2, 0.0))
        )
        # u[3] picks the row when the minibatch is not exhausted, else gives the logistic draw: never both
        x_corr = skew_correction_from_uniforms(kappa, u[1], u[2], u[3], self.correction).astype(u.dtype)
        x_log = jnp.log(u[3]) - jnp.log1p(-u[3])
        exhausted = read.mom.count >= n
        return minibatch_outcome(jnp.where(exhausted, delta_star + x_log > 0, delta_star + x_nc + x_corr > 0), read)


def mh_minibatch_skew(batch_size: int = 50, sigma: float = 1.0, delta: float | None = None) -> MHMinibatchSkew:
    """MHminibatch with a correction for the minibatch mean's skewness (``sigma`` must have a shipped skew table).

    Args:
        batch_size: ``m``, the first minibatch and the rows added while too noisy (at least 3).
        sigma: The noise level, as in ``mh_minibatch``.
        delta: Also grow until the CLT error bound is at most ``delta``; None: do not enforce it.
    """
    batch_size = check_int(batch_size, "batch_size m", low=3, why="the third k-statistic needs three points")
    sigma = check_sigma(sigma)
    if delta is not None:
        delta = check_probability(delta, "delta", why="or None: do not enforce the CLT error bound")
    table = load_skew_correction(sigma)
    return MHMinibatchSkew(
        batch_size=batch_size,
        sigma=sigma,
        delta=delta,
        correction=make_skew_sampler(table),
        correction_error=float(table.max_cdf_error),
    )
