"""MHminibatch (Seita et al. 2017, Algorithm 1): a Barker test on a minibatch with an additive correction.

With ``Lambda_i = (N / K) log(p(x_i|theta') / p(x_i|theta))`` the minibatch estimate
``delta_star = mean_i Lambda_i + psi`` is approximately ``N(Delta, s2)``. The minibatch grows by
``m`` points (drawn without replacement) while ``s2 >= sigma^2`` (and, optionally, while the CLT
error bound ``epsilon > delta``). Then ``X_nc ~ N(0, sigma^2 - s2)`` tops the noise up to
``N(0, sigma^2)`` and ``X_corr ~ C_sigma`` turns it into a standard logistic, so
``delta_star + X_nc + X_corr > 0`` is (approximately) the exact Barker test. If the minibatch
reaches all ``N`` points, ``delta_star`` is exact and a standard logistic draw is used directly.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import (
    Statistics,
    TestOutcome,
    check_batch_fits,
    data_free_delta,
    population_fraction_left,
    uniform_from_bits,
    untempered,
)
from minibatch_mcmc.acceptance.correction import (
    CorrectionSampler,
    check_sigma,
    correction_from_uniforms,
    load_correction,
    make_sampler,
    warn_if_inaccurate,
)
from minibatch_mcmc.acceptance.streaming import (
    StreamingSums,
    decision_dtype,
    first_chunk,
    grow,
    init_sums,
    mean_and_variance,
)
from minibatch_mcmc.checks import check_int, check_probability

BERRY_ESSEEN_A = 6.4
"""Coefficient of the standardised third absolute moment in the Corollary 1 bound."""
BERRY_ESSEEN_B = 2.0
"""Coefficient of the standardised first absolute moment in the Corollary 1 bound."""


class MinibatchStats(NamedTuple):
    """Mean, ``s2 = Var(delta_star)`` and the Corollary 1 error ``epsilon`` of the current minibatch."""

    mean: jax.Array
    s2: jax.Array
    epsilon: jax.Array


def minibatch_stats(mom: StreamingSums, n: int) -> MinibatchStats:
    """Estimate ``Var(delta_star)`` (finite-population corrected) and the CLT bound from the sums."""
    dtype = mom.s1.dtype
    b = jnp.maximum(mom.count, 1).astype(dtype)
    a = (mom.s1 + mom.c1) / b
    r2, r3, r4 = mom.s2 / b, mom.s3 / b, mom.s4 / b
    m2 = jnp.maximum(r2 - a * a, 0.0)
    m4 = jnp.maximum(r4 - 4 * a * r3 + 6 * a * a * r2 - 3 * a**4, 0.0)
    var_sample = m2 * b / jnp.maximum(b - 1.0, 1.0)
    fpc = population_fraction_left(mom.count, n, dtype)
    s2 = (mom.unit * mom.unit) * (var_sample / b * fpc)
    tiny = jnp.finfo(dtype).tiny
    spread = m2 > jnp.finfo(dtype).eps * jnp.maximum(r2, tiny)  # more than rounding noise around the mean
    kurt = jnp.where(spread, m4 / jnp.maximum(m2 * m2, tiny), 1.0)
    kurt = jnp.where(jnp.isfinite(kurt), jnp.maximum(kurt, 1.0), jnp.inf)  # E Z^4 >= (E Z^2)^2 = 1
    rho3 = kurt**0.75  # Lyapunov: E|Z|^3 <= (E Z^4)^(3/4), the streamable bound on the third moment
    rho1 = 1.0  # E|Z| <= 1 for a standardised Z
    eps = (BERRY_ESSEEN_A * rho3 + BERRY_ESSEEN_B * rho1) / jnp.sqrt(b)
    eps = jnp.where(spread & (mom.count < n), eps, 0.0)
    return MinibatchStats(mean=mom.shift + mom.unit * a, s2=s2, epsilon=eps)


def random_inputs(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One draw of bits per decision: the four Feistel round keys of the minibatch order and four uniform words."""
    bits = jax.random.bits(key, (8,), dtype=jnp.uint32)
    return bits[:4], bits[4:]


def first_chunk_indices(key: jax.Array, batch_size: int, n_data: int) -> jax.Array:
    """The ``m`` rows the first chunk of ``decide(key, ...)`` reads (what a prefetcher can read ahead)."""
    return first_chunk(key, random_inputs(key)[0], batch_size, n_data)


def lambda_scale(stats: Statistics) -> jax.Array:
    """``N / K``: the factor turning a per-datum log-ratio into its term ``Lambda_i`` of ``delta_star``."""
    return jnp.asarray(stats.n_data, decision_dtype(stats)) / stats.temperature


def read_minibatch(
    key: jax.Array,
    stats: Statistics,
    batch_size: int,
    sigma: float,
    delta: float | None,
    scale: jax.Array | None = None,
) -> StreamingSums:
    """The sums of the rows MHminibatch reads for ``key``: chunks of ``batch_size`` until ``s2 < sigma^2`` (and ``epsilon <= delta``).

    ``scale`` is :func:`lambda_scale` of ``stats``; a caller that also needs it passes its own, so one value
    serves both (XLA then rounds the test's other uses of it exactly as before).
    """
    n, m = stats.n_data, batch_size
    round_keys, _ = random_inputs(key)
    dtype = decision_dtype(stats)
    scale = lambda_scale(stats) if scale is None else scale
    sigma_sq = sigma**2
    enforce = delta is not None
    delta_bound = 0.0 if delta is None else float(delta)
    prior_ok = stats.psi > -jnp.inf

    def enough(mom: StreamingSums, state: tuple) -> tuple[tuple, jax.Array]:
        st = minibatch_stats(mom, n)
        more = st.s2 >= sigma_sq
        if enforce:
            more = more | (st.epsilon > delta_bound)
        return state, ~(more & (mom.count < n) & ~mom.bad & prior_ok)

    return grow(
        key, round_keys, stats, m, lambda raw: scale * raw, enough, (), init_sums(dtype), normalise=True, higher=True
    )[0]


