"""AustereMH (Korattikara, Chen and Welling 2014; sequential-tests paper, Section 3.1, Algorithm 2).

The Metropolis test ``log u < Delta`` is rewritten as ``mu > mu_0`` with
``mu = mean_i l_i``, ``l_i = log p(x_i|theta')/K - log p(x_i|theta)/K`` and
``mu_0 = (log u - psi) / N``. Minibatches of ``m`` points are drawn without replacement; after
each one the Student-t statistic ``t = (l_bar - mu_0) / s`` with the finite-population corrected
``s = s_l / sqrt(n) * sqrt(1 - (n - 1)/(N - 1))`` is formed, and the test stops when the p-value
``1 - F_{n-1}(|t|)`` drops below ``epsilon`` (deciding ``l_bar > mu_0``) or the data run out
(then ``s = 0`` and the decision is the exact Metropolis one).

Two variants, named as in Seita et al. (2017):

* **AustereMH(c)** (conservative): one ``(m, epsilon)`` for the whole run, chosen beforehand by
  :func:`design_conservative` from the worst-case error (``mu_std -> 0``) and the data use expected
  under pilot values of ``mu_std``.
* **AustereMH(nc)**: every step computes ``mu`` and ``sigma_l`` from the full data (counted as
  hidden data), hence ``mu_std = (mu - mu_0) sqrt(N) / sigma_l``, and picks the ``(m, epsilon)`` of a
  precomputed :class:`AustereDesign` that uses the least data while meeting the error bound at that
  ``mu_std``.

``epsilon`` is a level per stage, not an error per decision (``N / m`` stages each get a chance to
stop on noise): :func:`austere_mh_for_error` takes the error per decision (or a budget of wrong
decisions per run) and designs ``(m, epsilon)``; a conservative test whose worst-case error at the
run's ``N`` exceeds :data:`MAX_DECISION_ERROR` warns when the run starts (``austere_design.py``).
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.austere_design import (  # the design lives there
    CHECK_STAGES,
    ERROR_BATCH_GRID,
    AustereDesign,
    ErrorDesign,
    ErrorEstimate,
    design_for_error,
    per_decision_error,
    worst_case_error,
)
from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, check_batch_fits, data_free_delta, untempered
from minibatch_mcmc.acceptance.streaming import (
    StreamingSums,
    decision_dtype,
    first_chunk,
    grow,
    init_sums,
    mean_and_variance,
    order_and_uniform,
)
from minibatch_mcmc.checks import check_int, check_probability
from minibatch_mcmc.data.indexing import MAX_DATA
from minibatch_mcmc.data.passes import full_data_sum

# --------------------------------------------------------------------------------------------
# The start-of-run check of AustereMH(c)'s settings
# --------------------------------------------------------------------------------------------


class AccuracyWarning(UserWarning):
    """A setting whose measured error exceeds the library's stated level (the message names both)."""


MAX_DECISION_ERROR = 0.01
"""Worst-case per-decision error above which AustereMH(c) warns when a run starts.

The worst case (``mu_std -> 0``) is the probability that a decision whose exact answer is a coin
flip away stops early on the wrong side. At temperature 1 such decisions are common (a random walk
scaled to the posterior proposes moves with ``|Delta| = O(1)``), and wrong decisions there widen or
narrow the stationary distribution: the benchmark ``benchmarks/austere_bias.py`` (table in
docs/benchmarks.md) measures the posterior s.d. against the exact one for settings on both sides of
this level. No refusal: even a large error is a setting the papers used on purpose (their
experiments are reproduced with it), so the sampler runs and the warning says what it costs.
"""


@lru_cache(maxsize=32)
def cached_design(n_data: int, error: float) -> ErrorDesign:
    """:func:`design_for_error` with its defaults, cached (the warning names what it would pick)."""
    return design_for_error(n_data, error)


