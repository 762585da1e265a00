"""MH with scalable subsampling (Prado, Nemeth and Sherlock 2024) and TunaMH (Zhang, Cooper and De Sa 2020): exact tests.

Both are Metropolis-Hastings on a space extended, for one step, by a Poisson count ``s_i`` per datum. With the
tempered residual ``r_i`` (``Statistics.log_ratio / K``, after the control variate when there is one) and its bound
``|r_i| <= b_i`` (``Statistics.bounds / K``, ``b_i = c_i M(theta, theta')`` in the papers), the forward move draws
``s_i ~ Poisson(e_i + phi_i)`` with

    phi_i = gamma max(0, -r_i) + (1 - gamma) (b_i - max(0, r_i)),      e_i = chi B b_i,   B = sum_j b_j,

so that ``phi_i(theta, theta') - phi_i(theta', theta) = -r_i`` and ``0 <= phi_i <= b_i``. The Poisson
probabilities' ratio then cancels the residuals' likelihood ratio, and the extended-space ratio is

    e^a prod_i ((e_i + phi_i + r_i) / (e_i + phi_i))^(s_i),      a = psi + known_sum / K,

(``phi_i + r_i`` is the reverse move's ``phi_i``). The counts are simulated without reading all ``N`` rows:
``B' ~ Poisson(B + chi B^2)`` rows drawn with probability ``b_i / B`` (the bounds' ``draw``; uniformly at ``b_max``
without one), each kept with probability ``(e_i + phi_i) / (e_i + b_i)``; only kept rows enter the product.

- MH-SS: ``gamma = 0`` and ``chi = 0`` by default, and the acceptance is split as the authors' code does,
  ``min(1, e^a) min(1, prod ...)``: a move the proxy already rejects reads no data. Its order is the control
  variate's (the estimator's Taylor order).
- TunaMH: ``gamma = 1/2`` and ``chi > 0``, one Metropolis ratio ``min(1, e^a prod ...)``.

Above ``max_expected`` expected rows the step is the exact full-data Metropolis test (a rule symmetric in
``(theta, theta')``, since the bounds are). Records as Scalable MH: ``batch_size`` rows evaluated,
``expected_batch_size`` the Poisson mean, ``fallback``, ``bound_exceeded``; ``delta_star`` is the extended-space
log ratio ``a + sum_i s_i log(...)`` of the rows read on a thinned step (``a`` when stage one rejects), the exact
``Delta`` on a full-data step.
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
from minibatch_mcmc.checks import check_positive, check_real


class MHSS(NamedTuple):
    """Exact MH on the Poisson-extended space (MH-SS, TunaMH), full data beyond ``max_expected`` expected rows."""

    gamma: float
    """Where ``phi_i`` sits between ``b_i - max(0, r_i)`` (0, MH-SS) and ``max(0, -r_i)`` (1); TunaMH: 1/2."""
    chi: float
    """TunaMH's ``chi``: ``chi B^2`` extra expected rows whose ratios are all near 1 (0: none, MH-SS)."""
    two_stage: bool
    """Decide ``min(1, e^a)`` first, without data, then ``min(1, prod ...)`` (MH-SS); else one ratio (TunaMH)."""
    chunk_size: int
    """Rows read per loop iteration (a vectorisation width, not a cap)."""
    max_expected: float | None
    """Poisson mean above which the step is the exact full-data test; None: ``N``."""
    name: str = "mhss"
    decision_rule = "metropolis"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept with the extended-space MH probability (``min(1, e^Delta)`` on a full-data step)."""
        require_bounds(stats, "MH-SS and TunaMH")
        dtype = decision_dtype(stats)
        k_count, k_u, k_rows, k_u2 = mhss_keys(key)
        tiny = jnp.finfo(dtype).tiny
        a = data_free_delta(stats).astype(dtype)
        log_u = jnp.log(jax.random.uniform(k_u, (), dtype, minval=tiny))
        rate, b_max = bound_rate(stats, dtype)
        mean = rate + self.chi * rate * rate
        full, limit = poisson_count(k_count, mean, self.max_expected, stats.n_data)
        go = full | (log_u < a) if self.two_stage else jnp.ones((), bool)
        extra = self.chi * jnp.where(full, 0.0, rate)

        def keep(r, b, u, valid):
            e = extra * b
            phi = self.gamma * jnp.maximum(-r, 0.0) + (1.0 - self.gamma) * (b - jnp.maximum(r, 0.0))
            phi = jnp.clip(phi, 0.0, b)  # outside [0, b] only when a bound is wrong (flagged)
            kept = valid & (u * (e + b) < e + phi)
            step = jnp.log1p(jnp.maximum(r / jnp.where(kept, e + phi, 1.0), -1.0))  # log((e + phi + r) / (e + phi))
            score = jnp.sum(jnp.where(kept, step, 0.0))
            return score, score == -jnp.inf  # a zero reverse probability: certain rejection

        pas = thinned_pass(k_rows, stats, limit, full, go, b_max, self.chunk_size, dtype, keep)
        bad = pas.bad | jnp.isnan(stats.psi)
        prior_ok = stats.psi > -jnp.inf
        delta_full = a + pas.total
        if self.two_stage:
            log_u2 = jnp.log(jax.random.uniform(k_u2, (), dtype, minval=tiny))
            thinned = (log_u < a) & (log_u2 < pas.score)
        else:
            thinned = log_u < a + pas.score
        accepted = jnp.where(full, log_u < delta_full, thinned) & prior_ok & ~bad
        delta_star = jnp.where(prior_ok, jnp.where(full, delta_full, a + pas.score), -jnp.inf)
        return bound_outcome(accepted, pas, delta_star, bad, mean, full)


def mhss_keys(key: jax.Array) -> jax.Array:
    """A step's keys: its Poisson count's, its first uniform's, its thinned pass's rows' and its second uniform's."""
    return jax.random.split(key, 4)


def mhss_rows_ahead(test: MHSS, key: jax.Array, n_data: int, draw: Draw | None) -> jax.Array:
    """The rows the step with ``key`` reads first (``thinning.rows_ahead``): its contract's ``rows_ahead``."""
    return rows_ahead(mhss_keys(key)[2], n_data, draw, test.chunk_size)


