"""Automatic warm-up for temperature 1 on tall data: a model, data and a start in, good samples out.

``warmup`` finds the mode ``theta_hat`` (``warmup.centre``: minibatch Adam, then a few streamed full-data Newton
steps, the last of which is also the pass that builds the Taylor-proxy control variate around ``theta_hat``
and probes for rows it cannot see), takes the Laplace covariance there, and sets up the proposal: by default proxy HMC
from the Laplace fit with the penalty test (untuned; ``mixture``, proxy HMC with a tuned random walk, where the warm-up found an
exact stratum or several modes), or a local move whose scale it tunes to a target acceptance rate
with the minibatch test and the proxy in place (or the best global move by measured effective draws per second); optionally re-centres the
proxy once at the mean of a short run, and freezes everything. ``auto_sample`` then runs ``sample``
on from the chains it tuned, on the kernel it compiled for tuning (or, with several modes, ``recentre``,
devices or checkpoints, from over-dispersed Laplace draws). The warm-up's cost (rows read, passes over N, seconds and compile seconds,
phase by phase: ``Warmup.summary()``) is reported apart from sampling's, as NumPyro reports its warm-up apart from its samples.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.exact import MetropolisTest
from minibatch_mcmc.acceptance.registry import contract, decision_rule, named_test
from minibatch_mcmc.checks import check_bool, check_choice, check_int, check_positive
from minibatch_mcmc.compiling import use_compilation_cache
from minibatch_mcmc.control_variates import Proxy
from minibatch_mcmc.control_variates.influence import Influence
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.data.host import data_errors
from minibatch_mcmc.diagnostics.proxy_check import ProxyCheck
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.diagnose import bad_rows_named
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.phase_cost import PhaseClock
from minibatch_mcmc.samplers.scaled_runner import BoundRunner
from minibatch_mcmc.samplers.tuning import untuned
from minibatch_mcmc.warmup.batch_choice import choose_batch_size
from minibatch_mcmc.warmup.centre import find_centre
from minibatch_mcmc.warmup.context import WarmupContext, WarmupSettings, merged_settings
from minibatch_mcmc.warmup.efficiency import choose_by_efficiency
from minibatch_mcmc.warmup.exact_choice import default_exact, estimator_for, exact_or_penalty, needs_bounds
from minibatch_mcmc.warmup.fit_cost import AFTER_WARMUP, fit_cost, timed_setup
from minibatch_mcmc.warmup.laplace_moves import (
    DEFAULT_PROPOSAL,
    GLOBAL,
    KINDS,
    TARGET_ACCEPT,
    default_kind,
    proposal_for,
    tuned_steps,
)
from minibatch_mcmc.warmup.tuning import (
    laplace_starts,
    mode_kernels,
    short_run_mean,
    timed_proxy,
    tune,
)

PyTree = Any

PROPOSALS = tuple(KINDS) + ("auto",)
"""Proposals ``warmup`` can set up, the kinds of ``laplace_moves.KINDS`` and ``auto``: proxy-gradient MALA or a
Laplace-shaped random walk (both scale-tuned);
independence from the proxy posterior's Laplace fit (Gaussian, or t) and proxy HMC (fixed, not tuned: the default); ``mixture``:
proxy HMC, or with probability ``laplace_moves.LOCAL_WEIGHT`` a tuned random walk;
``auto``: the one of ``AUTO_CANDIDATES`` with the most effective draws per second in a short measured run."""
DEFAULT_TEST = "penalty"
"""The name (``acceptance.registry.TESTS``) of the default acceptance test for ``N >= 50``: the penalty test, Metropolis-type
on MHminibatch's 50-row minibatch, so a global move's acceptance is not capped at 1/2 as under Barker's rule."""
AUTO_CANDIDATES = ("proxy_hmc", "independence", "independence_t")
"""What ``proposal="auto"`` measures (``warmup.efficiency``: 8 chains x 200 steps each) and chooses from."""


