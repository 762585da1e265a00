"""MHSubLhd (Bardenet, Doucet and Holmes, ICML 2014): adaptive subsampling with an empirical-Bernstein bound.

The test
--------
With per-datum ratios ``l_i = (log p(x_i|theta') - log p(x_i|theta)) / K``, their full-data mean
``mu = mean_i l_i`` and the threshold ``mu_0 = (log u - psi) / N`` (``psi`` the data-independent log
ratio, ``u ~ U(0, 1)``), the exact Metropolis test accepts iff ``mu > mu_0``, i.e.
``log u < N mu + psi``. MHSubLhd draws ``u`` first and estimates ``mu`` by the mean ``l_bar_t`` of a
minibatch of ``t`` points drawn without replacement, grown geometrically:

    b_1 = m,    b_{k+1} = min(N, ceil(gamma * b_k)),

looking at the data only at those stage sizes. At the ``k``-th look (``t = b_k`` points) the
empirical Bernstein inequality (Audibert, Munos and Szepesvari 2009) gives, with probability at
least ``1 - delta_k``,

    |l_bar_t - mu| <= c_t = sigma_t sqrt(2 log(3/delta_k) / t) + 6 C log(3/delta_k) / t,

where ``sigma_t`` is the sample standard deviation of the ``l_i`` seen so far (the ``t - 1``
denominator: slightly larger than the ``1/t`` version of the inequality, so still valid) and
``C = C_{theta,theta'} = max_i |l_i|`` (Seita et al. Equation 16; the range of the ``l_i`` is at most
``2C``, hence ``3 * 2C = 6C``). The test stops at the first look where ``|l_bar_t - mu_0| > c_t``, or
when ``t = N`` (then ``l_bar_t = mu`` and the decision is the exact one), and accepts iff
``l_bar_t > mu_0``.

Error budget: ``delta_k = (p - 1) delta / (p k^p)`` with ``k = 1, 2, ...`` the look index (not the
number of points), so ``sum_k delta_k <= (p - 1) delta / p * (1 + 1/(p - 1)) = delta``. By a union
bound over the looks, for every ``u`` the decision differs from the exact Metropolis decision with
probability at most ``delta``; hence ``|P(accept) - min(1, e^Delta)| <= delta``.

Finite-population option
------------------------
``finite_population=True`` replaces ``c_t`` with the empirical Bernstein-Serfling bound of Bardenet
and Maillard (Bernoulli 2015, Theorem 3; one-sided with probability ``1 - 5 delta'``, made two-sided
here by a union bound, hence ``log(10/delta_k)``):

    c_t = sigma_t sqrt(2 rho_t log(10/delta_k) / t) + kappa 2C log(10/delta_k) / t,
    rho_t = 1 - (t - 1)/N  (t <= N/2),   (1 - t/N)(1 + 1/t)  (t > N/2),   kappa = 7/3 + 3/sqrt(2),

which accounts for sampling without replacement: it is smaller than the default only for
minibatches that are a sizeable fraction of ``N``. The default (``False``) is the bound used by
Bardenet et al. (2014) and by Seita et al. (2017, Section 6.1).

The range ``C``
---------------
``C`` needs every ``l_i``: by default each decision also evaluates all ``N`` points in a chunked
full-data pass (recorded as ``hidden_data = N``). A model-specific ``range_bound(stats)`` may be
given instead: it must return an upper bound on ``max_i |log p(x_i|theta') - log p(x_i|theta)|``
(un-tempered; it is divided by ``K`` here), and then ``hidden_data = 0``.

Implementation
--------------
In the shared growth loop (``streaming.grow``) the minibatch grows in chunks of at most ``m`` consecutive positions of a
keyed random permutation of ``[0, N)`` (so points are distinct), masked so that a chunk never crosses
the next stage size: the count lands exactly on ``b_1, b_2, ...`` and every datum is counted once.

Recorded outcome: ``batch_size`` = ``t`` at the decision; ``delta_star = N l_bar_t + psi``;
``s2 = N^2 sigma_t^2 / t (1 - t/N)`` (the without-replacement variance estimate of ``delta_star``,
0 at ``t = N``); ``half_width = N c_t`` at the deciding look, the half-width of the confidence
interval for ``Delta`` that excluded ``log u`` (0 when the decision was made on all ``N`` points);
``hidden_data`` as above.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import (
    Statistics,
    TestOutcome,
    check_batch_fits,
    data_free_delta,
    population_fraction_left,
    untempered,
)
from minibatch_mcmc.acceptance.streaming import (
    StreamingSums,
    decision_dtype,
    first_chunk,
    grow,
    init_sums,
    mean_and_variance,
    order_and_uniform,
)
from minibatch_mcmc.checks import check_bool, check_int, check_real
from minibatch_mcmc.data.passes import full_data_max_abs

KAPPA = 7.0 / 3.0 + 3.0 / math.sqrt(2.0)
"""Range coefficient of the empirical Bernstein-Serfling bound (Bardenet and Maillard 2015)."""


class _Stage(NamedTuple):
    """The stage bookkeeping beside the streaming sums."""

    stage_end: jax.Array
    """Count at which the next look happens."""
    look: jax.Array
    """Looks made so far."""
    bound: jax.Array
    """Half-width ``c_t`` at the last look."""


def stage_sizes(batch_size: int, gamma: float, n_data: int) -> list[int]:
    """The look schedule ``b_1 = m``, ``b_{k+1} = min(N, ceil(gamma b_k))`` up to and including ``N``."""
    sizes = [min(batch_size, n_data)]
    while sizes[-1] < n_data:
        sizes.append(min(n_data, max(math.ceil(gamma * sizes[-1]), sizes[-1] + 1)))
    return sizes


def threshold_uniform(key: jax.Array, dtype=jnp.float32) -> jax.Array:
    """The ``u`` that ``MHSubLhd.decide(key, ...)`` compares with: the exact test with the same ``u``
    accepts iff ``log u < Delta`` (lets a test count the decisions that differ from the exact ones)."""
    return order_and_uniform(key, dtype)[1]


class MHSubLhd(NamedTuple):
    """The MHSubLhd test: initial size ``m``, growth ``gamma``, error budget ``delta`` spent as ``(p-1) delta/(p k^p)``."""

    batch_size: int
    """First stage size ``m``, also the chunk size of the growth loop."""
    gamma: float
    """Geometric growth factor of the stage sizes (> 1)."""
    p: float
    """Exponent of the error schedule ``delta_k`` (> 1)."""
    delta: float
    """Bound on the probability that the decision differs from the exact Metropolis decision."""
    range_bound: Callable[[Statistics], jax.Array] | None = None
    """Optional analytic bound on ``max_i |log p(x_i|theta') - log p(x_i|theta)|`` (then no hidden full-data pass)."""
    finite_population: bool = False
    """Use the empirical Bernstein-Serfling bound (sampling without replacement) instead of empirical Bernstein."""
    name: str = "mhsublhd"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against ``N``."""
        check_batch_fits(self.batch_size, n_data)

    temperature_factor = staticmethod(untempered)
    decision_rule = "metropolis"

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The first stage's ``m`` rows (read after the full-data range pass, if any)."""
        return first_chunk(key, order_and_uniform(key, jnp.float32)[0], self.batch_size, n_data)

    def half_width(self, count: jax.Array, sd: jax.Array, look: jax.Array, c_range: jax.Array, n: int) -> jax.Array:
        """The concentration half-width ``c_t`` at a look with ``t = count`` points and sample s.d. ``sd``."""
        dtype = sd.dtype
        t = count.astype(dtype)
        p, delta = self.p, self.delta
        delta_k = (p - 1.0) * delta / (p * look.astype(dtype) ** p)
        if self.finite_population:
            log_term = jnp.log(10.0 / delta_k)
            left = population_fraction_left(count, n, dtype)  # 1 - t/N, exactly 0 at t = N
            rho = jnp.where(t <= 0.5 * n, left + 1.0 / n, left * (1.0 + 1.0 / t))
            return sd * jnp.sqrt(2.0 * jnp.maximum(rho, 0.0) * log_term / t) + KAPPA * 2.0 * c_range * log_term / t
        log_term = jnp.log(3.0 / delta_k)
        return sd * jnp.sqrt(2.0 * log_term / t) + 6.0 * c_range * log_term / t

    def range_constant(self, stats: Statistics, per_datum, dtype) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``C = max_i |l_i|`` (a full-data pass, or the model's bound), a non-finite flag and the hidden data."""
        n = stats.n_data
        if self.range_bound is None:
            c_range, bad_range = full_data_max_abs(per_datum, stats.data, n)
            return c_range, bad_range, jnp.asarray(n, jnp.int32)
        c_range = jnp.asarray(self.range_bound(stats), dtype) / stats.temperature
        return c_range, ~jnp.isfinite(c_range), jnp.zeros((), jnp.int32)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Grow the minibatch geometrically until the concentration interval for ``mu`` excludes ``mu_0``."""
        n, m = stats.n_data, self.batch_size
        dtype = decision_dtype(stats)
        round_keys, u = order_and_uniform(key, dtype)
        mu0 = (jnp.log(u) - data_free_delta(stats)) / n
        temp = stats.temperature

        def per_datum(rows):
            return stats.log_ratio(rows).astype(dtype) / temp

        c_range, bad_range, hidden = self.range_constant(stats, per_datum, dtype)
        gamma = self.gamma
        prior_ok = stats.psi > -jnp.inf

        def look(sums: StreamingSums, stage: _Stage) -> tuple[_Stage, jax.Array]:
            count = sums.count
            # a look happens exactly when the count reaches the current stage size
            look_now = count >= stage.stage_end
            looks = stage.look + look_now.astype(jnp.int32)
            mean, var = mean_and_variance(sums)
            c_t = self.half_width(count, jnp.sqrt(var), jnp.maximum(looks, 1), c_range, n)
            stop = look_now & (jnp.abs(mean - mu0) > c_t)
            t = count.astype(dtype)
            grown = jnp.minimum(jnp.ceil(gamma * t), float(n)).astype(jnp.int32)  # no int32 overflow near N = 2^31
            next_end = jnp.minimum(jnp.maximum(grown, count + 1), n)
            done = stop | (count >= n) | sums.bad
            return _Stage(
                stage_end=jnp.where(look_now, next_end, stage.stage_end),
                look=looks,
                bound=jnp.where(look_now, c_t, stage.bound),
            ), done

        i0 = jnp.zeros((), jnp.int32)
        sums0 = init_sums(dtype)._replace(bad=bad_range | jnp.isnan(stats.psi))
        stage0 = _Stage(jnp.asarray(min(m, n), jnp.int32), i0, jnp.zeros((), dtype))
        # a NaN psi stops after the first chunk; a zero prior (psi = -inf, mu_0 = +inf) stops at the first look and rejects
        sums, stage = grow(
            key, round_keys, stats, m, lambda raw: raw / temp, look, stage0, sums0, end=lambda s: s.stage_end
        )
        t = sums.count.astype(dtype)
        mean, var_l = mean_and_variance(sums)
        exhausted = sums.count >= n
        bad = sums.bad
        nf = jnp.asarray(n, dtype)
        return TestOutcome(
            accepted=(mean > mu0) & prior_ok & ~bad,
            batch_size=sums.count,
            s2=nf * nf * (var_l / t * population_fraction_left(sums.count, n, dtype)),
            epsilon=jnp.zeros((), dtype),
            delta_star=jnp.where(prior_ok, nf * mean + data_free_delta(stats), -jnp.inf),
            nonfinite=bad,
            hidden_data=hidden,
            residual_sd=jnp.sqrt(var_l) * stats.temperature,
            pvalue_threshold=jnp.zeros((), dtype),
            half_width=jnp.where(exhausted, 0.0, nf * stage.bound),
        )


def mh_sublhd(
    batch_size: int = 50,
    gamma: float = 1.5,
    p: float = 2.0,
    delta: float = 0.01,
    range_bound: Callable[[Statistics], jax.Array] | None = None,
    finite_population: bool = False,
) -> MHSubLhd:
    """Bardenet et al.'s MHSubLhd: the Metropolis test from an empirical-Bernstein interval on a growing minibatch.

    The defaults are the Section 6.1 settings of Seita et al.

    Args:
        batch_size: ``m``, the first minibatch (at least 2).
        gamma: The minibatch's geometric growth factor (> 1).
        p: The exponent spreading ``delta`` over the stages (> 1).
        delta: The probability allowed for a wrong decision, in (0, 1).
        range_bound: ``stats -> `` a bound on ``max_i |log ratio_i|``; None: a full-data pass finds it each step
            (recorded as hidden data).
        finite_population: Use the Bernstein-Serfling bound of sampling without replacement.
    """
    batch_size = check_int(batch_size, "batch_size m", low=2, why="the sample variance needs two points")
    gamma = check_real(gamma, "gamma", 1.0, low_open=True, why="the geometric growth factor of the batch size")
    p = check_real(p, "p", 1.0, low_open=True, why="so that delta_k = (p-1) delta / (p k^p) sums to at most delta")
    delta = check_real(
        delta, "delta", 0.0, 1.0, low_open=True, high_open=True, allowed="a number in the open interval (0, 1)"
    )
    if range_bound is not None and not callable(range_bound):
        raise ValueError(
            f"range_bound={range_bound!r} must be None or a callable stats -> bound on max_i |log ratio_i|"
        )
    finite_population = check_bool(finite_population, "finite_population")
    return MHSubLhd(batch_size, gamma, p, delta, range_bound, finite_population)