def mhss(chi: float = 0.0, chunk_size: int = 8, max_expected: float | None = None) -> MHSS:
    """MH-SS (Prado, Nemeth and Sherlock): exact minibatch MH from per-datum bounds, its order the estimator's Taylor order.

    Args:
        chi: Extra-row tuning (0 in the paper; TunaMH's ``chi > 0`` adds ``chi B^2`` expected rows).
        chunk_size: Rows read per loop step.
        max_expected: Above this many expected rows a step falls back to the full data (default, and at most, ``N``).
    """
    chi = check_real(chi, "chi", low=0.0, why="; MH-SS uses chi = 0, TunaMH's chi > 0 adds chi B^2 expected rows")
    chunk_size, limit = loop_settings(chunk_size, max_expected)
    return MHSS(gamma=0.0, chi=chi, two_stage=True, chunk_size=chunk_size, max_expected=limit, name="mhss")


def tunamh(chi: float = 1.0, chunk_size: int = 8, max_expected: float | None = None) -> TunaMH:
    """TunaMH (Zhang, Cooper and De Sa): exact minibatch MH, expected rows ``B + chi B^2``; otherwise as :func:`mhss`.

    Args:
        chi: The tuning parameter (> 0): larger reads more rows, with acceptance nearer full-data MH's.
        chunk_size: Rows read per loop step.
        max_expected: Above this many expected rows a step falls back to the full data (default, and at most, ``N``).
    """
    chi = check_positive(
        chi, "chi", why="; TunaMH's guarantee needs chi > 0 (larger: more rows, acceptance nearer MH's)"
    )
    chunk_size, limit = loop_settings(chunk_size, max_expected)
    return MHSS(gamma=0.5, chi=chi, two_stage=False, chunk_size=chunk_size, max_expected=limit, name="tunamh")


TunaMH = MHSS
"""TunaMH is :class:`MHSS` with ``gamma = 1/2``, ``chi > 0`` and one stage."""
