"""Measured sampling efficiency of a kernel from a short vmapped run: effective draws per draw and per second.

Used by the warm-up to choose a proposal by what it delivers rather than by an acceptance target. The
effective draws per draw are estimated from lag-1 autocorrelations, pooled over chains, as for an AR(1)
chain: ``(1 - rho) / (1 + rho)``, the minimum over every coordinate of ``theta`` and of its squared deviation
(an anti-correlated move flatters the first and not the second). Short runs make this a ranking, not a
precise ESS.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int
from minibatch_mcmc.samplers.kernel import Kernel, build_kernel
from minibatch_mcmc.samplers.keys import as_run_key, setup_keys
from minibatch_mcmc.samplers.scaled_runner import make_scaled_runner, scale_array
from minibatch_mcmc.warmup.context import WarmupContext
from minibatch_mcmc.warmup.laplace_moves import proposal_for

PyTree = Any


class Efficiency(NamedTuple):
    """What a short run of a kernel delivered."""

    ess_per_draw: float
    """``min (1 - rho) / (1 + rho)`` over coordinates and their squared deviations (lag-1, pooled over chains)."""
    seconds_per_draw: float
    """Wall seconds per draw of one chain, compilation excluded (all chains advance together)."""
    acceptance: float
    """Acceptance rate of the run."""
    data_used: int
    """Data points read by the run's tests and gradients."""

    @property
    def ess_per_second(self) -> float:
        """Effective draws per second of one chain."""
        return self.ess_per_draw / max(self.seconds_per_draw, 1e-12)


def lag1_ess_per_draw(draws: np.ndarray) -> float:
    """``min (1 - rho) / (1 + rho)`` over the columns of ``draws`` (chain, draw, d) and their squared deviations."""
    x = np.asarray(draws, np.float64)
    centred = x - x.mean(axis=(0, 1))
    sq = centred**2
    worst = 1.0
    for y in (centred, sq - sq.mean(axis=(0, 1))):
        num = np.sum(y[:, 1:] * y[:, :-1], axis=(0, 1))
        den = np.sum(y * y, axis=(0, 1))
        rho = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)
        rho = np.clip(rho, -0.99, 0.999)
        worst = min(worst, float(np.min((1.0 - rho) / (1.0 + rho))))
    return worst


def measure_efficiency(
    kernel: Kernel, data: PyTree, starts: PyTree, key: jax.Array, num_steps: int = 200, temperature: float = 1.0
) -> Efficiency:
    """Run ``num_steps`` steps of ``kernel`` from the batched ``starts`` (one chain each) and measure its efficiency.

    The run is the block runner's (``scaled_runner``): step ``t`` of chain ``c`` has the key ``sample`` gives it.
    """
    num_steps = check_int(num_steps, "num_steps", 3)
    states = jax.jit(jax.vmap(kernel.init))(starts)
    chains = jax.tree_util.tree_leaves(starts)[0].shape[0]
    dtype = ravel_pytree(jax.tree_util.tree_map(lambda a: a[0], starts))[0].dtype
    steps, temps = np.arange(num_steps, dtype=np.int32), np.full(num_steps, temperature, dtype)
    runner = make_scaled_runner(lambda scale: kernel, chains, chunk=num_steps)
    args = (as_run_key(key, chains), states, data, steps, temps, scale_array(1.0, starts))
    compiled = runner.run_block.lower(*args).compile()
    t0 = time.perf_counter()
    _, positions, recs = jax.block_until_ready(compiled(*args))
    seconds = time.perf_counter() - t0
    leaves = [np.asarray(a).reshape(num_steps, chains, -1) for a in jax.tree_util.tree_leaves(positions)]
    used = np.asarray(recs["batch_size"], np.int64) + np.asarray(recs["hidden_data"], np.int64)
    return Efficiency(
        ess_per_draw=lag1_ess_per_draw(np.swapaxes(np.concatenate(leaves, axis=-1), 0, 1)),
        seconds_per_draw=seconds / num_steps,
        acceptance=float(np.mean(np.asarray(recs["accepted"]))),
        data_used=int(np.sum(used)),
    )


def most_efficient(
    kernels: dict[str, Kernel],
    data: PyTree,
    centre: PyTree,
    chol: np.ndarray,
    key: jax.Array,
    temperature: float = 1.0,
    num_chains: int = 8,
) -> tuple[str, int, float]:
    """The name of the kernel with the most effective draws per second from ``num_chains`` starts drawn from
    ``N(centre, chol chol')``, with the data read and seconds spent measuring them all."""
    t0 = time.perf_counter()
    flat, unravel = ravel_pytree(centre)
    k_start, k_run = setup_keys(key)
    z = np.asarray(jax.random.normal(k_start, (num_chains, flat.size)), np.float64)
    starts = jax.vmap(unravel)(jnp.asarray(np.asarray(flat, np.float64) + z @ np.asarray(chol).T, flat.dtype))
    found = {name: measure_efficiency(k, data, starts, k_run, temperature=temperature) for name, k in kernels.items()}
    best = max(found, key=lambda k: found[k].ess_per_second)
    return best, sum(f.data_used for f in found.values()), time.perf_counter() - t0


def choose_by_efficiency(
    ctx: WarmupContext, chol: np.ndarray, centre: PyTree, key: jax.Array, candidates: tuple[str, ...]
) -> tuple[str, int]:
    """The kind of ``candidates`` with the most effective draws per second, from 8 Laplace-drawn starts, and the rows read."""
    kernels = {
        k: build_kernel(
            ctx.model,
            proposal_for(k, ctx.estimator, ctx.model, chol, ctx.temperature, ctx.rule)(1.0),
            ctx.test,
            ctx.source.n,
            ctx.estimator,
        )
        for k in candidates
    }
    best, data, _ = most_efficient(kernels, ctx.source.arrays(), centre, chol, key, ctx.temperature)
    return best, data
