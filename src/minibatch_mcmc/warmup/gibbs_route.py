"""``auto_sample``'s route for GLMMs the minibatch sampler cannot serve: the level-by-level Gibbs sampler (issue 31).

A GLMM with more parameters than a dense Laplace fit allows (``d > MAX_DENSE_DIM``), or whose median level has few
rows (``full_data.small_groups``), is sampled by ``warmup.group_gibbs``'s sweeps: every level's effects from its own
rows, the globals from all rows, the location and scale ridges by data-free moves. Nothing in it is ``O(d^2)`` (the
rows held once for all chains; per chain ``O(G k^2)`` and one chunk of rows), it needs no mode (there may be none:
the funnel), and every move is exact.
``docs/notes-on-the-papers.md`` ("Many small groups: level-by-level Gibbs") says why this design and what it measured
against full-data NUTS.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.compiling import release_freed_heap
from minibatch_mcmc.control_variates.taylor import MAX_DENSE_DIM
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.glmm import dimension
from minibatch_mcmc.samplers.phase_cost import PhaseCost
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.run_options import RunOptions
from minibatch_mcmc.warmup.api import Warmup
from minibatch_mcmc.warmup.full_data import nuts_records, routed_result, routed_warmup, small_groups
from minibatch_mcmc.warmup.glmm_location import location_pairs, location_weights
from minibatch_mcmc.warmup.group_gibbs import (
    Problem,
    from_flat,
    passes_per_sweep,
    spread_weights,
    sweep,
    to_flat,
    unit_spread,
)

PyTree = Any

GIBBS_WARMUP = 200
"""Sweeps per chain before the draws kept: the first ``CLIMB`` climb to the posterior; the rest tune ``rho``."""
TARGET_ACCEPT = 0.6
"""The acceptance ``rho`` is tuned towards (per factor, the mean over its levels; the globals' move), from ``rho = 0``."""
BLOCK = 25
"""Sweeps per compiled block (one compilation serves the warm-up and the draws)."""
CLIMB = BLOCK
"""Warm-up sweeps whose globals step ascends (the Newton point where it raises the target) before ``rho`` is tuned:
from a start far off in the globals, the Newton MH step is rarely accepted and the tuning then slows it further. The
levels far from their conditional climb in these sweeps too (``group_gibbs.effects_step``): from a start below its
mode, a level of ``5 x 10^4`` logistic rows rejects every Newton MH move (issue 31)."""
INIT_RADIUS = 1.0
"""Chains start uniformly within this distance of ``theta0`` in each unconstrained coordinate."""


def gibbs_reason(model: Model, data: Any, named: bool) -> str | None:
    """Why ``auto_sample`` samples this GLMM level by level (one line), or None: ``d > MAX_DENSE_DIM`` always (nothing
    else serves it), small groups when the user named neither test nor proposal (``named`` False)."""
    if model.glmm is None:
        return None
    d = dimension(model.glmm.layout)
    if d > MAX_DENSE_DIM:
        why = f"d = {d:,} parameters, more than a dense Laplace fit allows ({MAX_DENSE_DIM})"
        return why + (": the named test and proposal are not used" if named else "")
    small = None if named else small_groups(model, data)
    return small


def announce_gibbs(reason: str, run: RunOptions, temperature: float) -> None:
    """The one warning line of a fit routed to the Gibbs sampler; a ValueError naming what it does not take."""
    given = [k for k in ("checkpoint_dir", "data_sharding", "devices") if run._asdict()[k] is not None]
    if given or temperature != 1.0:
        extra = given + ([f"temperature={temperature}"] if temperature != 1.0 else [])
        raise ValueError(f"auto_sample samples this GLMM level by level ({reason}), which takes none of {extra}")
    warnings.warn(
        f"auto_sample: level-by-level Gibbs (each group's effects from its own rows), not the minibatch sampler: "
        f"{reason}",
        UserWarning,
        stacklevel=4,
    )


def problem_for(model: Model, arrays: dict) -> Problem:
    """The sweep's ``Problem`` for a GLMM ``model`` and its rows."""
    layout = model.glmm.layout
    spec = model.glmm
    pairs = location_pairs(layout, arrays)
    return Problem(
        layout, spec.row_log_density, model.log_prior, pairs, shared_density=spec.shared_density, row_part=spec.row_part
    )


def block_runner(problem: Problem, num_chains: int):
    """``(states, t, count, data, base_key, adapt, spread, climb, location) -> ((states, t, count), (flat draws,
    acceptance))``: ``BLOCK`` sweeps of every chain, ``rho = 1 - exp(-t)`` per chain and move, ``t`` tuned towards
    ``TARGET_ACCEPT`` while ``adapt`` (and not ``climb``); ``spread`` and ``location`` each chain's step-4 weights
    (``group_gibbs.spread_weights``, ``glmm_location.location_weights``), held fixed in the block; ``climb``: step 4
    ascends (``group_gibbs.newton_mh``), the warm-up's first block."""
    layout = problem.layout

    def one(key, state, rho, data, spread, climb, location):
        return sweep(problem, key, state, rho, data, spread, climb, location)

    def body(carry, _, data, base_key, adapt, spread, climb, location):
        states, t, count = carry
        keys = jax.random.split(jax.random.fold_in(base_key, count), num_chains)
        rho = 1.0 - jnp.exp(-t)
        axes = (0, 0, 0, None, 0, None, 0)
        new, stats = jax.vmap(one, in_axes=axes)(keys, states, rho, data, spread, climb, location)
        rates = jnp.concatenate([stats.effects, stats.globals_[:, None]], axis=1)
        gain = 1.0 / jnp.sqrt(1.0 + count.astype(t.dtype))
        t = jnp.where(adapt & ~climb, jnp.maximum(0.0, t + gain * (TARGET_ACCEPT - rates)), t)
        flat = jax.vmap(lambda s: to_flat(layout, s))(new)
        return (new, t, count + 1), (flat, stats.globals_)

    @jax.jit
    def run(states, t, count, data, base_key, adapt, spread, climb, location):
        def step(c, x):
            return body(c, x, data, base_key, adapt, spread, climb, location)

        return jax.lax.scan(step, (states, t, count), None, length=BLOCK)

    return run


def compiled_now(jitted, *args):
    """``jitted`` compiled for ``args`` before its first run, the memory the compilation freed handed back to the OS
    (``compiling.release_freed_heap``) so that the run's buffers do not come on top of the compiler's peak."""
    out = jitted.lower(*args).compile()
    release_freed_heap()
    return out


def chain_spreads(problem: Problem, partial: bool):
    """``(states, data) -> each chain's step-4 weights``: ``spread_weights`` at its state (``partial``, compiled once),
    else all 1 (the plain non-centred update)."""
    if partial:
        return jax.jit(jax.vmap(lambda st, data: spread_weights(problem, st, data), in_axes=(0, None)))
    ones = unit_spread(problem.layout)

    def unit(states, data):
        num = jax.tree_util.tree_leaves(states)[0].shape[0]
        return tuple(jnp.broadcast_to(jnp.asarray(v), (num,) + v.shape) for v in ones)

    return unit


def chain_locations(problem: Problem, spreads: tuple, centre: bool) -> tuple:
    """Each chain's step-4 location weights from its spread weights (``glmm_location.location_weights``; ``centre``
    False: none, the effects held in location as ``w = 0`` would)."""
    return location_weights(problem.shifts, spreads) if centre else ()


def group_gibbs(
    model: Model,
    data: Any,
    theta0: jax.Array,
    *,
    num_samples: int,
    num_chains: int,
    key: jax.Array,
    num_warmup: int = GIBBS_WARMUP,
    partial: bool = True,
    centre_location: bool = True,
    climb_levels: bool = True,
) -> tuple[SampleResult, dict]:
    """``num_chains`` chains of ``num_warmup`` tuning sweeps then ``num_samples`` kept sweeps: the run, and its
    ``adaptation`` and ``sampling`` costs (``PhaseCost``: rows read, passes over ``N``, seconds). ``partial``: step 4's
    spread weights re-read from each chain's state after every warm-up block and fixed for the draws (False: all 1);
    ``centre_location``: its location weights ``1 - v`` from them (False: all 0, the effects held in location);
    ``climb_levels``: the climbing sweeps also climb the levels far from their conditional (``Problem.climb_levels``)."""
    source = as_data_source(data)
    arrays = source.arrays()
    problem = problem_for(model, arrays)._replace(climb_levels=climb_levels)
    rows = jax.tree_util.tree_map(jnp.asarray, arrays)
    flat0 = jnp.asarray(theta0)
    k_init, k_warm, k_run = jax.random.split(key, 3)
    starts = flat0[None, :] + jax.random.uniform(
        k_init, (num_chains, flat0.size), flat0.dtype, -INIT_RADIUS, INIT_RADIUS
    )
    states = jax.vmap(lambda th: from_flat(problem.layout, th))(starts)
    t = jnp.zeros((num_chains, len(problem.layout.levels) + 1), flat0.dtype)
    per_sweep = passes_per_sweep(problem.layout) * source.n * num_chains
    spreads = chain_spreads(problem, partial)
    spread = chain_spreads(problem, False)(states, rows)
    location = chain_locations(problem, spread, centre_location)
    run = compiled_now(
        block_runner(problem, num_chains),
        states,
        t,
        jnp.zeros((), jnp.int32),
        rows,
        k_warm,
        True,
        spread,
        True,
        location,
    )
    cost, kernel = {}, np.empty((num_chains, num_samples, flat0.size), flat0.dtype)
    accepted = np.empty((num_chains, num_samples), flat0.dtype)
    for phase, sweeps, base, adapt in (
        ("adaptation", num_warmup, k_warm, True),
        ("sampling", num_samples, k_run, False),
    ):
        start, count, done = time.perf_counter(), jnp.zeros((), jnp.int32), 0
        while done < sweeps:
            climb = adapt and done < CLIMB
            (states, t, count), (flat, acc) = run(states, t, count, rows, base, adapt, spread, climb, location)
            if adapt:
                spread = spreads(states, rows)
                location = chain_locations(problem, spread, centre_location)
                release_freed_heap()  # the first call compiled the weights' program
            else:
                kept = min(BLOCK, sweeps - done)
                kernel[:, done : done + kept] = np.swapaxes(np.asarray(flat)[:kept], 0, 1)
                accepted[:, done : done + kept] = np.swapaxes(np.asarray(acc)[:kept], 0, 1)
            done += BLOCK
        jax.block_until_ready(states)
        cost[phase] = PhaseCost(per_sweep * done, time.perf_counter() - start, per_sweep * done / max(source.n, 1))
    records = nuts_records(accepted, np.full(accepted.shape, passes_per_sweep(problem.layout)), source.n)
    return routed_result(model, kernel, records, "group_gibbs", source.n, cost["sampling"].seconds), cost


def gibbs_fit(
    model: Model,
    data: Any,
    theta0: jax.Array,
    reason: str,
    num_samples: int,
    num_chains: int,
    key: jax.Array,
    run: RunOptions,
    temperature: float,
) -> tuple[SampleResult, Warmup]:
    """``auto_sample`` routed here (one warning line): the run, and a ``Warmup`` whose ``cost`` holds the sweeps'
    ``adaptation`` and ``sampling`` and whose ``kind`` is ``"group_gibbs"``."""
    announce_gibbs(reason, run, temperature)
    result, cost = group_gibbs(model, data, theta0, num_samples=num_samples, num_chains=num_chains, key=key)
    return result, routed_warmup(theta0, result, cost, "group_gibbs", reason)
