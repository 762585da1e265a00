"""``auto_sample``: the warm-up (``api.warmup``), or its saved copy in a checkpoint directory, then sampling with the frozen
settings and the check of the posterior after it; or, for a GLMM with many parameters or many small groups, the
level-by-level Gibbs sampler (``gibbs_route``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.registry import decision_rule, named_test
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.compiling import RUN_WORK, compile_options, use_compilation_cache
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.data.shards import agreed
from minibatch_mcmc.diagnostics.proxy_check import timed_check
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.checkpoint import (
    SETTINGS_FILE,
    WARMUP_SETTINGS,
    check_start,
    data_fingerprint,
    fingerprint,
    run_directory,
)
from minibatch_mcmc.samplers.driver import sample_compiled
from minibatch_mcmc.samplers.groups import ChainGroup, sample_groups
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.phase_cost import PhaseClock
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.run_options import RunOptions, merged_run
from minibatch_mcmc.warmup.api import Warmup, default_test, warmup
from minibatch_mcmc.warmup.auto_parallel import checked_split, parallel_options, runs_data_parallel, sample_split
from minibatch_mcmc.warmup.codec import LIBRARY_TYPES
from minibatch_mcmc.warmup.exact_choice import needs_bounds
from minibatch_mcmc.warmup.fit_cost import sampling_cost
from minibatch_mcmc.warmup.full_data import nuts_fit, small_data
from minibatch_mcmc.warmup.gibbs_route import gibbs_fit, gibbs_reason
from minibatch_mcmc.warmup.laplace_moves import (
    proposal_for,
)
from minibatch_mcmc.warmup.multistart import LocalMode
from minibatch_mcmc.warmup.saved import load_warmup, save_warmup
from minibatch_mcmc.warmup.tuning import (
    dispersed_starts,
)

PyTree = Any


def auto_sample(
    model: Model,
    data: PyTree | DataSource,
    theta0: PyTree,
    *,
    num_samples: int,
    num_chains: int = 4,
    key: jax.Array | int = 0,
    test: AcceptanceTest | str | None = None,
    proposal: str | None = None,
    order: int = 2,
    temperature: float = 1.0,
    recentre: bool = False,
    progress: bool = True,
    num_starts: int = 8,
    newton_steps: int = 10,
    stratum: bool = True,
    check_draws: int = 100,
    data_parallel: bool | None = None,
    run: RunOptions | None = None,
    **run_options: Any,
) -> tuple[SampleResult, Warmup]:
    """Warm up (mode, Laplace, proxy, rows it cannot see, tuning), then sample ``num_chains`` chains with the frozen settings.

    A GLMM with more than ``MAX_DENSE_DIM`` parameters, or whose median level has few rows
    (``warmup.full_data.small_groups``) when neither ``test`` nor ``proposal`` is named, is sampled level by level
    instead (``warmup.gibbs_route``: one warning says why; ``Warmup.kind`` is ``"group_gibbs"``). Any other model with at
    most ``SMALL_DATA_ROWS`` rows (``warmup.full_data.small_data``), no test, proposal, ``recentre``, checkpoint or devices
    named, is sampled by full-data NUTS (``Warmup.kind`` ``"full_data_nuts"``; one warning).

    Without ``checkpoint_dir``, ``devices`` or ``recentre``, a tuned scale is tuned on all the chains with the kernel
    sampling runs (one compilation for both), and sampling goes on from the tuned chains; else from dispersed Laplace
    draws. A short run on the CPU compiles its runner for speed of compilation (``compiling.RUN_WORK``; not with a
    checkpoint, which may be resumed longer).

    Args:
        model: The ``Model``, e.g. ``from_numpyro(...).model``.
        data: The rows: a pytree of arrays with a leading axis ``N``, or a ``DataSource``.
        theta0: Where the mode search starts.
        num_samples: Draws per chain.
        num_chains: Chains, vmapped (and sharded with ``devices``).
        key: A seed or a PRNG key.
        test: An acceptance test or a name of ``acceptance.registry.TESTS``; None: the penalty test (``warmup``'s
            ``test``).
        proposal: A name of ``PROPOSALS``; None: the warm-up's rule (``warmup``'s ``proposal``).
        order: Order of the Taylor proxy (1 or 2).
        temperature: The likelihood's temperature ``K`` (1: the posterior).
        recentre: Rebuild the proxy at the mean of a short tuned run.
        progress: Print the warm-up's phases and sampling's progress bar.
        num_starts: Minibatch-Adam searches for other modes (0: none); with several modes found, chains start in each.
        newton_steps: Most streamed full-data Newton steps of the mode search.
        stratum: Make the rows the proxy cannot see exact at every test.
        check_draws: Draws on which the proxy is checked after sampling (Pareto-k, one streamed pass; a warning when it
            fails); 0 skips the check.
        data_parallel: Sample with each process holding only its rows (``warmup.auto_parallel``): None (default) when
            ``data`` is this process's rows of a table split over ``P > 1`` processes (``data.open_npy_rows``,
            ``open_parquet_rows``, ``open_parquet_files``); True also splits in-memory rows over one process's devices.
            Then the warm-up runs with the penalty test and no exact stratum, and its passes are data-parallel.
        run: How sampling runs, one ``RunOptions`` (``sample``'s; its ``progress`` replaced by ``progress``). With
            ``checkpoint_dir`` the warm-up is saved there, and ``resume=True`` restores it instead of redoing it.
        **run_options: Any other field of ``RunOptions`` by name (``checkpoint_dir``, ``resume``, ``devices``,
            ``data_sharding``, ``block_size``), replacing that field of ``run``.

    Returns:
        ``(result, warm)``: the ``SampleResult`` (its ``wall_time`` is sampling alone) and the ``Warmup`` (its ``cost``
        holds every phase's rows and seconds, with ``sampling``'s and ``check``'s: ``fit_cost`` tables them; its
        ``proxy_check`` the check after sampling).
    """
    use_compilation_cache()  # before anything compiles: a new process reads what an earlier one compiled
    check_int(check_draws, "check_draws", 0)
    k_warm, k_start, k_run = jax.random.split(as_key(key), 3)
    options = dict(
        test=test,
        proposal=proposal,
        order=order,
        temperature=temperature,
        recentre=recentre,
        num_starts=num_starts,
        newton_steps=newton_steps,
        stratum=stratum,
    )
    run = merged_run(run, **run_options)._replace(progress=progress)
    split = runs_data_parallel(data, data_parallel)  # rows split between processes: never a route that reads every row
    named = split or test is not None or proposal is not None or temperature != 1.0
    reason = None if split else gibbs_reason(model, data, named)
    if reason is not None:  # a GLMM with many parameters or small groups: level by level (warmup.gibbs_route)
        return gibbs_fit(model, data, theta0, reason, num_samples, num_chains, k_run, run, temperature)
    kept = named or recentre or any(v is not None for v in (run.checkpoint_dir, run.devices, run.data_sharding))
    few = None if split or kept else small_data(data)
    if few is not None:  # so few rows that a minibatch cannot pay off: full-data NUTS (warmup.full_data)
        return nuts_fit(model, data, theta0, few, num_samples, num_chains, k_run, run)
    if split:  # the penalty test on a fixed minibatch stratified over the shards, no exact stratum
        options = parallel_options(options, run)
    elif all(x is None for x in (run.checkpoint_dir, run.devices, run.data_sharding)):
        options.update(
            num_chains=num_chains, num_samples=num_samples
        )  # tuning on the runner sampling reuses (not with recentre)
    with contextlib.ExitStack() as stack:  # the directory refused at once (in every process), or locked throughout
        enter_directory(stack, run, split)
        return _warm_and_sample(
            model,
            data,
            theta0,
            (k_warm, k_start, k_run),
            options,
            num_samples,
            num_chains,
            temperature,
            check_draws,
            run,
            split,
        )


def enter_directory(stack: contextlib.ExitStack, run: RunOptions, split: bool) -> None:
    """The checkpoint directory refused at once or locked on ``stack``; data-parallel, process 0 locks it, the others
    check it, and every process learns whether all could (none waits in the warm-up's passes for one that stopped)."""
    markers = (SETTINGS_FILE, WARMUP_SETTINGS)

    def lock() -> None:
        stack.enter_context(run_directory(run.checkpoint_dir, run.resume, markers))

    def check() -> None:  # process 0 locks and writes the directory every process sees
        if run.checkpoint_dir is not None:
            check_start(run.checkpoint_dir, run.resume, markers)

    if not split:
        lock()
    else:
        agreed(f"use the checkpoint directory {run.checkpoint_dir}", check if jax.process_index() > 0 else lock)


def _warm_and_sample(model, data, theta0, keys, options, num_samples, num_chains, temperature, check_draws, run, split):
    """``auto_sample``'s warm-up (or its restoration) and sampling, in the checkpoint directory's lock if it has one."""
    k_warm, k_start, k_run = keys
    progress = run.progress
    write = not split or jax.process_index() == 0  # data-parallel: process 0 writes the directory every process sees

    def stored() -> Warmup:
        return stored_warmup(model, data, theta0, k_warm, options, run.checkpoint_dir, run.resume, progress, write)

    # data-parallel: process 0 alone saves the warm-up, and the others learn whether it could before sampling with it
    w = agreed(f"warm up or save the warm-up in {run.checkpoint_dir}", stored) if split else stored()
    with PhaseClock("sampling", 1) as clock:  # the starts, the run, its draws constrained: all of sample's seconds
        if split:
            result = sample_split(model, data, w, (k_start, k_run), num_samples, num_chains, temperature, run)
        else:
            result = _sample(model, data, w, k_start, k_run, num_samples, num_chains, temperature, run)
    sampled = sampling_cost(result)._replace(seconds=clock.seconds, compile_seconds=clock.compile_seconds)
    w = w._replace(cost={**w.cost, "sampling": sampled})
    if split and check_draws:  # the proxy's check alone: the coupled continuation runs sample's kernel, not this one
        w = checked_split(model, data, w, result, check_draws, temperature, progress, jax.random.fold_in(k_run, 29))
    elif (
        check_draws and not w.mode_kernels and not needs_bounds(w.test)
    ):  # an exact test's draws do not rest on the proxy
        checked, cost = timed_check(
            model,
            data,
            w.estimator,
            w.proxy.centre,
            result.kernel_positions,
            num_draws=check_draws,
            temperature=temperature,
            records=result.records,
            rule=decision_rule(w.test),
            progress=progress,
            key=jax.random.fold_in(k_run, 29),
            stratum=bool(options["stratum"]),
            proposal=w.proposal,
            test=w.test,
            run_key=k_run,
        )
        w = w._replace(proxy_check=checked, cost={**w.cost, "check": cost})
    return result, w


def _sample(model, data, w, k_start, k_run, num_samples, num_chains, temperature, run) -> SampleResult:
    """``auto_sample``'s sampling with the warm-up ``w``: from its tuned chains or dispersed Laplace draws, by mode groups if several."""
    starts = dispersed_starts(w, num_chains, k_start) if w.chains is None else w.chains
    options = None  # a short run compiles fast; a checkpointed one (which may be resumed longer) keeps XLA's defaults
    if run.checkpoint_dir is None:
        options = compile_options(num_samples * num_chains * int(np.size(w.covariance, 0)), RUN_WORK)
    if w.mode_kernels:  # chain c in mode c mod M, with that mode's proxy and proposal
        m = len(w.modes)
        kernels = [(w.estimator, w.proposal)] + list(w.mode_kernels)
        groups = [
            ChainGroup(tuple(range(k, num_chains, m)), kernels[k][1], kernels[k][0]) for k in range(min(m, num_chains))
        ]
        return sample_groups(
            model,
            data,
            starts,
            groups,
            test=w.test,
            num_samples=num_samples,
            key=k_run,
            temperature=temperature,
            run=run,
            compiler_options=options,
        )
    return sample_compiled(
        model,
        data,
        starts,
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=num_samples,
        num_chains=num_chains,
        key=k_run,
        temperature=temperature,
        batched_init=True,
        run=run,
        runner=w.runner,
        compiler_options=options,
    )


def stored_warmup(
    model: Model,
    data: PyTree | DataSource,
    theta0: PyTree,
    key: jax.Array,
    options: dict,
    directory,
    resume: bool,
    progress: bool = False,
    write: bool = True,
) -> Warmup:
    """``warmup(...)``, saved in the checkpoint ``directory`` (a new run; not with ``write=False``: data-parallel
    processes but 0), or restored from it (``resume``)."""
    if directory is None:
        return warmup(model, data, theta0, key=key, progress=progress, **options)
    source = as_data_source(data)
    settings = {
        "seed": fingerprint(key),
        "model": fingerprint(model),
        "theta0": fingerprint(theta0),
        "options": fingerprint(options),
        "data": data_fingerprint(source.arrays(), source.n),
    }
    types, refs = (
        LIBRARY_TYPES + (LocalMode,),
        {"model": model},
    )  # a stratified proxy holds the model: supplied again on load
    saved = load_warmup(directory, settings, types, refs) if resume else None
    if saved is not None:
        return restored(model, source.n, saved, options)
    w = warmup(model, data, theta0, key=key, progress=progress, **options)
    if not write:
        return w
    save_warmup(
        directory,
        settings,
        {
            "proxy": w.proxy,
            "covariance": w.covariance,
            "scale": w.scale,
            "acceptance": w.acceptance,
            "cost": w.cost,
            "modes": w.modes,
            "mode_proxies": [k[0] for k in w.mode_kernels],
            "kind": w.kind,
            "why": w.why,
            "estimator": w.estimator,
            "influence": w.influence,
            "test": w.test,
        },
        types,
        refs,
    )
    return w


def restored(model: Model, n: int, saved: dict, options: dict) -> Warmup:
    """The ``Warmup`` from its saved parts: the proposal rebuilt from the proxy, covariance, kind and tuned scale."""
    proxy, cov, kind = saved["proxy"], saved["covariance"], saved["kind"]
    test = (
        saved["test"]
        if "test" in saved
        else default_test(n)
        if options["test"] is None
        else named_test(options["test"])
    )
    rule = decision_rule(test)
    make = proposal_for(kind, proxy, model, cholesky_factor(cov, cov.shape[0]), options["temperature"], rule)
    kernels = tuple(
        (
            p,
            proposal_for(kind, p, model, cholesky_factor(m.covariance, cov.shape[0]), options["temperature"], rule)(
                saved["scale"]
            ),
        )
        for p, m in zip(saved["mode_proxies"], saved["modes"][1:])
    )
    return Warmup(
        centre=proxy.centre,
        covariance=cov,
        proxy=proxy,
        proposal=make(saved["scale"]),
        scale=saved["scale"],
        acceptance=saved["acceptance"],
        test=test,
        cost=saved["cost"],
        modes=saved["modes"],
        mode_kernels=kernels,
        kind=kind,
        why=saved.get("why", "named"),
        estimator=saved["estimator"],
        influence=saved["influence"],
    )
