"""Chain-steps per second of vmapped MHminibatch chains on the d=784 logistic model, on any JAX device.

Runs on whatever ``jax.devices()`` offers (CPU here; a GPU after ``pip install -e '.[cuda]'``).
Each configuration runs ``C`` chains of MHminibatch (random-walk proposal, initial minibatch ``m``,
corrected Barker test) vmapped inside a jitted ``lax.scan`` of ``S`` steps; the data set (``N``
synthetic rows of d=784 features) stays on the device. After one compile-and-run call, the scan
is timed ``--repeats`` times and the best time is reported as chain-steps per second
(``C * S / seconds``), with the mean minibatch size and acceptance rate of the timed steps. With
``--max-vmap B`` the chains are processed ``B`` at a time (``lax.map(..., batch_size=B)``) to bound
the memory of the gathered minibatches (``C x m x 784`` floats per growth round).

    .venv/bin/python benchmarks/gpu_chains.py                       # 1, 1024, 65536 chains
    .venv/bin/python benchmarks/gpu_chains.py --chains 1 64 1024 --steps 200 --n 20000   # CPU-sized
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel

D = 784


def chain_runner(kernel, data, steps: int, chains: int, temperature: float, max_vmap: int):
    """A jitted scan of ``steps`` MHminibatch steps of ``chains`` chains; returns states and per-step stats."""
    temp = jnp.float32(temperature)

    def one(args):
        key, state = args
        return kernel.step(key, state, data, temp)

    def step_all(states, keys):
        if max_vmap and max_vmap < chains:
            return jax.lax.map(one, (keys, states), batch_size=max_vmap)
        return jax.vmap(one)((keys, states))

    @jax.jit
    def run(states, key):
        def body(st, k):
            st, out = step_all(st, jax.random.split(k, chains))
            return st, (jnp.mean(out.batch_size.astype(jnp.float32)), jnp.mean(out.accepted.astype(jnp.float32)))

        st, (bs, acc) = jax.lax.scan(body, states, jax.random.split(key, steps))
        return st, jnp.mean(bs), jnp.mean(acc)

    return run


def time_config(kernel, data, chains: int, steps: int, args) -> tuple[float, float, float, float]:
    """Compile time, best seconds per scan, mean batch and acceptance for one chain count."""
    run = chain_runner(kernel, data, steps, chains, args.temperature, args.max_vmap)
    states = jax.vmap(kernel.init)(jnp.zeros((chains, D), jnp.float32))
    t0 = time.perf_counter()
    states, bs, acc = jax.block_until_ready(run(states, jax.random.key(1)))
    first = time.perf_counter() - t0
    times = []
    for r in range(args.repeats):
        t0 = time.perf_counter()
        states, bs, acc = jax.block_until_ready(run(states, jax.random.key(2 + r)))
        times.append(time.perf_counter() - t0)
    best = min(times)
    return max(first - best, 0.0), best, float(bs), float(acc)


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 1024, 65536])
    ap.add_argument("--n", type=int, default=20_000, help="number of data rows N (with K=100 and s.d. 0.002 the minibatch seldom grows)")
    ap.add_argument("--m", type=int, default=100, help="initial minibatch size m")
    ap.add_argument("--steps", type=int, default=1000, help="scan length for one chain (fewer for many chains)")
    ap.add_argument("--min-chain-steps", type=int, default=2_000_000,
                    help="with many chains, steps = max(--min-steps, min(--steps, this / chains))")
    ap.add_argument("--min-steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.002, help="random-walk s.d. per coordinate")
    ap.add_argument("--temperature", type=float, default=100.0)
    ap.add_argument("--max-vmap", type=int, default=0, help="process chains this many at a time (0: all at once)")
    args = ap.parse_args()
    for name in ("n", "m", "steps", "repeats", "min_steps", "min_chain_steps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} must be a positive integer")
    if any(c < 1 for c in args.chains):
        raise ValueError(f"--chains {args.chains} must all be positive integers")

    dev = jax.devices()[0]
    model = logistic_regression()
    data, _ = make_logistic_data(jax.random.key(0), args.n, D)
    kernel = build_kernel(model, random_walk(scale=args.scale), mh_minibatch(args.m, sigma=1.0), args.n)
    print(
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {dev.platform}:{dev.device_kind}, "
        f"jax {jax.__version__}"
    )
    print(f"MHminibatch, logistic regression d={D}, N={args.n:,}, m={args.m}, random walk s.d. {args.scale}, K={args.temperature:g}")
    print(f"{'chains':>7} {'steps':>6} {'compile s':>10} {'best s':>9} {'chain-steps/s':>14} {'us/step':>10} {'mean batch':>11} {'accept':>7}")
    for chains in args.chains:
        steps = max(args.min_steps, min(args.steps, args.min_chain_steps // chains))
        compile_s, best, bs, acc = time_config(kernel, data, chains, steps, args)
        rate = chains * steps / best
        print(f"{chains:>7} {steps:>6} {compile_s:>10.2f} {best:>9.3f} {rate:>14.4g} {1e6 * best / steps:>10.1f} {bs:>11.1f} {acc:>7.3f}")


if __name__ == "__main__":
    main()
