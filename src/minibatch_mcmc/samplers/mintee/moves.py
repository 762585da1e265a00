"""MINTEE's moves on one chain: the local MINT move (``build_kernel``), the equi-energy jump, step-size
adaptation, ring insertion, and ``level_step`` that picks one of them per sweep.

The local move is the library's MH kernel (``build_kernel``) on ``minibatch_target``, chain ``k``'s
truncated tempered target restricted to one keyed minibatch of ``m_k`` points: a Langevin proposal
(``tempered_langevin``, traced step size) with its gradient on that minibatch and the Metropolis test
on it at temperature ``T_k m_k / n``, which is MINT's decision. A full-data chain's minibatch is all
``n`` points, where this is the exact Metropolis test at ``T_k``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.exact import MetropolisTest
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import permuted_index
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.langevin import tempered_langevin
from minibatch_mcmc.samplers.kernel import build_kernel
from minibatch_mcmc.samplers.mintee.config import MOVE_EE, MOVE_IDLE, MOVE_MH, energy_ring_index
from minibatch_mcmc.samplers.mintee.state import Buffers, Chain, Context, Level, Rings


def batch_loglik(ctx: Context, flat: jax.Array, keys: jax.Array, start: Any, count: Any, buf: int) -> jax.Array:
    """Sum of ``log p(x_i|theta)`` over positions ``start..start+count-1`` of the permutation keyed by ``keys``."""
    if buf >= ctx.n and not ctx.padded:
        return jnp.sum(ctx.model.log_lik(ctx.unravel(flat), ctx.data))  # all n points: no gather needed
    pos = jnp.arange(buf, dtype=jnp.int32)
    valid = pos < count
    idx = permuted_index(None, jnp.where(valid, start + pos, 0), ctx.n, keys)
    ll = ctx.model.log_lik(ctx.unravel(flat), take(ctx.data, idx))
    return jnp.sum(jnp.where(valid, ll, 0.0))


def keyed_batch(ctx: Context, keys: jax.Array, m: Any, buf: int) -> dict:
    """The first ``m`` points of the permutation keyed by ``keys`` as ``{"rows", "valid"}`` (``buf`` rows, padding invalid)."""
    if buf >= ctx.n and not ctx.padded:
        return {"rows": ctx.data, "valid": jnp.ones((ctx.n,), bool)}  # all n points: no gather needed
    pos = jnp.arange(buf, dtype=jnp.int32)
    valid = pos < m
    idx = permuted_index(None, jnp.where(valid, pos, 0), ctx.n, keys)
    return {"rows": take(ctx.data, idx), "valid": valid}


def batch_energy(model: Model, n: int, m: Any, batch: dict, theta: Any) -> jax.Array:
    """``h_B(theta) = -(n / m) sum_{i in B} log p(x_i|theta)`` on a keyed batch."""
    ll = jnp.where(batch["valid"], model.log_lik(theta, batch["rows"]), 0.0)
    return -(n / jnp.asarray(m, jnp.float32)) * jnp.sum(ll)


def minibatch_target(model: Model, n: int, m: Any, batch: dict, level: Any, temperature: Any) -> Model:
    """Chain ``k``'s target on one fixed minibatch ``B``, as a model over the rows of ``B`` (masked where padded).

    Run at temperature ``T_k m / n``, its likelihood part is ``exp(-h_B / T_k)``; its "prior" is
    ``p0`` times the truncation ``exp(-(H_k - h_B)^+ / T_k)``, fixed data within one step, so the MH
    ratio is ``pi_k``'s with both energies on ``B``: ``exp(-(h_B ∨ H_k) / T_k)``. The truncation carries
    no gradient: the Langevin drift follows the untruncated tempered posterior.
    """

    def log_prior(theta: Any) -> jax.Array:
        excess = jnp.maximum(level - batch_energy(model, n, m, batch, theta), 0.0)
        return model.log_prior(theta) - jax.lax.stop_gradient(excess) / temperature

    def log_lik(theta: Any, rows: dict) -> jax.Array:
        return jnp.where(rows["valid"], model.log_lik(theta, rows["rows"]), 0.0)

    return Model(log_prior=log_prior, log_lik=log_lik, name=f"{model.name}_minibatch_target")


def local_move(ctx: Context, key: jax.Array, lv: Level, ch: Chain, buf: int) -> tuple[Chain, jax.Array, jax.Array]:
    """MINT step on ``pi_k``: ``build_kernel``'s Langevin-MH transition with gradient and test on one minibatch of ``m_k``.

    The kernel runs the exact Metropolis test on the minibatch ``B`` at temperature ``T_k m_k / n``,
    which is MINT's plug-in decision ``(n / m_k) sum_B l_i / T_k + psi``; the new state's energy is
    re-evaluated on ``B`` (its keys are kept for the EE jump). Returns the chain, the decision and ``m_k``.
    """
    k_b, k_mh, _ = jax.random.split(key, 3)
    keys = jax.random.bits(k_b, (4,), jnp.uint32)
    batch = keyed_batch(ctx, keys, lv.m, buf)
    target = minibatch_target(ctx.model, ctx.n, lv.m, batch, lv.level, lv.temperature)
    proposal = tempered_langevin(target.log_prior, jnp.exp(ch.log_step), 0)
    rows = batch["valid"].shape[0]
    kernel = build_kernel(target, proposal, MetropolisTest(), rows)
    temperature = jnp.asarray(lv.temperature, jnp.float32) * jnp.asarray(lv.m, jnp.float32) / ctx.n
    state, outcome = kernel.step(k_mh, kernel.init(ctx.unravel(ch.theta)), batch, temperature)
    energy = batch_energy(ctx.model, ctx.n, lv.m, batch, state.position)
    new = ch._replace(theta=ravel_pytree(state.position)[0], energy=energy.astype(jnp.float32), batch_keys=keys)
    return new, outcome.accepted, jnp.asarray(lv.m, jnp.int32)


def ee_jump(
    ctx: Context, key: jax.Array, lv: Level, ch: Chain, upper: Rings, ring: jax.Array, bufs: Buffers
) -> tuple[Chain, jax.Array, jax.Array]:
    """EE jump: a uniform state of the upper chain's matching ring, energy refined to ``m_k`` points.

    ``paired``: the current state is evaluated on the same ``m_k`` points (and the same first
    ``m_{k+1}``), so both energy differences in the ratio are same-minibatch differences, as in
    MINT's local step; otherwise the current state's cached estimate is used (Algorithm 2 as written).
    """
    n, cap = ctx.n, ctx.ring_capacity
    k_j, k_u = jax.random.split(key)
    filled = jnp.clip(jnp.minimum(upper.count[ring], cap), 1, cap)
    j = jax.random.randint(k_j, (), 0, filled)
    theta_p, h_up, keys_p = upper.position[ring, j], upper.energy[ring, j], upper.keys[ring, j]
    e_k = e_up = ch.energy
    m_k = jnp.asarray(lv.m, jnp.float32)
    m_up = jnp.asarray(lv.m_up, jnp.float32)
    if bufs.full_cold:  # chain 0 on all n points: the refined energy is the full-data energy (the cached one is exact)
        h_k = -batch_loglik(ctx, theta_p, keys_p, 0, n, n)
        used = jnp.asarray(n, jnp.int32)
        if ctx.paired:
            e_up = -(n / m_up) * batch_loglik(ctx, ch.theta, keys_p, 0, lv.m_up, bufs.upper)
            used = used + jnp.asarray(lv.m_up, jnp.int32)
    elif bufs.extra == 0:  # same batch size above and here (full-data EE): energies are exact already
        h_k, used = h_up, jnp.zeros((), jnp.int32)
    else:
        s_up = -h_up * m_up / n
        s_extra = batch_loglik(ctx, theta_p, keys_p, lv.m_up, lv.m - lv.m_up, bufs.extra)
        h_k = -(n / m_k) * (s_up + s_extra)
        used = jnp.asarray(lv.m - lv.m_up, jnp.int32)
        if ctx.paired:
            c_up = batch_loglik(ctx, ch.theta, keys_p, 0, lv.m_up, bufs.upper)
            c_extra = batch_loglik(ctx, ch.theta, keys_p, lv.m_up, lv.m - lv.m_up, bufs.extra)
            e_k, e_up = -(n / m_k) * (c_up + c_extra), -(n / m_up) * c_up
            used = used + jnp.asarray(lv.m, jnp.int32)
    log_r = (
        -(jnp.maximum(h_k, lv.level) - jnp.maximum(e_k, lv.level)) / lv.temperature
        + (jnp.maximum(h_up, lv.level_up) - jnp.maximum(e_up, lv.level_up)) / lv.temperature_up
    )
    u = jax.random.uniform(k_u, (), jnp.float32, minval=1e-12)
    acc = (jnp.log(u) < log_r) & jnp.isfinite(log_r)
    fresh = (
        ctx.paired and not bufs.full_cold and bufs.extra != 0
    )  # the current state's energy was re-estimated on keys_p
    new = ch._replace(
        theta=jnp.where(acc, theta_p, ch.theta),
        energy=jnp.where(acc, h_k, e_k),
        batch_keys=keys_p if fresh else jnp.where(acc, keys_p, ch.batch_keys),
    )
    return new, acc, used


def adapt_step(ctx: Context, ch: Chain, acc: jax.Array, local: jax.Array, adapting: jax.Array) -> Chain:
    """Count local moves during burn-in; after each window move the step towards the acceptance band."""
    lo, hi = ctx.accept_band
    count = local & adapting
    tries = ch.tries + count.astype(jnp.int32)
    accepts = ch.accepts + (count & acc).astype(jnp.int32)
    full = tries >= ctx.adapt_window
    rate = accepts / jnp.maximum(tries, 1)
    up = jnp.where(rate > 0.5 * (1.0 + hi), math.log(2.0), math.log(1.3))
    down = jnp.where(rate < 0.5 * lo, -math.log(2.0), -math.log(1.3))
    delta = jnp.where(rate < lo, down, jnp.where(rate > hi, up, 0.0))
    return ch._replace(
        log_step=jnp.where(full, ch.log_step + delta, ch.log_step),
        tries=jnp.where(full, 0, tries),
        accepts=jnp.where(full, 0, accepts),
    )


def level_step(
    ctx: Context, key: jax.Array, t: jax.Array, lv: Level, ch: Chain, upper: Rings | None, bufs: Buffers
) -> tuple[Chain, dict, jax.Array]:
    """One sweep of one chain: idle before its start, else an EE jump or a local move, then adaptation.

    Returns the chain, its record of the sweep and whether its state joins its rings (after burn-in).
    """
    k_c, k_mh, k_ee = jax.random.split(key, 3)
    age = t - lv.start
    active = (age >= 0) & (t < ctx.total)
    ring = energy_ring_index(ch.energy, ctx.levels)
    if upper is None:
        do_ee = jnp.zeros((), bool)
    else:
        avail = upper.count[ring] > 0
        do_ee = lv.has_upper & avail & (jax.random.uniform(k_c, ()) < ctx.p_ee)
    mode = jnp.where(active, jnp.where(do_ee, MOVE_EE, MOVE_MH), MOVE_IDLE).astype(jnp.int32)

    def idle(_):
        return ch, jnp.zeros((), bool), jnp.zeros((), jnp.int32)

    def local(_):
        return local_move(ctx, k_mh, lv, ch, bufs.batch)

    branches = [idle, local]
    if upper is not None:
        branches.append(lambda _: ee_jump(ctx, k_ee, lv, ch, upper, ring, bufs))
    new, acc, used = jax.lax.switch(jnp.minimum(mode, len(branches) - 1), branches, None)
    new = adapt_step(ctx, new, acc, mode == MOVE_MH, age < ctx.burn_in)
    record = {
        "accepted": acc,
        "move": mode.astype(jnp.int8),
        "data_used": used,
        "energy": new.energy,
        "ring_index": energy_ring_index(new.energy, ctx.levels).astype(jnp.int8),
        "step_size": jnp.exp(new.log_step),
    }
    return new, record, active & (age >= ctx.burn_in)


def ring_insert(ctx: Context, key: jax.Array, rings: Rings, ch: Chain, add: jax.Array) -> Rings:
    """Reservoir-insert the chain's current state into its ring ``I(h)`` (kept uniform over all added)."""
    cap = ctx.ring_capacity
    i = energy_ring_index(ch.energy, ctx.levels)
    cnt = rings.count[i]
    r = jax.random.randint(key, (), 0, jnp.maximum(cnt, 0) + 1)
    slot = jnp.where(cnt < cap, cnt, r)
    write = add & (slot < cap)
    slot = jnp.minimum(slot, cap - 1)
    return Rings(
        position=rings.position.at[i, slot].set(jnp.where(write, ch.theta, rings.position[i, slot])),
        energy=rings.energy.at[i, slot].set(jnp.where(write, ch.energy, rings.energy[i, slot])),
        keys=rings.keys.at[i, slot].set(jnp.where(write, ch.batch_keys, rings.keys[i, slot])),
        count=rings.count.at[i].add(add.astype(jnp.int32)),
    )
