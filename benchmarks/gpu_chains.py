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

``--results FILE`` writes the table (named after the file: ``gpu_chains_cpu.json`` -> table
``gpu_chains_cpu``) and, per chain count ``C``, the values ``NAME.rate_C`` (chain-steps/s) and
``NAME.speedup_C`` (chain-steps/s over that of the first chain count).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel

D = 784
COLUMNS = ["chains", "steps", "compile s", "best s", "chain-steps/s", "us/step", "mean batch", "accept"]


def result_row(chains: int, steps: int, compile_s: float, best: float, batch: float, accept: float) -> list[str]:
    """One formatted row of the table (``us/step`` is one scan step of all chains together)."""
    rate = chains * steps / best
    return [
        str(chains),
        str(steps),
        f"{compile_s:.2f}",
        f"{best:.3f}",
        f"{rate:,.0f}",
        f"{1e6 * best / steps:,.1f}",
        f"{batch:.1f}",
        f"{accept:.3f}",
    ]


def results_values(name: str, rows: list[list[str]]) -> dict[str, str]:
    """Chain-steps/s per chain count and its ratio to the first row's (``NAME.rate_C``, ``NAME.speedup_C``)."""
    rate = {r[0]: float(r[4].replace(",", "")) for r in rows}
    first = rate[rows[0][0]] if rows else 1.0
    out = {f"{name}.rate_{c}": f"{v:,.0f}" for c, v in rate.items()}
    out.update({f"{name}.speedup_{c}": f"{v / first:.2f}" for c, v in rate.items()})
    return out


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
    ap.add_argument(
        "--n",
        type=int,
        default=20_000,
        help="number of data rows N (with K=100 and s.d. 0.002 the minibatch seldom grows)",
    )
    ap.add_argument("--m", type=int, default=100, help="initial minibatch size m")
    ap.add_argument("--steps", type=int, default=1000, help="scan length for one chain (fewer for many chains)")
    ap.add_argument(
        "--min-chain-steps",
        type=int,
        default=2_000_000,
        help="with many chains, steps = max(--min-steps, min(--steps, this / chains))",
    )
    ap.add_argument("--min-steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.002, help="random-walk s.d. per coordinate")
    ap.add_argument("--temperature", type=float, default=100.0)
    ap.add_argument("--max-vmap", type=int, default=0, help="process chains this many at a time (0: all at once)")
    add_results_option(ap)
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
        f"jax {jax.__version__}, matmul precision {jax.config.jax_default_matmul_precision or 'default'}"
    )
    print(
        f"MHminibatch, logistic regression d={D}, N={args.n:,}, m={args.m}, random walk s.d. {args.scale}, K={args.temperature:g}"
    )
    widths = [7, 6, 10, 9, 14, 12, 11, 7]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows = []
    for chains in args.chains:
        steps = max(args.min_steps, min(args.steps, args.min_chain_steps // chains))
        rows.append(result_row(chains, steps, *time_config(kernel, data, chains, steps, args)))
        print(" ".join(c.rjust(w) for c, w in zip(rows[-1], widths)), flush=True)
    if args.results:
        name = Path(args.results).stem.replace("-", "_")
        save(
            args.results,
            name,
            config=args,
            tables={name: table(COLUMNS, rows)},
            values=results_values(name, rows),
            extra={"device": f"{jax.device_count()} x {dev.platform}:{dev.device_kind}"},
        )


if __name__ == "__main__":
    main()