def accuracy_message(n_data: int, batch_size: int, epsilon: float, measured: ErrorEstimate, level: float) -> str:
    """The warning text for AustereMH(c) settings whose worst-case error exceeds ``level``, with what to use instead."""
    text = untrustworthy_text(n_data, batch_size, epsilon, measured, level)
    if n_data / min(ERROR_BATCH_GRID) > CHECK_STAGES:
        return f"{text} Run austere_mh_for_error({n_data}, error={level:g}) for settings (a design at this N takes a while)."
    try:
        fix = cached_design(n_data, level)
        advice = (
            f"austere_mh_for_error({n_data}, error={level:g}) picks m={fix.batch_size}, epsilon={fix.epsilon:g} "
            f"(worst-case error {fix.worst_error:.2g}, {fix.data_fraction:.0%} of the data per decision)"
        )
    except ValueError as err:
        advice = str(err)
    return f"{text} {advice}"


def untrustworthy_text(n_data: int, batch_size: int, epsilon: float, measured: ErrorEstimate, level: float) -> str:
    """What the warning says about the settings and the measured error (a lower bound above ``CHECK_STAGES`` stages)."""
    stages = math.ceil(n_data / batch_size)
    bound = "at least " if stages > CHECK_STAGES + 1 else ""
    return (
        f"AustereMH m={batch_size}, epsilon={epsilon:g} at N={n_data} ({math.ceil(n_data / batch_size)} stages): "
        f"worst-case per-decision error {bound}{measured.error:.3g} (+- {measured.std_error:.2g}, {measured.n_paths} "
        f"simulated paths), above {level:g} (MAX_DECISION_ERROR). epsilon is a level per stage, not per decision; "
        f"at temperature 1 such errors bias the posterior spread."
    )


def warn_if_untrustworthy(
    n_data: int, batch_size: int, epsilon: float, level: float = MAX_DECISION_ERROR
) -> ErrorEstimate:
    """Measure AustereMH(c)'s worst-case per-decision error at ``N`` and warn (:class:`AccuracyWarning`) above ``level``."""
    measured = worst_case_error(int(n_data), int(batch_size), float(epsilon))
    if measured.error > level:
        warnings.warn(
            accuracy_message(int(n_data), int(batch_size), float(epsilon), measured, level),
            AccuracyWarning,
            stacklevel=4,
        )
    return measured


# --------------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------------


def student_t_pvalue(t: jax.Array, dof: jax.Array) -> jax.Array:
    """``1 - F_dof(|t|)`` for the Student-t distribution, via the regularised incomplete beta."""
    x = dof / (dof + t * t)
    return 0.5 * jax.scipy.special.betainc(0.5 * dof, 0.5, x)


def _fpc(count: jax.Array, n: int, dtype) -> jax.Array:
    """``1 - (n - 1)/(N - 1)`` from integers: exactly 0 when all ``N`` points are used."""
    return jnp.maximum(n - count, 0).astype(dtype) / max(n - 1, 1)


