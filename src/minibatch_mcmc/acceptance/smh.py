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

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, data_free_delta, no_checks, no_rows_first, untempered
from minibatch_mcmc.acceptance.streaming import decision_dtype
from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.data.arrays import take


BOUND_SLACK = 1e-4
"""Relative slack before an evaluated ``|r_i|`` counts as above its bound (float32 rounding of both sides)."""


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
        if stats.bounds is None:
            raise ValueError(
                "ScalableMH needs per-datum bounds on the residuals: pass an estimator whose residual_bounds supplies "
                "|r_i| <= b_i (for a GLM: estimator=control_variates.glm_proxy(data, centre, family=...); "
                "auto_sample(test='smh') builds it for the shipped GLMs); the plain estimator and a general Taylor "
                "proxy have none"
            )
        n, c = stats.n_data, self.chunk_size
        dtype = decision_dtype(stats)
        temp = stats.temperature
        k_count, k_u, k_rows = jax.random.split(key, 3)
        a = data_free_delta(stats).astype(dtype)
        log_u = jnp.log(jax.random.uniform(k_u, (), dtype, minval=jnp.finfo(dtype).tiny))
        bounds = stats.bounds
        b_max = jnp.asarray(bounds.largest, dtype) / temp
        rate = n * b_max if bounds.draw is None else jnp.asarray(bounds.total, dtype) / temp
        most = float(n) if self.max_expected is None else min(float(self.max_expected), float(n))
        full = ~(rate <= most)  # symmetric in (theta, theta'); a NaN rate falls back too
        count = jax.random.poisson(k_count, jnp.where(full, 0.0, rate)).astype(jnp.int32)
        limit = jnp.where(full, n, count)
        go = full | (log_u < a)  # the first factor rejects without reading data
        offsets = jnp.arange(c, dtype=jnp.int32)

        def more(carry):
            read, fired = carry[:2]
            return go & (read < limit) & ~fired

        def chunk(carry):
            read, fired, total, bad, over = carry
            pos = read + offsets
            valid = pos < limit
            k = jax.random.fold_in(k_rows, read)
            k_pick, k_event = jax.random.split(k)
            if bounds.draw is None:
                picked = jax.random.randint(k_pick, (c,), 0, n, jnp.int32)  # exactly uniform, unlike floor(u * N)
            else:
                picked = bounds.draw(k_pick, c)
            idx = jnp.where(full, jnp.minimum(pos, n - 1), picked)
            rows = take(stats.data, idx)
            r = stats.log_ratio(rows).astype(dtype) / temp
            b = b_max if bounds.draw is None else bounds.per_datum(rows).astype(dtype) / temp
            bad = bad | jnp.any(valid & ~jnp.isfinite(r))
            over = over | (~full & jnp.any(valid & (jnp.abs(r) > b * (1.0 + BOUND_SLACK))))
            u_event = jax.random.uniform(k_event, (c,), dtype)
            event = valid & (u_event * b < jnp.maximum(-r, 0.0))
            total = total + jnp.sum(jnp.where(valid, r, 0.0))
            return read + jnp.sum(valid.astype(jnp.int32)), fired | (~full & jnp.any(event)), total, bad, over

        zero = jnp.zeros((), dtype)
        no = jnp.zeros((), bool)
        read, fired, total, bad, over = jax.lax.while_loop(more, chunk, (jnp.zeros((), jnp.int32), no, zero, no, no))
        bad = bad | jnp.isnan(stats.psi)
        prior_ok = stats.psi > -jnp.inf
        delta_full = a + total
        accepted = jnp.where(full, log_u < delta_full, (log_u < a) & ~fired) & prior_ok & ~bad
        return TestOutcome(
            accepted=accepted,
            batch_size=read,
            s2=zero,
            epsilon=zero,
            delta_star=jnp.where(prior_ok, jnp.where(full, delta_full, a), -jnp.inf),
            nonfinite=bad,
            hidden_data=jnp.zeros((), jnp.int32),
            residual_sd=zero,
            pvalue_threshold=zero,
            half_width=zero,
            expected_batch_size=jnp.where(full, 0.0, rate).astype(dtype),
            fallback=full,
            bound_exceeded=over,
        )


def scalable_mh(chunk_size: int = 8, max_expected: float | None = None) -> ScalableMH:
    """Scalable MH reading ``chunk_size`` rows per loop step, falling back to full data above ``max_expected`` expected
    rows (default, and at most, ``N``)."""
    chunk_size = check_int(chunk_size, "chunk_size", low=1)
    limit = None if max_expected is None else check_positive(max_expected, "max_expected")
    return ScalableMH(chunk_size=chunk_size, max_expected=limit)
