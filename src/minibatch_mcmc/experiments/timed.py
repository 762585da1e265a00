"""Shared pieces of the risk-vs-wall-clock experiments (Korattikara et al. 4.2.2-4.2.3): timed chains and tests by epsilon."""

from __future__ import annotations

import argparse
import time
from typing import NamedTuple, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest, austere_mh, mh_minibatch
from minibatch_mcmc.samplers.driver import make_block_runner
from minibatch_mcmc.samplers.kernel import build_kernel


Config = TypeVar("Config", bound=tuple)


def epsilon_tests(epsilons: Sequence[float], batch_size: int, with_mhminibatch: bool) -> dict:
    """Acceptance tests by label: exact MH for ``epsilon = 0``, AustereMH(c) otherwise, optionally MHminibatch."""
    tests = {f"eps={e:g}": MetropolisTest() if e == 0 else austere_mh(batch_size, float(e)) for e in epsilons}
    if with_mhminibatch:
        tests["MHminibatch"] = mh_minibatch(batch_size)
    return tests


def add_common_options(parser: argparse.ArgumentParser, full_help: str, budget_default: float) -> None:
    """The options every risk-vs-time experiment has: ``--full``, ``--time-budget``, ``--epsilons``, ``--batch-size``, ..."""
    parser.add_argument("--full", action="store_true", help=full_help)
    parser.add_argument("--time-budget", type=float, help=f"wall-clock seconds per chain for each test (default {budget_default:g})")
    parser.add_argument("--epsilons", type=str, help="comma-separated AustereMH epsilons; 0 is exact MH")
    parser.add_argument("--batch-size", type=int, help="AustereMH / MHminibatch minibatch size m")
    parser.add_argument("--reference-samples", type=int, help="steps per chain of the exact reference run")
    parser.add_argument("--help-experiment", action="help", help="show this experiment's options")


def apply_common_options(cfg: Config, args: argparse.Namespace, own: argparse.Namespace, full: dict, quick: dict, extra: dict) -> Config:
    """``cfg`` with ``--full`` / ``--quick`` presets, then every option given (positive), then ``--epsilons``."""
    if own.full:
        cfg = cfg._replace(**full)
    if args.quick:
        cfg = cfg._replace(**quick)
    repl = {"batch_size": own.batch_size, "reference_samples": own.reference_samples, "max_samples": args.num_samples,
            "chains": args.trials, "time_budget": own.time_budget, **extra}
    bad = {k: v for k, v in repl.items() if v is not None and not v > 0}
    if bad:
        raise ValueError(f"settings must be positive; got {', '.join(f'{k}={v}' for k, v in bad.items())}")
    cfg = cfg._replace(**{k: v for k, v in repl.items() if v is not None})
    if own.epsilons:
        cfg = cfg._replace(epsilons=parse_epsilons(own.epsilons))
    return cfg


def parse_epsilons(text: str) -> tuple[float, ...]:
    """Comma-separated AustereMH error levels in ``[0, 1)`` (0 is exact MH), e.g. ``"0,0.05,0.1"``."""
    eps = tuple(float(e) for e in text.split(","))
    if any(not (0 <= e < 1) for e in eps):
        raise ValueError(f"--epsilons {text!r}: each epsilon must be in [0, 1) (0 is exact MH)")
    return eps


class TimedRun(NamedTuple):
    """Draws of ``R`` vmapped chains with the wall-clock time at which each draw was finished (compilation excluded)."""

    positions: object
    """Pytree of ``(R, T, ...)`` draws."""
    records: dict
    """Per-step records ``(R, T)`` (``accepted``, ``batch_size``, ...)."""
    times: np.ndarray
    """``(R, T)`` cumulative seconds of each chain, linear within each block of steps."""


def timed_sample(
    model, data, start, proposal, test, num_samples: int, chains: int, key: int, time_budget: float | None = None, block: int = 250
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
    state0 = jax.vmap(kernel.init)(init)
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