class AustereMH(NamedTuple):
    """AustereMH with a fixed ``(m, epsilon)`` (conservative) or a per-step design (``design`` given)."""

    batch_size: int
    """``m`` for the conservative test; the chunk size is ``design.base_chunk`` otherwise."""
    epsilon: float
    """p-value threshold of the conservative test (ignored when ``design`` is given)."""
    design: AustereDesign | None = None
    name: str = "austere_mh"
    designed_for: ErrorDesign | None = None
    """The design behind ``(m, epsilon)`` when built by :func:`austere_mh_for_error` (its ``N`` and worst-case error)."""

    def validate(self, n_data: int) -> None:
        """Check ``m`` against ``N``; AustereMH(c) warns if its worst-case per-decision error at ``N`` is untrustworthy.

        AustereMH(nc) checks that the ``2N`` hidden evaluations fit the int32 record instead (its
        per-step design carries its own error bound). A test designed for this ``N`` is not re-measured.
        """
        check_batch_fits(self.batch_size, n_data)
        if self.design is not None and 2 * n_data > MAX_DATA:
            raise ValueError(
                f"AustereMH(nc) records 2N = {2 * n_data} hidden evaluations per step as int32; use N <= {MAX_DATA // 2}"
            )
        designed = self.designed_for is not None and self.designed_for.n_data == n_data
        if self.design is None and not designed:
            warn_if_untrustworthy(n_data, self.batch_size, self.epsilon)

    def worst_case_error(self, n_data: int) -> float:
        """Worst-case (``mu_std -> 0``) per-decision error of this conservative test at ``N`` (design's value if designed for ``N``)."""
        if self.designed_for is not None and self.designed_for.n_data == n_data:
            return self.designed_for.worst_error
        return worst_case_error(int(n_data), int(self.batch_size), float(self.epsilon)).error

    temperature_factor = staticmethod(untempered)
    decision_rule = "metropolis"

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The first chunk (``m``, or the design's base chunk), read after any full-data pass."""
        chunk_m = self.batch_size if self.design is None else self.design.base_chunk
        return first_chunk(key, order_and_uniform(key, jnp.float32)[0], int(chunk_m), n_data)

    def stage(
        self, stats: Statistics, per_datum, mu0: jax.Array, dtype
    ) -> tuple[int, jax.Array, jax.Array, jax.Array, jax.Array]:
        """Chunk size, stage size ``m``, threshold ``epsilon``, hidden data and a non-finite flag for this step."""
        n = stats.n_data
        if self.design is None:
            zero = jnp.zeros((), jnp.int32)
            return (
                self.batch_size,
                jnp.asarray(self.batch_size, jnp.int32),
                jnp.asarray(self.epsilon, dtype),
                zero,
                jnp.zeros((), bool),
            )
        # full-data statistics (the "hidden" data the non-conservative test needs)
        s1, b1 = full_data_sum(per_datum, stats.data, n)
        mu = s1 / n
        s2, b2 = full_data_sum(lambda rows: (per_datum(rows) - mu) ** 2, stats.data, n)
        sd = jnp.sqrt(s2 / jnp.maximum(n - 1, 1))
        mu_std = jnp.abs(mu - mu0) * jnp.sqrt(jnp.float32(n)) / jnp.maximum(sd, jnp.finfo(dtype).tiny)
        grid = self.design.mu_std_grid
        j = jnp.clip(jnp.searchsorted(grid, mu_std), 0, grid.shape[0] - 1)
        # nearest grid value below or above: take the more cautious (smaller mu_std) neighbour
        j = jnp.where((j > 0) & (grid[j] > mu_std), j - 1, j)
        eps = self.design.epsilon[j].astype(dtype)
        return self.design.base_chunk, self.design.batch_size[j], eps, jnp.asarray(2 * n, jnp.int32), b1 | b2

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Sequential t-test of ``mu > mu_0`` on growing minibatches."""
        n = stats.n_data
        dtype = decision_dtype(stats)
        round_keys, u = order_and_uniform(key, dtype)
        mu0 = (jnp.log(u) - data_free_delta(stats)) / n
        temp = stats.temperature

        def per_datum(rows):
            return stats.log_ratio(rows).astype(dtype) / temp

        chunk_m, stage_m, eps, hidden, bad_full = self.stage(stats, per_datum, mu0, dtype)

        def stop(st: StreamingSums, state: tuple) -> tuple[tuple, jax.Array]:
            count = st.count
            # test only at multiples of the stage size m (or when the data run out)
            at_stage = (count % stage_m == 0) | (count >= n)
            nf = count.astype(dtype)
            mean, var = mean_and_variance(st)
            s = jnp.sqrt(var / nf * _fpc(count, n, dtype))
            t = (mean - mu0) / jnp.maximum(s, jnp.finfo(dtype).tiny)
            pval = jnp.where(count >= n, 0.0, student_t_pvalue(t, jnp.maximum(nf - 1.0, 1.0)))
            return state, (at_stage & (pval < eps)) | (count >= n) | st.bad

        st0 = init_sums(dtype)._replace(bad=bad_full)
        st, _ = grow(key, round_keys, stats, chunk_m, lambda raw: raw / temp, stop, (), st0)
        nf = st.count.astype(dtype)
        mean, var = mean_and_variance(st)
        fpc = _fpc(st.count, n, dtype)
        prior_ok = stats.psi > -jnp.inf
        bad = st.bad | jnp.isnan(stats.psi)
        big_n = jnp.asarray(n, dtype)
        return TestOutcome(
            accepted=(mean > mu0) & prior_ok & ~bad,
            batch_size=st.count,
            s2=big_n * big_n * (var / nf * fpc),
            epsilon=jnp.zeros((), dtype),
            delta_star=jnp.where(prior_ok, big_n * mean + data_free_delta(stats), -jnp.inf),
            nonfinite=bad,
            hidden_data=hidden,
            residual_sd=jnp.sqrt(var) * stats.temperature,
            pvalue_threshold=eps,
            half_width=jnp.zeros((), dtype),
        )


def austere_mh(batch_size: int = 50, epsilon: float = 0.005) -> AustereMH:
    """AustereMH(c): the Metropolis test as a sequential t-test with a fixed minibatch size ``m`` and threshold ``epsilon``.

    Args:
        batch_size: ``m``, the rows added at each stage (at least 2).
        epsilon: The p-value below which a stage decides (the per-stage error threshold).
    """
    batch_size = check_int(batch_size, "batch_size m", low=2, why="the t statistic needs two points")
    epsilon = check_probability(epsilon, "epsilon", why="the per-stage error threshold of the t-test")
    return AustereMH(batch_size=batch_size, epsilon=epsilon, name="austere_mh_c")


def austere_mh_for_error(
    n_data: int,
    error: float | None = None,
    *,
    budget: float | None = None,
    num_steps: int | None = None,
    pilot_mu_std: Sequence[float] = (1.0,),
    **design_options,
) -> AustereMH:
    """AustereMH(c) with the ``(m, epsilon)`` of least expected data whose worst-case per-decision error is <= ``error``.

    ``budget`` with ``num_steps`` instead asks for at most ``budget`` wrong decisions expected over the
    run, i.e. ``error = budget / num_steps``: a bound on the expected count, since every decision's
    error is at most the worst case (``mu_std -> 0``). ``design_options`` go to
    :func:`design_for_error` (``batch_sizes``, ``epsilons``, ``n_paths``, ``seed``); raises if no grid
    point is certified below the error.

    Args:
        n_data: ``N``, the rows of the data it will run on.
        error: The worst-case error allowed per decision.
        budget: Instead of ``error``: the wrong decisions allowed in expectation over the run (with ``num_steps``).
        num_steps: The run's steps, with ``budget``.
        pilot_mu_std: Values of ``|mu_std|`` met in a short exact run (``samplers.pilot.pilot_mu_std``) that the design is checked on.
        **design_options: Passed to :func:`design_for_error` (``batch_sizes``, ``epsilons``, ``n_paths``, ``seed``).
    """
    asked = per_decision_error(error, budget, num_steps)
    chosen = design_for_error(n_data, asked, pilot_mu_std, **design_options)
    return AustereMH(batch_size=chosen.batch_size, epsilon=chosen.epsilon, name="austere_mh_c", designed_for=chosen)


def austere_mh_adaptive(design: AustereDesign) -> AustereMH:
    """AustereMH(nc): re-optimises ``(m, epsilon)`` every step from full-data ``mu_std`` (hidden data 2N).

    Args:
        design: The ``AustereDesign`` whose grid of ``(m, epsilon)`` each step picks from.
    """
    return AustereMH(
        batch_size=int(design.base_chunk), epsilon=float(design.epsilon[0]), design=design, name="austere_mh_nc"
    )
