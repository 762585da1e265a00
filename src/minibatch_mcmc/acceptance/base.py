"""What every acceptance test sees and returns, and the contract it fulfils.

An acceptance test is a pure function ``decide(key, stats) -> TestOutcome``. ``stats``
bundles the data-independent log ratio ``psi`` with a way to evaluate per-datum terms of the
log-likelihood difference on any rows of the data, so a minibatch test decides how much data to
touch and the full-data tests touch all of it. The log acceptance ratio every test estimates is

    Delta = (sum_i log_ratio_i + known_sum) / K + psi,

where ``log_ratio_i`` is the plain per-datum ratio ``log p(x_i|theta') - log p(x_i|theta)`` and
``known_sum = 0``, or, with a control variate, the residual of that ratio after a proxy and
``known_sum`` the proxy's exact, data-free sum (``minibatch_mcmc.control_variates``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.passes import full_data_sum

PyTree = Any


class ResidualBounds(NamedTuple):
    """What a bound-based test (Scalable MH, MH-SS, TunaMH) needs beyond the terms: ``|log_ratio_i| <= per_datum(rows)_i``."""

    per_datum: Callable[[PyTree], jax.Array]
    """Bound on each row's un-tempered term ``|log_ratio_i|`` for the current pair ``(theta, theta')``."""
    total: jax.Array
    """Sum of ``per_datum`` over all ``N`` rows, known without reading the data (from sums kept by the estimator)."""
    largest: jax.Array
    """Largest ``per_datum`` over all ``N`` rows, known without the data (a test sampling rows uniformly thins at this rate)."""
    draw: Callable[[jax.Array, int], jax.Array] | None = None
    """``draw(key, count)``: rows drawn with probability proportional to ``per_datum`` (None: draw rows uniformly)."""


class Statistics(NamedTuple):
    """Inputs to one accept/reject decision for a candidate ``theta'`` against ``theta``."""

    log_ratio: Callable[[PyTree], jax.Array]
    """Per-datum ``log p(x_i|theta') - log p(x_i|theta)`` for each row of a batch."""
    data: PyTree
    """The data pytree (leading axis ``n_data``)."""
    n_data: int
    """Number of data points ``N`` (static)."""
    psi: jax.Array
    """Data-independent log ratio ``log p0(theta') - log p0(theta) + log q(theta|theta') - log q(theta'|theta)``."""
    temperature: jax.Array
    """Temperature ``K``: each log-likelihood is divided by ``K`` (the prior is not)."""
    known_sum: jax.Array | float = 0.0
    """Data-free part of the log-likelihood difference (a control variate's proxy sum), un-tempered; 0 without one."""
    bounds: ResidualBounds | None = None
    """Per-datum bounds on the terms when the estimator supplies them (None: a test that needs them refuses to run)."""


class TestOutcome(NamedTuple):
    """Result of one decision, also the per-step record kept by the driver."""

    accepted: jax.Array
    """Whether the candidate was accepted."""
    batch_size: jax.Array
    """Number of distinct data points touched (the minibatch size actually used)."""
    s2: jax.Array
    """Estimated variance of ``delta_star`` (0 for full-data tests)."""
    epsilon: jax.Array
    """The CLT error bound (Seita et al., Corollary 1) on the final minibatch mean, for the tests that treat that mean
    as normal (MHminibatch, the penalty test); 0 for every other test."""
    delta_star: jax.Array
    """Estimate of the log acceptance ratio ``Delta`` (exact for full-data tests)."""
    nonfinite: jax.Array
    """True when a log-likelihood ratio was NaN or infinite (the driver raises)."""
    hidden_data: jax.Array = 0
    """Data points evaluated outside the test's minibatch, int32: full-data statistics some tests need, and the
    rows a gradient proposal's gradient reads (added by the kernel)."""
    residual_sd: jax.Array = 0.0
    """Sample s.d. of the un-tempered per-datum terms read (the proxy's residuals under a control variate):
    a chain that wanders where the proxy is poor shows here; 0 for tests that read no minibatch."""
    pvalue_threshold: jax.Array = 0.0
    """AustereMH's per-stage p-value threshold used at this step (its design's, for AustereMH(nc)); 0 for other tests."""
    half_width: jax.Array = 0.0
    """MHSubLhd's ``N c_t``: half-width, on the scale of ``Delta``, of the concentration interval that decided
    (0 when the decision used all ``N`` points); 0 for other tests."""
    expected_batch_size: jax.Array = 0.0
    """A bound-based test's expected number of rows (the Poisson mean) at this step; 0 for other tests and full-data steps."""
    fallback: jax.Array = False
    """True when a bound-based test fell back to the exact full-data test at this step."""
    bound_exceeded: jax.Array = False
    """True when an evaluated per-datum term exceeded its declared bound (the bounds are wrong: the test is not exact)."""


