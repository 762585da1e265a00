"""Naive minibatch Metropolis-Hastings, for contrast only: it is biased.

It plugs the minibatch estimate ``delta_star = N mean_{i in batch} l_i + psi`` of ``Delta`` into the
Metropolis test ``log u < delta_star`` as if it were exact. Because ``min(1, exp(.))`` is concave
where it matters and the estimate is noisy, ``E[min(1, exp(delta_star))] != min(1, exp(Delta))``: the
test accepts moves that look good by chance too often, and the chain's stationary distribution
is wider than the posterior (the more so the larger the noise ``N^2 Var(l)/m``). MHminibatch
exists to remove exactly this noise-induced error.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, check_batch_fits, uniform_from_bits
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import chunk_indices


class NaiveMinibatch(NamedTuple):
    """A fixed minibatch of ``m`` points without replacement and an uncorrected Metropolis test."""

    batch_size: int
    name: str = "naive_minibatch"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against ``N``."""
        check_batch_fits(self.batch_size, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept iff ``log u < N * mean(l_i over the minibatch) + psi`` (biased)."""
        n, m = stats.n_data, self.batch_size
        bits = jax.random.bits(key, (5,), dtype=jnp.uint32)
        dtype = jnp.result_type(stats.psi, jnp.float32)
        u = uniform_from_bits(bits[4], dtype)
        idx, _ = chunk_indices(key, jnp.zeros((), jnp.int32), m, n, bits[:4])
        lam = stats.log_ratio(take(stats.data, idx)).astype(dtype) / stats.temperature
        bad = jnp.any(~jnp.isfinite(lam)) | jnp.isnan(stats.psi)
        mean = jnp.mean(lam)
        delta_star = float(n) * mean + stats.psi
        var = float(n) * float(n) * jnp.var(lam, ddof=1) / m * (1.0 - m / n)
        return TestOutcome(
            accepted=(jnp.log(u) < delta_star) & ~bad,
            batch_size=jnp.asarray(m, jnp.int32),
            s2=var,
            epsilon=jnp.zeros((), dtype),
            delta_star=delta_star,
            nonfinite=bad,
            hidden_data=jnp.zeros((), jnp.int32),
        )


def naive_minibatch(batch_size: int = 100) -> NaiveMinibatch:
    """The biased plug-in minibatch Metropolis test (for comparison only)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size m={batch_size!r} must be an integer >= 2")
    return NaiveMinibatch(int(batch_size))
