"""Scalable Metropolis-Hastings (Cornish, Vanetti, Bouchard-Cote, Deligiannidis and Doucet, ICML 2019): an exact test.

With a control variate, the log-likelihood difference splits into the proxy's exact sum and per-datum
residuals ``r_i`` (``Statistics.log_ratio``). The factorised acceptance probability

    alpha(theta, theta') = min(1, e^a) prod_i min(1, e^(r_i / K)),    a = psi + known_sum / K,

makes the chain reversible for the tempered posterior: each factor ``min(1, e^x)`` changes to
``min(1, e^-x)`` when the move is reversed, so ``alpha(theta, theta') / alpha(theta', theta)`` is the
target-and-proposal ratio. The product is simulated without reading all ``N`` rows by Poisson thinning:
with a bound ``|r_i| <= b_i`` (``Statistics.bounds``), draw ``B ~ Poisson(sum_i b_i / K)`` rows with
probability ``b_i / sum_i b_i`` (the bounds' ``draw``) and reject if any of them fires an event, each with
probability ``max(0, -r_i) / b_i``; then ``P(no event) = exp(-sum_i max(0, -r_i) / K) = prod_i min(1, e^(r_i / K))``.
Without a ``draw``, rows are uniform and every ``b_i`` is replaced by ``b_max`` (exact too, ``N b_max / sum b_i``
times more rows).
``B`` is random and unbounded: rows are read in chunks inside a ``lax.while_loop`` until ``B`` are read or
an event fires, so no cap truncates it. The first factor is decided first; a rejection there reads nothing.

Far from the proxy's centre the expected count grows; above ``max_expected`` the step is
the exact full-data Metropolis test instead. The rule depends on ``(theta, theta')`` only through the
bound, which is symmetric, so both kinds of step keep detailed balance.

Recorded outcome: ``batch_size`` = rows evaluated (``N`` on a full-data step); ``delta_star`` = ``a`` on a
thinned step (the proxy's value of ``Delta``), the exact ``Delta`` on a full-data step; ``expected_batch_size`` =
the Poisson mean; ``fallback`` marks full-data steps; ``bound_exceeded`` marks a step where an evaluated
``|r_i|`` exceeded its bound (the driver warns: the bounds, hence the test, are wrong there).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import (
    Statistics,
    TestOutcome,
    data_free_delta,
    no_checks,
    no_rows_first,
    untempered,
)
from minibatch_mcmc.acceptance.streaming import decision_dtype
from minibatch_mcmc.acceptance.thinning import (
    Draw,
    bound_outcome,
    bound_rate,
    loop_settings,
    poisson_count,
    require_bounds,
    rows_ahead,
    thinned_pass,
)


class ScalableMH(NamedTuple):
    """Scalable MH: the factorised Metropolis test simulated by Poisson thinning, full data beyond ``max_expected`` rows."""

    chunk_size: int
    """Rows read per loop iteration (a vectorisation width, not a cap)."""
    max_expected: float | None
    """Expected rows (``sum_i b_i / K``, or ``N b_max / K`` without a ``draw``) above which the step falls back to the
    exact full-data test; None: ``N`` (beyond it the full data costs less, and the Poisson count stays in int32)."""
    name: str = "smh"
    decision_rule = "factorised"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept with probability ``min(1, e^a) prod_i min(1, e^(r_i / K))`` (or ``min(1, e^Delta)`` on a full-data step)."""
        require_bounds(stats, "ScalableMH")
        dtype = decision_dtype(stats)
        k_count, k_u, k_rows = smh_keys(key)
        a = data_free_delta(stats).astype(dtype)
        log_u = jnp.log(jax.random.uniform(k_u, (), dtype, minval=jnp.finfo(dtype).tiny))
        rate, b_max = bound_rate(stats, dtype)
        full, limit = poisson_count(k_count, rate, self.max_expected, stats.n_data)
        go = full | (log_u < a)  # the first factor rejects without reading data

        def event(r, b, u, valid):
            return jnp.zeros((), dtype), jnp.any(valid & (u * b < jnp.maximum(-r, 0.0)))

        pas = thinned_pass(k_rows, stats, limit, full, go, b_max, self.chunk_size, dtype, event)
        bad = pas.bad | jnp.isnan(stats.psi)
        prior_ok = stats.psi > -jnp.inf
        delta_full = a + pas.total
        accepted = jnp.where(full, log_u < delta_full, (log_u < a) & ~pas.stopped) & prior_ok & ~bad
        delta_star = jnp.where(prior_ok, jnp.where(full, delta_full, a), -jnp.inf)
        return bound_outcome(accepted, pas, delta_star, bad, rate, full)


def smh_keys(key: jax.Array) -> jax.Array:
    """A step's keys: its Poisson count's, its uniform's and its thinned pass's rows'."""
    return jax.random.split(key, 3)


def smh_rows_ahead(test: ScalableMH, key: jax.Array, n_data: int, draw: Draw | None) -> jax.Array:
    """The rows the step with ``key`` reads first (``thinning.rows_ahead``): its contract's ``rows_ahead``."""
    return rows_ahead(smh_keys(key)[2], n_data, draw, test.chunk_size)


def scalable_mh(chunk_size: int = 8, max_expected: float | None = None) -> ScalableMH:
    """Scalable MH (Cornish et al.): exact minibatch MH, a Poisson number of rows per step from per-datum bounds.

    Args:
        chunk_size: Rows read per loop step.
        max_expected: Above this many expected rows a step falls back to the full data (default, and at most, ``N``).
    """
    chunk_size, limit = loop_settings(chunk_size, max_expected)
    return ScalableMH(chunk_size=chunk_size, max_expected=limit)