class Warmup(NamedTuple):
    """Everything the warm-up found, frozen for sampling, and what it cost."""

    centre: PyTree
    """Centre of the proxy (the mode, or the re-centred mean)."""
    covariance: np.ndarray
    """Laplace covariance at the mode (flattened parameter order)."""
    proxy: Proxy
    """The Taylor proxy (the proposal's drift); pass ``estimator`` to ``sample``, which adds its exact stratum if any."""
    proposal: Proposal
    """The proposal (its scale tuned for MALA and the random walk; from the Laplace fit for ``GLOBAL`` kinds)."""
    scale: float
    """Tuned step size (Langevin) or scale (random walk, and the random walk of ``mixture``); 1 for ``GLOBAL`` kinds."""
    acceptance: float
    """Acceptance rate of the last tuning window (NaN for the untuned kinds in ``GLOBAL``)."""
    test: AcceptanceTest
    """The acceptance test (any scale was tuned with it)."""
    cost: dict
    """``PhaseCost`` per phase: ``mode`` (with the multi-start search), ``proxy`` (the last Newton pass),
    ``influence`` (its bulk rows and any widened rounds), ``tuning``, ``batch`` (the default test's minibatch sized for a
    global move, ``warmup.batch_choice``), (if asked) ``choose`` and ``recentre``, ``setup`` (the seconds between them), and
    after the warm-up ``sampling`` and ``check`` (``auto_sample``'s run and its check of the proxy: in ``summary()``, not in
    the warm-up's totals)."""
    modes: tuple = ()
    """``LocalMode`` per distinct mode the multi-start search found, the proxy's mode first (empty if not searched)."""
    mode_kernels: tuple = ()
    """``(proxy, proposal)`` centred on and shaped by each further mode (``modes[1:]``), at the tuned scale."""
    kind: str = DEFAULT_PROPOSAL
    """The kind of ``proposal`` (for ``proposal="auto"`` or None, the one chosen)."""
    why: str = "named"
    """Why ``kind``: ``"named"`` by the user, ``"auto: ..."`` measured, or ``"rule: ..."`` (``laplace_moves.default_kind``)."""
    estimator: Any = None
    """What to pass as ``estimator``: ``proxy``, or ``proxy`` with an exact stratum of the rows it cannot see."""
    influence: Influence | None = None
    """The rows found far from the proxy (``control_variates.influence``); None when the search was off."""
    proxy_check: ProxyCheck | None = None
    """The Pareto-k check after sampling (set by ``auto_sample``)."""
    runner: BoundRunner | None = None
    """With ``warmup(num_chains=C)``: the compiled block runner tuning ran on, at the tuned scale (``auto_sample`` samples on
    it: ``samplers.driver.sample_compiled(runner=...)``)."""
    chains: PyTree = None
    """With ``warmup(num_chains=C)``: the tuned chains' final positions, batched: the warm start of sampling."""

    @property
    def total_data(self) -> int:
        """Data points read by the whole warm-up (not ``sampling`` or the ``check`` after it)."""
        return int(sum(c.data for k, c in self.cost.items() if k not in AFTER_WARMUP))

    @property
    def total_seconds(self) -> float:
        """Seconds spent by the whole warm-up (not ``sampling`` or the ``check`` after it)."""
        return float(sum(c.seconds for k, c in self.cost.items() if k not in AFTER_WARMUP))

    def summary(self) -> dict:
        """Per phase (``sampling`` and ``check`` too): passes over ``N``, rows read, seconds and compile seconds; the warm-up's
        totals, and ``fit_seconds``, every phase's (``fit_cost`` adds ``from_numpyro``'s conversion and prints the table)."""
        phases = {
            k: {"passes": c.passes, "rows": c.data, "seconds": c.seconds, "compile_seconds": c.compile_seconds}
            for k, c in self.cost.items()
        }
        total_passes = float(sum(c.passes for k, c in self.cost.items() if k not in AFTER_WARMUP))
        return {
            "phases": phases,
            "total_passes": total_passes,
            "total_rows": self.total_data,
            "total_seconds": self.total_seconds,
            "fit_seconds": fit_cost(warm=self).seconds,
            "proposal": self.kind,
            "why": self.why,
        }


