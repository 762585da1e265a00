"""One MINTEE sweep over the ladder, in either layout, and the initial ladder state.

``"loop"`` unrolls the levels in Python inside the jitted sweep (from the hottest chain down, as in
Algorithm 2), each with its own static minibatch size, so a sweep evaluates ``sum_k m_k`` points;
``"padded"`` vmaps ``level_step`` over the ladder with every minibatch padded (and masked) to
``max_k m_k``, so a sweep evaluates ``K max_k m_k`` points.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.samplers.keys import split_step
from minibatch_mcmc.samplers.mintee.config import Ladder
from minibatch_mcmc.samplers.mintee.moves import batch_loglik, level_step, ring_insert
from minibatch_mcmc.samplers.mintee.state import (
    Buffers,
    Context,
    Level,
    MINTEEState,
    Rings,
    chain_of,
    put_chain,
    rings_of,
)


class Sweep(NamedTuple):
    """``init(key, theta0) -> state`` and ``sweep(state, keys, t) -> (state, records)`` (one key per chain: sweep ``t``'s
    ``keys.step_keys``), and each chain's first sweep."""

    init: Callable[[jax.Array, jax.Array], MINTEEState]
    sweep: Callable[[MINTEEState, jax.Array, jax.Array], tuple[MINTEEState, dict]]
    starts: tuple[int, ...]


def chain_starts(num_chains: int, stagger: int) -> tuple[int, ...]:
    """First sweep of each chain: chain ``k+1`` starts ``stagger`` sweeps before chain ``k``."""
    return tuple((num_chains - 1 - j) * int(stagger) for j in range(num_chains))


def level_params(ladder: Ladder, starts: tuple[int, ...], j: int) -> Level:
    """Chain ``j``'s batch size, temperature and level, and those of the chain above it."""
    k_chains = len(ladder.batch_sizes)
    m_all = ladder.batch_sizes
    up = j + 1 < k_chains
    return Level(
        m=m_all[j],
        temperature=float(ladder.temperatures[j]),
        level=float(ladder.energy_levels[j]),
        m_up=m_all[j + 1] if up else m_all[j],
        temperature_up=float(ladder.temperatures[j + 1]) if up else 1.0,
        level_up=float(ladder.energy_levels[j + 1]) if up else 0.0,
        has_upper=up,
        start=starts[j],
    )


def level_buffers(ladder: Ladder, n: int, j: int) -> Buffers:
    """Chain ``j``'s exact minibatch buffers (loop layout)."""
    m_all = ladder.batch_sizes
    up = j + 1 < len(m_all)
    full_cold = m_all[j] >= n and (not up or m_all[j + 1] < n)
    return Buffers(m_all[j], (m_all[j] - m_all[j + 1]) if up else 0, full_cold, m_all[j + 1] if up else 0)


def padded_buffers(ladder: Ladder) -> Buffers:
    """The buffers every chain shares in the padded layout: the ladder's largest."""
    m_all = ladder.batch_sizes
    extra_max = max([m_all[j] - m_all[j + 1] for j in range(len(m_all) - 1)] + [1])
    return Buffers(max(m_all), extra_max, False, max(m_all))


