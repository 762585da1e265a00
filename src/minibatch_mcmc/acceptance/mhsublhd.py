"""MHSubLhd (Bardenet, Doucet and Holmes 2014): adaptive subsampling with an empirical-Bernstein bound.

As in AustereMH the Metropolis test is ``mu > mu_0`` with ``l_i = log p(x_i|theta')/K - log p(x_i|theta)/K``,
``mu = mean_i l_i`` and ``mu_0 = (log u - psi) / N``. The minibatch grows geometrically (factor
``gamma``); at the ``k``-th look, with ``t`` points, the empirical Bernstein inequality gives, with
probability at least ``1 - delta_k``,

    |l_bar_t - mu| <= c_t = sigma_t sqrt(2 log(3/delta_k) / t) + 6 C log(3/delta_k) / t,

where ``sigma_t`` is the sample s.d. and ``C = C_{theta,theta'} = max_i |l_i|`` (Seita et al.
Equation 16; ``2C`` bounds the range of the ``l_i``). The test stops as soon as
``|l_bar_t - mu_0| > c_t`` and answers ``l_bar_t > mu_0``; with ``delta_k = (p - 1) delta / (p k^p)``
(``sum_k delta_k <= delta``) the decision differs from the exact one with probability at most ``delta``.
``C`` needs every ``l_i`` unless a model-specific ``range_bound`` is given, so by default each test
also evaluates all ``N`` points: counted as hidden data.

Stage sizes are ``b_1 = m`` and ``b_{k+1} = min(N, ceil(gamma b_k))`` rounded up to a multiple of ``m``
(the minibatch grows in chunks of ``m`` inside ``lax.while_loop``).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, full_data_max_abs, check_batch_fits, uniform_from_bits
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import chunk_indices


class _State(NamedTuple):
    """Streaming sums and the look counter."""

    chunk: jax.Array
    count: jax.Array
    next_stage: jax.Array
    look: jax.Array
    shift: jax.Array
    s1: jax.Array
    s2: jax.Array
    bound: jax.Array
    bad: jax.Array
    done: jax.Array


class MHSubLhd(NamedTuple):
    """The MHSubLhd test: initial size ``m``, growth ``gamma``, error budget ``delta`` spent as ``(p-1) delta/(p k^p)``."""

    batch_size: int
    gamma: float
    p: float
    delta: float
    range_bound: Callable[[Statistics], jax.Array] | None = None
    """Optional analytic bound on ``max_i |l_i|`` (then no hidden full-data pass)."""
    name: str = "mhsublhd"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against ``N``."""
        check_batch_fits(self.batch_size, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Grow the minibatch geometrically until the empirical-Bernstein interval excludes ``mu_0``."""
        n, m = stats.n_data, self.batch_size
        bits = jax.random.bits(key, (5,), dtype=jnp.uint32)
        dtype = jnp.result_type(stats.psi, jnp.float32)
        u = uniform_from_bits(bits[4], dtype)
        mu0 = (jnp.log(u) - stats.psi) / n
        temp = stats.temperature

        def per_datum(rows):
            return stats.log_ratio(rows).astype(dtype) / temp

        if self.range_bound is None:
            c_range, bad_full = full_data_max_abs(per_datum, stats.data, n)
            hidden = jnp.asarray(n, jnp.int32)
        else:
            c_range = jnp.asarray(self.range_bound(stats), dtype) / temp
            bad_full = ~jnp.isfinite(c_range)
            hidden = jnp.zeros((), jnp.int32)
        gamma, p, delta = self.gamma, self.p, self.delta

        def add_chunk(st: _State) -> _State:
            idx, valid = chunk_indices(key, st.chunk, m, n, bits[:4])
            lam = per_datum(take(stats.data, idx))
            bad = jnp.any(valid & ~jnp.isfinite(lam))
            lam = jnp.where(valid, lam, 0.0)
            w = valid.astype(dtype)
            cnt = jnp.sum(w)
            shift = jnp.where(st.count == 0, jnp.sum(lam) / jnp.maximum(cnt, 1.0), st.shift)
            z = (lam - shift) * w
            count = st.count + cnt.astype(jnp.int32)
            s1, s2 = st.s1 + jnp.sum(z), st.s2 + jnp.sum(z * z)
            look_now = (count >= st.next_stage) | (count >= n)
            look = st.look + look_now.astype(jnp.int32)
            tf = count.astype(dtype)
            mean = shift + s1 / tf
            sd = jnp.sqrt(jnp.maximum(s2 - s1 * s1 / tf, 0.0) / jnp.maximum(tf - 1.0, 1.0))
            delta_k = (p - 1.0) * delta / (p * jnp.maximum(look, 1).astype(dtype) ** p)
            log_term = jnp.log(3.0 / delta_k)
            c_t = sd * jnp.sqrt(2.0 * log_term / tf) + 6.0 * c_range * log_term / tf
            stop = look_now & (jnp.abs(mean - mu0) > c_t)
            grown = jnp.ceil(gamma * count.astype(jnp.float32) / m).astype(jnp.int32) * m
            next_stage = jnp.where(look_now, jnp.minimum(jnp.maximum(grown, count + m), n), st.next_stage)
            done = stop | (count >= n) | bad | st.bad
            bound = jnp.where(look_now, c_t, st.bound)
            return _State(st.chunk + 1, count, next_stage, look, shift, s1, s2, bound, st.bad | bad, done)

        zero = jnp.zeros((), dtype)
        i0 = jnp.zeros((), jnp.int32)
        st0 = _State(i0, i0, jnp.asarray(m, jnp.int32), i0, zero, zero, zero, zero, bad_full, jnp.zeros((), bool))
        st = jax.lax.while_loop(lambda s: ~s.done, add_chunk, add_chunk(st0))
        tf = st.count.astype(dtype)
        mean = st.shift + st.s1 / tf
        prior_ok = stats.psi > -jnp.inf
        bad = st.bad | jnp.isnan(stats.psi)
        return TestOutcome(
            accepted=(mean > mu0) & prior_ok & ~bad,
            batch_size=st.count,
            s2=jnp.zeros((), dtype),
            epsilon=jnp.where(st.count >= n, 0.0, float(n) * st.bound),
            delta_star=jnp.where(prior_ok, float(n) * mean + stats.psi, -jnp.inf),
            nonfinite=bad,
            hidden_data=hidden,
        )


def mh_sublhd(
    batch_size: int = 50,
    gamma: float = 1.5,
    p: float = 2.0,
    delta: float = 0.01,
    range_bound: Callable[[Statistics], jax.Array] | None = None,
) -> MHSubLhd:
    """Build MHSubLhd (paper settings for Section 6.1: m=50, gamma=1.5, p=2, delta=0.01)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size m={batch_size!r} must be an integer >= 2")
    if not (isinstance(gamma, (int, float)) and math.isfinite(gamma) and gamma > 1.0):
        raise ValueError(f"gamma={gamma!r} must be a number > 1 (the geometric growth factor)")
    if not (isinstance(p, (int, float)) and math.isfinite(p) and p > 1.0):
        raise ValueError(f"p={p!r} must be a number > 1 (so that the deltas sum to at most delta)")
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0.0 < delta < 1.0):
        raise ValueError(f"delta={delta!r} must be a number in (0, 1)")
    return MHSubLhd(int(batch_size), float(gamma), float(p), float(delta), range_bound)
