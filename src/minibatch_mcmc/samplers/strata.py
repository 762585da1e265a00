"""The stratified minibatch estimator of a sum over rows split into shards (the data-parallel sampler's estimator).

The ``N`` rows lie in ``S`` shards (strata) of ``N_s`` rows. Shard ``s`` draws ``m_s`` of its rows uniformly with
replacement and estimates its sum of terms ``r_i`` by ``N_s`` times their mean; the estimate of the whole sum is the
sum of the shards' estimates. It is unbiased, its variance is ``sum_s N_s^2 sigma_s^2 / m_s`` (``sigma_s^2`` the
variance of the shard's terms with denominator ``N_s``), and ``sum_s N_s^2 v_s / m_s`` with ``v_s`` the sample variance
of the ``m_s`` draws (denominator ``m_s - 1``) estimates that variance without bias; Satterthwaite's degrees of freedom
say how noisy that estimate is (docs/notes-on-the-papers.md, "Stratified minibatches over shards"). Each shard reduces
its draws to the four numbers of ``StratumSums``; their sums over the shards (one ``psum``) are all ``combine`` needs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class StratumSums(NamedTuple):
    """One shard's reduction of its draws; summed over the shards, what ``combine`` reads."""

    total: jax.Array
    """``N_s`` times the mean of the shard's draws: its estimate of the shard's sum."""
    variance: jax.Array
    """``N_s^2 v_s / m_s``: the estimated variance of ``total``."""
    dof_term: jax.Array
    """``variance^2 / (m_s - 1)``: the shard's term of Satterthwaite's denominator."""
    bad: jax.Array
    """1.0 when a drawn term was NaN or infinite, else 0.0 (a float, so the four sum as one vector)."""


def allocate(sizes: np.ndarray, batch_size: int) -> np.ndarray:
    """Draws per shard, ``m_s`` proportional to ``N_s`` (largest remainders), each at least 2, summing to ``batch_size``."""
    sizes = np.asarray(sizes, np.int64)
    if sizes.ndim != 1 or sizes.size < 1 or np.any(sizes < 1):
        raise ValueError(f"shard sizes {sizes.tolist()} must be a non-empty list of positive row counts")
    if batch_size < 2 * sizes.size:
        raise ValueError(
            f"batch_size={batch_size} is below 2 rows for each of the {sizes.size} shards: use at least "
            f"{2 * sizes.size} (each shard estimates its variance from its own draws)"
        )
    share = batch_size * sizes / sizes.sum()
    m = np.maximum(np.floor(share).astype(np.int64), 2)
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    for s in order[: max(batch_size - int(m.sum()), 0)]:
        m[s] += 1
    while m.sum() > batch_size:  # the floor of 2 took rows from the largest shards' shares
        s = int(np.argmax(np.where(m > 2, m - share, -np.inf)))
        m[s] -= 1
    return m


def stratum_sums(terms: jax.Array, valid: jax.Array, n_rows: jax.Array, count: jax.Array) -> StratumSums:
    """``StratumSums`` of one shard of ``n_rows`` rows from its ``count`` draws ``terms[valid]`` (``terms[0]`` valid).

    Sums are taken about the first draw, so a large common value of the terms does not cancel in the variance."""
    dtype = terms.dtype
    bad = jnp.any(valid & ~jnp.isfinite(terms))
    shift = jnp.where(jnp.isfinite(terms[0]), terms[0], 0.0)
    z = jnp.where(valid & jnp.isfinite(terms), terms - shift, 0.0)
    m = count.astype(dtype)
    n = n_rows.astype(dtype)
    mean_z = jnp.sum(z) / m
    v = jnp.maximum(jnp.sum(z * z) - m * mean_z * mean_z, 0.0) / (m - 1.0)
    variance = n * n * v / m
    return StratumSums(
        total=n * (shift + mean_z), variance=variance, dof_term=variance * variance / (m - 1.0), bad=bad.astype(dtype)
    )


def combine(summed: StratumSums) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The estimate of the whole sum, its estimated variance and Satterthwaite's degrees of freedom, from the shards'
    ``StratumSums`` summed (the degrees of freedom are infinite when the variance is 0)."""
    dof = jnp.where(
        summed.dof_term > 0,
        summed.variance * summed.variance / jnp.where(summed.dof_term > 0, summed.dof_term, 1.0),
        jnp.inf,
    )
    return summed.total, summed.variance, dof


def stack(sums: StratumSums) -> jax.Array:
    """The four numbers as one vector (``(..., 4)``), so one collective sums them."""
    return jnp.stack(list(sums), axis=-1)


def unstack(vector: jax.Array) -> StratumSums:
    """``stack``'s inverse."""
    return StratumSums(*(vector[..., i] for i in range(4)))