@timed_setup
@data_errors
def warmup(
    model: Model,
    data: PyTree | DataSource,
    theta0: PyTree,
    *,
    key: jax.Array | int = 0,
    test: AcceptanceTest | str | None = None,
    proposal: str | None = None,
    temperature: float = 1.0,
    progress: bool = False,
    num_chains: int | None = None,
    num_samples: int | None = None,
    settings: WarmupSettings | None = None,
    **knobs: Any,
) -> Warmup:
    """Mode, Laplace covariance, Taylor proxy and a tuned proposal for sampling at ``temperature`` (1: the posterior).

    Phase by phase (each timed in ``Warmup.cost``): the mode and the Laplace covariance, the Taylor proxy there, the rows
    the proxy cannot see, the proposal and its tuning, and for the default test with a global move its minibatch size.
    The result's ``proposal``, ``test`` and ``estimator`` are ``sample``'s arguments; ``auto_sample`` does both.

    Args:
        model: The ``Model`` (``log_prior`` plus per-datum ``log_lik``), e.g. ``from_numpyro(...).model``.
        data: The rows: a pytree of arrays with a leading axis ``N``, or a ``DataSource`` (memory-mapped, Parquet).
        theta0: Where the mode search starts (a pytree, or ``from_numpyro(...).init``).
        key: A seed or a PRNG key.
        test: An acceptance test, or a name of ``acceptance.registry.TESTS`` (that test at its default settings; an
            exact one, ``"smh"``, ``"mhss"``, ``"tunamh"``, with the GLM proxy's per-datum bounds). None:
            ``default_test(N, model)``: for a GLM that asks for it (``model.glm.exact_default``) Scalable MH where its bounds predict at most the penalty
            test's rows per step (``exact_choice.exact_or_penalty``), else the penalty test on 50 rows (more at small ``N`` with a global move: the ``batch``
            phase), or below ``N = 50`` the exact Metropolis test.
        proposal: A name of ``PROPOSALS`` (the rows of ``laplace_moves.KINDS``, and ``"auto"``: the best of
            ``AUTO_CANDIDATES`` by measured effective draws per second, its cost the ``choose`` phase). None: the rule
            ``laplace_moves.default_kind``, ``"mixture"`` where the warm-up put rows in an exact stratum or found
            several modes, else ``"proxy_hmc"``; ``Warmup.why`` says which.
        temperature: The likelihood's temperature ``K`` (each log-likelihood divided by it; 1: the posterior).
        progress: Print a status line per phase with its cost.
        num_chains: With one mode and no ``recentre``, tune a tuned scale on that many chains from dispersed Laplace
            draws, on the compiled runner sampling then reuses (``Warmup.runner`` and ``Warmup.chains``). None: one
            chain from the mode.
        num_samples: The steps per chain sampling will take: sets the tuned runner's compile level
            (``compiling.RUN_WORK``).
        settings: The knobs as one ``WarmupSettings`` (its defaults if None).
        **knobs: Any field of ``WarmupSettings`` by name (``order``, ``target_accept``, ``num_windows``,
            ``window_size``, ``recentre``, ``newton_steps``, ``num_starts``, ``stratum``), replacing
            that field of ``settings``. ``recentre=True`` rebuilds the proxy at the mean of a short tuned run;
            ``num_starts`` minibatch-Adam searches look for other modes (a warning; ``auto_sample`` starts chains in
            each); ``stratum=True`` makes the rows the proxy cannot see (``influential_rows``) exact at every test.

    Returns:
        The ``Warmup``: centre, covariance, proxy, tuned proposal, test, estimator and each phase's cost.
    """
    use_compilation_cache()  # before anything compiles: a new process reads what an earlier one compiled
    s = merged_settings(settings, **knobs)
    kind = None if proposal is None else check_choice(proposal, "proposal", PROPOSALS)
    temperature = check_positive(temperature, "temperature")
    check_bool(s.recentre, "recentre")
    check_int(s.num_windows, "num_windows", 1)
    check_int(s.window_size, "window_size", 1)
    check_int(s.num_starts, "num_starts", 0)
    num_chains = None if num_chains is None else check_int(num_chains, "num_chains", 1)
    num_samples = None if num_samples is None else check_int(num_samples, "num_samples", 1)
    if s.target_accept is not None and kind in GLOBAL + ("auto", None):
        raise ValueError(
            f"target_accept={s.target_accept!r} has no effect with proposal={kind!r}, which is not tuned: leave it None, "
            f"or name a tuned proposal ({', '.join(repr(k) for k in KINDS if k not in GLOBAL)})"
        )
    source, sized = (
        as_data_source(data),
        test is None,
    )  # the default test's minibatch is sized for a global move (below)
    test = default_test(source.n, model) if test is None else named_test(test)
    rule = decision_rule(test)
    k_mode, k_tune, k_centre = jax.random.split(as_key(key), 3)
    found = find_centre(
        model,
        source,
        theta0,
        as_key(key),
        k_mode,
        temperature=temperature,
        order=s.order,
        newton_steps=s.newton_steps,
        num_starts=s.num_starts,
        progress=progress,
        stratum=check_bool(s.stratum, "stratum") and not needs_bounds(test),
    )  # exact tests need no stratum
    cov, proxy, modes, influence, cost, mode_theta = (
        found.covariance,
        found.proxy,
        found.modes,
        found.influence,
        found.cost,
        found.theta_hat,
    )
    chol = cholesky_factor(cov, cov.shape[0])
    ctx = WarmupContext(
        model, source, test, estimator_for(test, model, source, proxy, chol, influence), temperature, rule
    )
    if sized and needs_bounds(test):  # a GLM's exact default, kept where it reads at most the penalty test's rows
        ctx = exact_or_penalty(
            ctx, proxy, chol, influence, default_test(source.n), jax.random.fold_in(k_tune, 3), progress
        )
        test, rule = ctx.test, ctx.rule
    kind, why = (
        (kind, "named")
        if kind is not None
        else default_kind(0 if influence is None else influence.rows.size, len(modes))
    )
    if kind == "auto":
        with PhaseClock("choose", source.n, progress) as clock:
            kind, data = choose_by_efficiency(ctx, chol, mode_theta, k_tune, AUTO_CANDIDATES)
        cost["choose"], why = clock.cost(data), "auto: the most effective draws per second"
    if progress:
        print(f"warm-up: proposal {kind} ({why})", flush=True)
    tuned_kind, target_key = KINDS[kind].tuned_move, KINDS[kind].target
    target = TARGET_ACCEPT.get((rule, target_key), math.nan) if s.target_accept is None else s.target_accept
    make, runner = proposal_for(kind, proxy, model, chol, temperature, rule), None
    with PhaseClock("tuning", source.n, progress and kind not in GLOBAL) as clock:
        if kind in GLOBAL:  # nothing to tune: the Laplace fit sets the move
            tuned = untuned(mode_theta)
        else:
            reused = (
                num_chains is not None and not s.recentre and len(modes) <= 1
            )  # all chains, on the runner sampling reuses
            if reused:
                starts = laplace_starts(proxy.centre, cov, modes, num_chains, jax.random.fold_in(k_tune, 1))
                move, counted = make, tuned_steps(kind)
            else:  # one chain from the mode, the tuned move alone
                starts = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], mode_theta)
                move, counted = proposal_for(tuned_kind, proxy, model, chol, temperature, rule), None
            with bad_rows_named(model, source, mode_theta):
                tuned, bound = tune(
                    ctx,
                    move,
                    starts,
                    k_tune,
                    target,
                    tuned_kind,
                    s.num_windows,
                    s.window_size,
                    counted,
                    num_samples if reused else None,
                )
            runner = bound if reused else None
    cost["tuning"] = clock.cost(tuned.data_used)
    if s.recentre:
        last = jax.tree_util.tree_map(lambda a: a[0], tuned.position)  # the one tuned chain's end
        centre, cost["recentre_run"] = short_run_mean(ctx, make(tuned.scale), last, k_centre)
        proxy, cost["recentre"] = timed_proxy(model, source, centre, s.order)
        ctx = ctx._replace(estimator=estimator_for(test, model, source, proxy, chol, influence))
        make = proposal_for(kind, proxy, model, chol, temperature, rule)
    if sized and kind in GLOBAL and contract(test).sized_batch:
        with PhaseClock("batch", source.n, progress) as clock:
            choice = choose_batch_size(
                model,
                source,
                ctx.estimator,
                proxy.centre,
                chol,
                test.batch_size,
                jax.random.fold_in(k_tune, 2),
                temperature=temperature,
                sigma_max=test.sigma_max,
            )
        ctx, cost["batch"] = (
            ctx._replace(test=test._replace(batch_size=choice.batch_size)),
            clock.cost(choice.data_used),
        )
    kernels, cost["proxy"] = mode_kernels(ctx, modes[1:], s.order, kind, float(tuned.scale), cost["proxy"])
    return Warmup(
        centre=proxy.centre,
        covariance=cov,
        proxy=proxy,
        proposal=make(float(tuned.scale)),
        scale=float(tuned.scale),
        acceptance=float(tuned.acceptance[-1]),
        test=ctx.test,
        cost=cost,
        modes=modes,
        mode_kernels=kernels,
        kind=kind,
        why=why,
        estimator=ctx.estimator,
        influence=influence,
        runner=runner,
        chains=tuned.position if runner is not None else None,
    )


def default_test(n: int, model: Model | None = None) -> AcceptanceTest:
    """The ``DEFAULT_TEST`` (the penalty test on 50 rows), for a GLM with ``model.glm.exact_default`` the exact ``exact_choice.EXACT_DEFAULT``
    (the warm-up keeps it where its bounds predict no more rows), or for ``N < 50`` (a minibatch would be all the data) the
    exact Metropolis test."""
    exact = None if model is None else default_exact(model)
    return MetropolisTest() if n < 50 else named_test(DEFAULT_TEST) if exact is None else exact
