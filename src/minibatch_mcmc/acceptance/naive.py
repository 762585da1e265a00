"""Naive minibatch Metropolis-Hastings, for contrast only: it is biased.

It draws one fixed minibatch of ``m`` points without replacement, plugs the estimate

    delta_star = N mean_{i in batch} l_i + psi,    l_i = (log p(x_i|theta') - log p(x_i|theta)) / K,

of the log acceptance ratio ``Delta = N mean_i l_i + psi`` into the Metropolis test
``log u < delta_star`` as if it were exact, and applies no correction for the noise of the
estimate. Its acceptance probability is ``E[min(1, exp(delta_star))]``, not ``min(1, exp(Delta))``:
``min(1, e^x)`` is convex for ``x < 0``, so for a move that the exact test would usually reject
(``Delta < 0``) the noise makes it accept more often (moves that look good by chance get through),
and for ``Delta > 0`` it rejects moves the exact test always accepts. The chain therefore does not
satisfy detailed balance for the posterior and its stationary distribution is wrong (typically
too wide), the more so the larger the noise ``Var(delta_star) ~ N^2 Var(l) / m``. MHminibatch,
AustereMH and MHSubLhd exist to remove exactly this error.

Recorded outcome: ``batch_size = m``; ``delta_star`` as above; ``s2 = N^2 s_l^2 / m (1 - m/N)``
(the without-replacement variance estimate of ``delta_star``, not used by the test);
``epsilon``, ``pvalue_threshold`` and ``half_width`` 0 (the test has no error parameter; its error is
uncontrolled); ``hidden_data = 0``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, check_batch_fits, data_free_delta, untempered
from minibatch_mcmc.acceptance.streaming import (
    add_rows,
    decision_dtype,
    first_chunk,
    init_sums,
    mean_and_variance,
    order_and_uniform,
    read_terms,
)
from minibatch_mcmc.checks import check_int


class NaiveMinibatch(NamedTuple):
    """A fixed minibatch of ``m`` points without replacement and an uncorrected Metropolis test (biased)."""

    batch_size: int
    """Minibatch size ``m``."""
    name: str = "naive_minibatch"
    decision_rule = "metropolis"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against ``N``."""
        check_batch_fits(self.batch_size, n_data)

    temperature_factor = staticmethod(untempered)

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The ``m`` rows of the minibatch (the only ones read)."""
        return first_chunk(key, order_and_uniform(key, jnp.float32)[0], self.batch_size, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept iff ``log u < N * mean(l_i over the minibatch) + psi`` (biased)."""
        n, m = stats.n_data, self.batch_size
        dtype = decision_dtype(stats)
        round_keys, u = order_and_uniform(key, dtype)
        idx = first_chunk(key, round_keys, m, n)  # m <= N: all valid
        sums = add_rows(init_sums(dtype), read_terms(stats, idx, dtype) / stats.temperature, jnp.ones((m,), bool))
        mean, var_l = mean_and_variance(sums)
        bad = sums.bad | jnp.isnan(stats.psi)
        nf = jnp.asarray(n, dtype)
        delta_star = nf * mean + data_free_delta(stats)
        var = nf * nf * var_l / m * (1.0 - m / n)
        prior_ok = stats.psi > -jnp.inf
        return TestOutcome(
            accepted=(jnp.log(u) < delta_star) & prior_ok & ~bad,
            batch_size=jnp.asarray(m, jnp.int32),
            s2=var,
            epsilon=jnp.zeros((), dtype),
            delta_star=jnp.where(prior_ok, delta_star, -jnp.inf),
            nonfinite=bad,
            hidden_data=jnp.zeros((), jnp.int32),
            residual_sd=jnp.sqrt(var_l) * stats.temperature,
            pvalue_threshold=jnp.zeros((), dtype),
            half_width=jnp.zeros((), dtype),
        )


def naive_minibatch(batch_size: int = 100) -> NaiveMinibatch:
    """The biased plug-in minibatch Metropolis test (for comparison only).

    Args:
        batch_size: ``m``, the minibatch read every step (at least 2).
    """
    return NaiveMinibatch(check_int(batch_size, "batch_size m", low=2))
