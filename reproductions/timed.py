"""Timing for the experiments: timed chains and tests by epsilon for the risk-vs-wall-clock ones (Korattikara et al. 4.2.2-4.2.3)."""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest, austere_mh, mh_minibatch
from minibatch_mcmc.samplers.driver import make_block_runner
from minibatch_mcmc.samplers.kernel import build_kernel

Result = TypeVar("Result")


def epsilon_tests(epsilons: Sequence[float], batch_size: int, with_mhminibatch: bool) -> dict:
    """Acceptance tests by label: exact MH for ``epsilon = 0``, AustereMH(c) otherwise, optionally MHminibatch."""
    tests = {f"eps={e:g}": MetropolisTest() if e == 0 else austere_mh(batch_size, float(e)) for e in epsilons}
    if with_mhminibatch:
        tests["MHminibatch"] = mh_minibatch(batch_size)
    return tests


class TimedRun(NamedTuple):
    """Draws of ``R`` vmapped chains with the wall-clock time at which each draw was finished (compilation excluded)."""

    positions: object
    """Pytree of ``(R, T, ...)`` draws."""
    records: dict
    """Per-step records ``(R, T)`` (``accepted``, ``batch_size``, ...)."""
    times: np.ndarray
    """``(R, T)`` cumulative seconds of each chain, linear within each block of steps."""


def timed_sample(
    model,
    data,
    start,
    proposal,
    test,
    num_samples: int,
    chains: int,
    key: int,
    time_budget: float | None = None,
    block: int = 250,
) -> TimedRun:
    """Run ``chains`` chains one after another with the library's jitted block runner, timing every block.

    Each chain stops after ``num_samples`` steps or once its clock passes ``time_budget`` seconds; all
    chains are then cut to the shortest one.

    The runner is compiled once (a warm-up block whose output is discarded) and reused for every chain,
    so the clock excludes compilation; chains run separately because under ``vmap`` a minibatch test's
    loop would run until the chain needing the most data is done.
    """
    n = jax.tree_util.tree_leaves(data)[0].shape[0]
    kernel = build_kernel(model, proposal, test, n)
    init = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], start)
    run_block = make_block_runner(kernel, 1)
    block = min(block, num_samples)
    temps = jnp.ones(block, jnp.float32)
    state0 = jax.jit(jax.vmap(kernel.init))(init)
    jax.block_until_ready(run_block(jax.random.key(key), state0, data, jnp.arange(block, dtype=jnp.int32), temps))
    all_pos, all_recs, all_times = [], [], []
    for c in range(chains):
        base = jax.random.fold_in(jax.random.key(key), c)
        states, pos, recs, times, done, clock = state0, [], [], [], 0, 0.0
        while done < num_samples and (time_budget is None or clock < time_budget):
            steps = jnp.arange(done, done + block, dtype=jnp.int32)
            t0 = time.perf_counter()
            states, p, r = jax.block_until_ready(run_block(base, states, data, steps, temps))
            dt = time.perf_counter() - t0
            length = min(block, num_samples - done)
            times.append(clock + dt * np.arange(1, length + 1) / block)
            clock += dt * length / block
            pos.append(jax.tree_util.tree_map(lambda a: np.asarray(a)[:length, 0], p))
            recs.append({k: np.asarray(v)[:length, 0] for k, v in r.items()})
            done += length
        if any(np.any(r["nonfinite"]) for r in recs):
            raise FloatingPointError(f"non-finite log-likelihood ratio in chain {c}")
        all_pos.append(jax.tree_util.tree_map(lambda *a: np.concatenate(a, 0), *pos))
        all_recs.append({k: np.concatenate([r[k] for r in recs]) for k in recs[0] if k != "nonfinite"})
        all_times.append(np.concatenate(times))
    t = min(len(x) for x in all_times)
    return TimedRun(
        positions=jax.tree_util.tree_map(lambda *a: np.stack([x[:t] for x in a]), *all_pos),
        records={k: np.stack([r[k][:t] for r in all_recs]) for k in all_recs[0]},
        times=np.stack([x[:t] for x in all_times]),
    )


def wall_clock(fn: Callable[..., Result], *args, **kwargs) -> tuple[Result, float]:
    """``fn(*args, **kwargs)`` and the wall-clock seconds it took."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - t0