class MinibatchRead(NamedTuple):
    """What a test on MHminibatch's minibatch (MHminibatch, its skew variant, the penalty test) decides from."""

    uniforms: jax.Array
    """The four uniforms of the decision (in the decision dtype)."""
    mom: StreamingSums
    """The sums of the rows read."""
    st: MinibatchStats
    """Their mean, ``s2`` and CLT bound."""
    delta_star: jax.Array
    """The estimate of ``Delta``: the minibatch mean plus the data-free terms."""
    prior_ok: jax.Array
    """Whether the candidate is inside the prior's support."""
    bad: jax.Array
    """A non-finite term or prior difference."""
    scale: jax.Array
    """``lambda_scale`` of the statistics."""


def read_estimate(
    key: jax.Array, stats: Statistics, batch_size: int, sigma: float, delta: float | None
) -> MinibatchRead:
    """The minibatch ``read_minibatch`` reads for ``key`` (grown while ``s2 >= sigma^2``), its estimate and the uniforms."""
    _, uniform_bits = random_inputs(key)
    scale = lambda_scale(stats)
    mom = read_minibatch(key, stats, batch_size, sigma, delta, scale)
    st = minibatch_stats(mom, stats.n_data)
    return MinibatchRead(
        uniforms=uniform_from_bits(uniform_bits, decision_dtype(stats)),
        mom=mom,
        st=st,
        delta_star=st.mean + data_free_delta(stats),
        prior_ok=stats.psi > -jnp.inf,
        bad=mom.bad | jnp.isnan(stats.psi),
        scale=scale,
    )


def minibatch_outcome(accepted: jax.Array, read: MinibatchRead) -> TestOutcome:
    """The record of a decision on MHminibatch's minibatch: ``accepted`` where the prior allows and nothing is non-finite,
    rows read, ``s2``, the CLT bound, the estimate (``-inf`` outside the prior's support) and the residuals' s.d.
    (un-tempered)."""
    zero = jnp.zeros((), read.st.s2.dtype)
    return TestOutcome(
        accepted=accepted & read.prior_ok & ~read.bad,
        batch_size=read.mom.count,
        s2=read.st.s2,
        epsilon=read.st.epsilon,
        delta_star=jnp.where(read.prior_ok, read.delta_star, -jnp.inf),
        nonfinite=read.bad,
        hidden_data=jnp.zeros((), jnp.int32),
        residual_sd=jnp.sqrt(mean_and_variance(read.mom)[1]) / read.scale,
        pvalue_threshold=zero,
        half_width=zero,
    )


class MHMinibatch(NamedTuple):
    """The MHminibatch acceptance test with its correction distribution ``C_sigma``."""

    batch_size: int
    """Initial minibatch size ``m``, also the growth increment."""
    sigma: float
    """Target s.d. of the minibatch noise; the minibatch grows while ``s2 >= sigma^2``."""
    delta: float | None
    """Bound on the CLT error ``epsilon``; ``None`` records ``epsilon`` without enforcing it."""
    correction: CorrectionSampler
    """O(1) sampler of ``X_corr ~ C_sigma``."""
    correction_error: float
    """Max CDF error of ``N(0, sigma^2) * C_sigma`` against the standard logistic."""
    name: str = "mhminibatch"
    decision_rule = "barker"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against the data size ``N``."""
        check_batch_fits(self.batch_size, n_data)

    temperature_factor = staticmethod(untempered)

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The first chunk of ``m`` rows."""
        return first_chunk_indices(key, self.batch_size, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Grow the minibatch until ``s2 < sigma^2`` (and ``epsilon <= delta``), then run the corrected Barker test."""
        read = read_estimate(key, stats, self.batch_size, self.sigma, self.delta)
        u, delta_star = read.uniforms, read.delta_star
        x_nc = (
            jnp.sqrt(2.0)
            * jax.scipy.special.erfinv(2.0 * u[0] - 1.0)
            * jnp.sqrt(jnp.maximum(self.sigma**2 - read.st.s2, 0.0))
        )
        x_corr = correction_from_uniforms(u[1], u[2], self.correction).astype(u.dtype)
        x_log = jnp.log(u[3]) - jnp.log1p(-u[3])
        exhausted = read.mom.count >= stats.n_data
        return minibatch_outcome(jnp.where(exhausted, delta_star + x_log > 0, delta_star + x_nc + x_corr > 0), read)


def mh_minibatch(batch_size: int = 50, sigma: float = 1.0, delta: float | None = None) -> MHMinibatch:
    """Seita et al.'s MHminibatch: a Barker-type test on a growing minibatch, its noise completed by a correction variable.

    Args:
        batch_size: ``m``, the first minibatch and the rows added while the estimate is too noisy (at least 2).
        sigma: The noise level: the minibatch grows until the estimate's s.d. is below it (a shipped correction table's
            value, 0.5 to 1.7).
        delta: Also grow until the CLT error bound ``epsilon`` is at most ``delta``; None: record it, do not enforce it.
    """
    batch_size = check_int(batch_size, "batch_size m", low=2, why="the sample variance needs two points")
    sigma = check_sigma(sigma)
    if delta is not None:
        delta = check_probability(delta, "delta", why="or None: do not enforce the CLT error bound")
    table = load_correction(sigma)
    warn_if_inaccurate(table)
    return MHMinibatch(
        batch_size=batch_size,
        sigma=sigma,
        delta=delta,
        correction=make_sampler(table),
        correction_error=float(table.max_cdf_error),
    )