def move_and_ring_keys(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Each chain's sweep key split (``keys.split_step``) into its move's key and its ring insertion's key."""
    return jax.vmap(split_step)(keys)


def sweep_loop(
    ctx: Context, ladder: Ladder, starts: tuple[int, ...], state: MINTEEState, keys: jax.Array, t: jax.Array
):
    """One sweep, levels unrolled from the hottest chain down (Algorithm 2)."""
    k_chains = len(ladder.batch_sizes)
    k_move, k_ring = move_and_ring_keys(keys)
    recs = [None] * k_chains
    for j in reversed(range(k_chains)):
        up = j + 1 < k_chains
        upper = rings_of(state, j + 1) if up else None
        lv, bufs = level_params(ladder, starts, j), level_buffers(ladder, ctx.n, j)
        ch, recs[j], add = level_step(ctx, k_move[j], t, lv, chain_of(state, j), upper, bufs)
        rings = ring_insert(ctx, k_ring[j], rings_of(state, j), ch, add) if j > 0 else None
        state = put_chain(state, j, ch, rings)
    records = {f: jnp.stack([r[f] for r in recs]) for f in recs[0]}
    return state, records


def stacked_levels(ladder: Ladder, starts: tuple[int, ...]) -> Level:
    """Every chain's ``Level`` as arrays with a leading chain axis (padded layout)."""
    params = [level_params(ladder, starts, j) for j in range(len(ladder.batch_sizes))]
    stacked = Level(*(jnp.asarray([p[i] for p in params]) for i in range(len(Level._fields))))
    return stacked._replace(
        temperature=stacked.temperature.astype(jnp.float32),
        level=stacked.level.astype(jnp.float32),
        temperature_up=stacked.temperature_up.astype(jnp.float32),
        level_up=stacked.level_up.astype(jnp.float32),
    )


def sweep_padded(
    ctx: Context, ladder: Ladder, starts: tuple[int, ...], state: MINTEEState, keys: jax.Array, t: jax.Array
):
    """One sweep, ``level_step`` vmapped over the chains with minibatches padded to ``max_k m_k``."""
    k_chains = len(ladder.batch_sizes)
    k_move, k_ring = move_and_ring_keys(keys)
    shift = jnp.minimum(jnp.arange(k_chains) + 1, k_chains - 1)
    uppers = Rings(
        state.ring_position[shift], state.ring_energy[shift], state.ring_keys[shift], state.ring_count[shift]
    )
    bufs = padded_buffers(ladder)
    step = jax.vmap(lambda k, lv, ch, up: level_step(ctx, k, t, lv, ch, up, bufs))
    chs, records, add = step(k_move, stacked_levels(ladder, starts), chain_of(state, slice(None)), uppers)
    rings = jax.vmap(lambda k, r, c, a: ring_insert(ctx, k, r, c, a))(k_ring, rings_of(state, slice(None)), chs, add)
    state = MINTEEState(chs.theta, chs.energy, chs.batch_keys, chs.log_step, chs.tries, chs.accepts, *rings)
    return state, records


def init_state(ctx: Context, ladder: Ladder, initial_step: float, key: jax.Array, theta0: jax.Array) -> MINTEEState:
    """Every chain at ``theta0`` with its energy on a fresh minibatch, step ``epsilon_0^2 T_k`` and empty rings."""
    k_chains, d, cap = len(ladder.batch_sizes), theta0.shape[0], ctx.ring_capacity
    m_all = ladder.batch_sizes
    energies, bkeys = [], []
    for j in range(k_chains):
        kj = jax.random.bits(jax.random.fold_in(key, j), (4,), jnp.uint32)
        energies.append(
            -(ctx.n / m_all[j]) * batch_loglik(ctx, theta0, kj, 0, m_all[j], max(m_all) if ctx.padded else m_all[j])
        )
        bkeys.append(kj)
    temps = jnp.asarray(ladder.temperatures, jnp.float32)
    return MINTEEState(
        position=jnp.broadcast_to(theta0, (k_chains, d)),
        energy=jnp.stack(energies).astype(jnp.float32),
        batch_keys=jnp.stack(bkeys),
        log_step=jnp.log(jnp.float32(initial_step) ** 2 * temps),
        tries=jnp.zeros(k_chains, jnp.int32),
        accepts=jnp.zeros(k_chains, jnp.int32),
        ring_position=jnp.zeros((k_chains, k_chains, cap, d), jnp.float32),
        ring_energy=jnp.zeros((k_chains, k_chains, cap), jnp.float32),
        ring_keys=jnp.zeros((k_chains, k_chains, cap, 4), jnp.uint32),
        ring_count=jnp.zeros((k_chains, k_chains), jnp.int32),
    )


def make_sweep(ctx: Context, ladder: Ladder, initial_step: float, stagger: int) -> Sweep:
    """The run's ``init`` and ``sweep`` functions for the context's layout."""
    starts = chain_starts(len(ladder.batch_sizes), stagger)
    sweep = sweep_padded if ctx.padded else sweep_loop
    return Sweep(
        init=lambda key, theta0: init_state(ctx, ladder, initial_step, key, theta0),
        sweep=lambda state, keys, t: sweep(ctx, ladder, starts, state, keys, t),
        starts=starts,
    )
