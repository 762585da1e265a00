"""MINTEE (Li and Wong, Section 5.2 and Appendix D, Algorithm 2): the equi-energy sampler on a ladder of MINT chains.

``mintee(...)`` runs ``sweep.py``'s sweep on the library's one loop (``scaled_runner.scan_steps``: sweep ``t`` of
level ``j`` has the key ``sample`` gives step ``t`` of chain ``j``) in jitted blocks until chain 0 has its draws, and
gathers them (as a ``SampleResult``) with every chain's per-sweep records.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.keys import as_key, setup_keys
from minibatch_mcmc.samplers.mintee.config import MOVE_EE, MINTEEConfig, resolve_ladder
from minibatch_mcmc.samplers.mintee.state import Context, MINTEEResult, MINTEEState
from minibatch_mcmc.samplers.mintee.sweep import make_sweep
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.scaled_runner import scan_steps

PyTree = Any


def mintee(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    config: MINTEEConfig,
    *,
    num_samples: int,
    key: int | jax.Array = 0,
    block_size: int = 2000,
    keep_all_chains: bool = False,
    progress: bool = False,
) -> MINTEEResult:
    """Run MINTEE until chain 0 has ``num_samples`` post-burn-in draws; returns draws, records and the ladder."""
    num_samples = check_int(num_samples, "num_samples", 1)
    block_size = check_int(block_size, "block_size", 1)
    source = as_data_source(data)
    n = source.n
    arrays = source.arrays()
    ladder = resolve_ladder(n, config)
    flat0, unravel = ravel_pytree(initial_position)
    flat0 = jnp.asarray(flat0, jnp.float32)
    if not np.isfinite(float(model.log_prior(unravel(flat0)))):
        raise ValueError("the initial position has log prior -inf or nan; start inside the prior's support")
    total = (config.num_chains - 1) * config.stagger + config.burn_in + num_samples
    ctx = Context(
        model=model,
        data=arrays,
        n=n,
        unravel=unravel,
        levels=jnp.asarray(ladder.energy_levels, jnp.float32),
        ring_capacity=int(config.ring_capacity),
        p_ee=float(config.p_ee),
        accept_band=(float(config.accept_band[0]), float(config.accept_band[1])),
        adapt_window=int(config.adapt_window),
        burn_in=int(config.burn_in),
        total=total,
        paired=config.ee_energy == "paired",
        padded=config.layout == "padded",
    )
    init, sweep, starts = make_sweep(ctx, ladder, float(config.initial_step), int(config.stagger))
    base = as_key(key)
    k_init, k_run = setup_keys(base)
    n_blocks = -(-total // block_size)
    length = -(-total // n_blocks)

    def emit(st: MINTEEState, rec: dict) -> dict:
        return {"records": rec, "lowest": st.position[0], **({"all": st.position} if keep_all_chains else {})}

    @jax.jit
    def run_block(state: MINTEEState, t0: jax.Array):
        steps = t0 + jnp.arange(length, dtype=jnp.int32)
        state, out, _ = scan_steps(
            lambda t, keys, st, data, temp, carry: sweep(st, keys, t),
            k_run,
            len(ladder.batch_sizes),
            state,
            (),
            steps,
            jnp.zeros(length, jnp.float32),
            emit=emit,
        )
        return state, out

    t_compile = time.perf_counter()
    state = jax.jit(init)(k_init, flat0)
    compiled = run_block.lower(state, jnp.int32(0)).compile()
    compile_time = time.perf_counter() - t_compile
    t_start = time.perf_counter()
    outs = []
    for b in range(n_blocks):
        state, out = compiled(state, jnp.int32(b * length))
        outs.append(jax.device_get(out))
        if progress:
            print(
                f"mintee: sweep {min((b + 1) * length, total)}/{total} at {time.perf_counter() - t_start:.1f} s",
                flush=True,
            )
    wall = time.perf_counter() - t_start
    cat = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, axis=0)[:total], *outs)
    records = {f: np.asarray(v).T for f, v in cat["records"].items()}
    first = starts[0] + config.burn_in
    lowest_flat = cat["lowest"][first:]
    positions = jax.vmap(unravel)(jnp.asarray(lowest_flat))
    positions = jax.tree_util.tree_map(lambda a: np.asarray(a)[None], positions)
    sweep_data = records["data_used"].sum(axis=0)[first:]
    lowest_records = {
        "accepted": records["accepted"][0, first:][None],
        "batch_size": records["data_used"][0, first:][None].astype(np.int32),
        "hidden_data": (sweep_data - records["data_used"][0, first:])[None].astype(np.int32),
        "s2": np.zeros((1, num_samples), np.float32),
        "residual_sd": np.zeros((1, num_samples), np.float32),
        "epsilon": np.zeros((1, num_samples), np.float32),
        "pvalue_threshold": np.zeros((1, num_samples), np.float32),
        "half_width": np.zeros((1, num_samples), np.float32),
        "expected_batch_size": np.zeros((1, num_samples), np.float32),
        "fallback": np.zeros((1, num_samples), bool),
        "bound_exceeded": np.zeros((1, num_samples), bool),
        "delta_star": np.full((1, num_samples), np.nan, np.float32),
        "move": records["move"][0, first:][None],
        "ee_attempted": (records["move"][0, first:] == MOVE_EE)[None],
        "ring_index": records["ring_index"][0, first:][None],
        "energy": records["energy"][0, first:][None],
    }
    lowest = SampleResult(
        positions=positions,
        records=lowest_records,
        method="mintee" if not config.full_data else "ee_full_data",
        n_data=n,
        temperature=np.full(num_samples, ladder.temperatures[0]),
        wall_time=wall + compile_time,
    )
    all_positions = None
    if keep_all_chains:
        flat_all = np.swapaxes(cat["all"], 0, 1)
        all_positions = jax.tree_util.tree_map(np.asarray, jax.vmap(jax.vmap(unravel))(jnp.asarray(flat_all)))
    return MINTEEResult(
        lowest=lowest,
        records=records,
        ladder=ladder,
        starts=tuple(starts),
        burn_in=int(config.burn_in),
        ring_count=np.asarray(state.ring_count),
        all_positions=all_positions,
        wall_time=wall,
        compile_time=compile_time,
    )