DECISION_RULES = ("metropolis", "barker", "factorised", "none")
"""What an acceptance test's ``decision_rule`` may say: it accepts (exactly or approximately) with probability
``min(1, e^Delta)`` (Metropolis), ``1 / (1 + e^-Delta)`` (Barker), a product of per-datum Metropolis factors
(factorised, as Scalable MH), or every candidate in the prior's support (none)."""


class AcceptanceTest(Protocol):
    """An acceptance test: configuration plus pure functions. Every hook the kernel and the driver use is here.

    A new test implements all of it; ``validate`` may do nothing (``no_checks``), ``temperature_factor``
    returns 1 unless the test tempers the likelihood itself (``untempered``) and ``first_rows`` returns no
    rows for a test that reads no minibatch first (``no_rows_first``).
    """

    name: str
    """Name recorded in results and shown in progress bars."""

    decision_rule: str
    """The acceptance probability the test targets, one of :data:`DECISION_RULES` (the warm-up's target follows it)."""

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept or reject one candidate."""
        ...

    def validate(self, n_data: int) -> None:
        """Raise a ``ValueError`` for settings impossible at this ``N`` (called once, before sampling)."""
        ...

    def temperature_factor(self, n_data: int) -> float:
        """The factor by which the test itself tempers the likelihood on top of ``K`` (MINT: ``n^(1 - lambda)``)."""
        ...

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """Row indices (int32) of the first minibatch ``decide(key, ...)`` reads, known before the step runs (a prefetcher
        reads them ahead); empty for a test that reads no minibatch first."""
        ...


def no_checks(n_data: int) -> None:
    """The default ``validate``: nothing depends on ``N``."""
    del n_data


def untempered(n_data: int) -> float:
    """The default ``temperature_factor``: the test does not temper the likelihood itself."""
    del n_data
    return 1.0


def no_rows_first(key: jax.Array, n_data: int) -> jax.Array:
    """The default ``first_rows``: the test reads no minibatch first (full-data tests, no test)."""
    del key, n_data
    return jnp.zeros((0,), jnp.int32)


def data_free_delta(stats: Statistics) -> jax.Array:
    """``psi + known_sum / K``: the part of ``Delta`` that needs no data (``psi`` when there is no control variate)."""
    return stats.psi + stats.known_sum / stats.temperature


def uniform_from_bits(bits: jax.Array, dtype) -> jax.Array:
    """Uniforms in (0, 1) from uint32 bits (24 bits of mantissa, centred in their cell)."""
    return ((bits >> 8).astype(dtype) + 0.5) * (1.0 / (1 << 24))


def check_batch_fits(batch_size: int, n_data: int) -> None:
    """Raise if the minibatch size ``m`` exceeds the data size ``N``."""
    if batch_size > n_data:
        raise ValueError(f"batch_size m={batch_size} exceeds the number of data points N={n_data}; use m <= N")


def compensated_add(total: jax.Array, carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Neumaier (compensated) summation step: ``total + carry`` tracks the running sum to about one rounding."""
    t = total + x
    lost = jnp.where(jnp.abs(total) >= jnp.abs(x), (total - t) + x, (x - t) + total)
    return t, carry + lost


def population_fraction_left(count: jax.Array, n: int, dtype) -> jax.Array:
    """``1 - count / N`` from the integer count, so it is exactly 0 once all ``N`` points are used."""
    return jnp.maximum(jnp.asarray(n, jnp.int32) - count, 0).astype(dtype) / jnp.asarray(n, dtype)


def exact_delta(stats: Statistics) -> tuple[jax.Array, jax.Array]:
    """The full-data log acceptance ratio ``Delta = (Lambda + known_sum) / K + psi`` and a non-finite flag.

    The ratios are summed relative to the first datum's ratio ``r_0`` (``Lambda = sum_i (r_i - r_0) + N r_0``),
    so a common offset shared by all ``N`` terms does not accumulate rounding error chunk after chunk.
    """
    r0 = stats.log_ratio(take(stats.data, jnp.zeros((1,), jnp.int32)))[0]
    r0 = jnp.where(jnp.isfinite(r0), r0, 0.0)  # a non-finite r_0 is caught by the sum itself
    lam, bad = full_data_sum(lambda rows: stats.log_ratio(rows) - r0, stats.data, stats.n_data)
    lam = lam + jnp.asarray(stats.n_data, lam.dtype) * r0 + stats.known_sum
    delta = lam / stats.temperature + stats.psi
    return delta, bad | ~jnp.isfinite(lam)


def full_data_outcome(accepted: jax.Array, delta: jax.Array, bad: jax.Array, n: int) -> TestOutcome:
    """Record of a full-data decision: batch size ``N``, zero variance and zero CLT error."""
    zero = jnp.zeros((), delta.dtype)
    return TestOutcome(
        accepted=accepted & ~bad,
        batch_size=jnp.asarray(n, jnp.int32),
        s2=zero,
        epsilon=zero,
        delta_star=delta,
        nonfinite=bad,
        hidden_data=jnp.zeros((), jnp.int32),
        residual_sd=zero,
        pvalue_threshold=zero,
        half_width=zero,
    )
