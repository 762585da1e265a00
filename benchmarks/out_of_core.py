"""MHminibatch steps/s on in-memory, memory-mapped and Parquet data, and peak memory on a 10^8-row file.

Part 1 (a size that fits in memory, ``--rows``): a d=10 logistic-regression data set is generated once
under ``--workdir`` (``.npy`` and Parquet shards), then the same MHminibatch chain (same key, same
draws) runs on each source: in-memory arrays, ``open_npy`` (memory map), ``open_parquet``, and the
two out-of-core ones again with ``prefetch`` (rows of the next steps' first chunks read ahead by a
background thread). Each row is timed after a warm-up call of the same jitted ``lax.scan`` runner
(compile excluded), with the driver's key schedule so the prefetch plan matches. Sources are timed
alternately, ``--repeats`` times; the table gives the best time of each and its ratio to in-memory.

Part 2 (``--big DIR`` holding ``x.npy``/``y.npy``, e.g. 10^8 rows written by
``python -m minibatch_mcmc.data.generate``): a child process opens the memory-mapped file (streaming
NaN scan included), runs ``minibatch_mcmc.sample`` with MHminibatch and prints its peak resident
memory (``ru_maxrss``, which counts the mapped file pages the process touched).

    .venv/bin/python benchmarks/out_of_core.py [--rows 2000000] [--steps 400] [--big /tmp/ooc-1e8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.data import open_npy, open_parquet, prefetch
from minibatch_mcmc.data.generate import write_npy, write_parquet
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel, mhminibatch_plan

D = 10


def ensure_data(workdir: Path, rows: int) -> Path:
    """Generate (or reuse) the npy and Parquet versions of a ``rows`` x 10 logistic data set."""
    out = workdir / f"logistic-{rows}"
    if not (out / "npy" / "y.npy").exists():
        write_npy(out / "npy", rows, D, seed=0)
    if not (out / "parquet" / "part-00000.parquet").exists():
        write_parquet(out / "parquet", rows, D, seed=0, rows_per_shard=1 << 20, row_group=1 << 14)
    return out


def chain_settings(n: int, theta: np.ndarray) -> dict:
    """Start at the true weights; temperature ``K = N / 100`` and a 0.02 random walk keep the minibatch near ``m``.

    The benchmark measures the cost of reading rows, so the chain is set up (as in ``step_cost.py``)
    for a test that rarely grows its minibatch; the mean batch size is printed.
    """
    return {"scale": 0.02, "temperature": n / 100.0, "start": jnp.asarray(theta)}


def make_runner(n: int, steps: int, chains: int, m: int, scale: float, temperature: float):
    """A jitted scan of ``steps`` MHminibatch steps with the driver's key schedule; returns mean batch size."""
    kernel = build_kernel(logistic_regression(1.0), random_walk(scale=scale), mh_minibatch(m, sigma=0.5), n)

    @jax.jit
    def run(base_key, positions, data):
        states = jax.vmap(kernel.init)(positions)

        def body(st, t):
            keys = jax.random.split(jax.random.fold_in(base_key, t), chains)
            st, out = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(keys, st, data, jnp.float32(temperature))
            return st, out.batch_size

        st, bs = jax.lax.scan(body, states, jnp.arange(steps, dtype=jnp.int32))
        return st.position, jnp.mean(bs.astype(jnp.float32))

    return run


def part1(args) -> None:
    """Steps/s per source at a size that fits in memory."""
    root = ensure_data(Path(args.workdir), args.rows)
    theta = np.load(root / "npy" / "theta.npy")
    n, m, chains, steps = args.rows, args.batch, args.chains, args.steps
    st = chain_settings(n, theta)
    positions = jnp.broadcast_to(st["start"], (chains, D))
    key = jax.random.key(args.seed)
    run = make_runner(n, steps, chains, m, st["scale"], st["temperature"])
    paths = {"x": root / "npy" / "x.npy", "y": root / "npy" / "y.npy"}
    memmap = open_npy(paths, check_finite=False)
    parquet = open_parquet(root / "parquet", check_finite=False)
    plan = mhminibatch_plan(key, steps, chains, m, n)
    sources = {
        "in-memory": {"x": jnp.asarray(np.load(paths["x"])), "y": jnp.asarray(np.load(paths["y"]))},
        "memmap (.npy)": memmap,
        "memmap + prefetch": prefetch(memmap, plan, depth=args.depth),
        "Parquet (16k-row groups)": parquet,
        "Parquet + prefetch": prefetch(parquet, plan, depth=args.depth),
    }
    bases = {"memmap + prefetch", "Parquet + prefetch"}
    times: dict[str, list[float]] = {k: [] for k in sources}
    ref, bsize, hits = None, {}, {}
    for rep in range(args.repeats + 1):
        for name, src in sources.items():
            if name in bases:  # read ahead from step 0 again (same source object: no recompile)
                src.reader.reset()
            t0 = time.perf_counter()
            pos, mean_b = jax.block_until_ready(run(key, positions, src))
            dt = time.perf_counter() - t0
            if name in bases:
                hits[name] = (src.reader.hits, src.reader.hits + src.reader.misses)
            if rep:  # the first round compiles and warms the page cache
                times[name].append(dt)
            ref = np.asarray(pos) if ref is None else ref
            if not np.array_equal(np.asarray(pos), ref):
                raise AssertionError(f"{name}: draws differ from the in-memory run")
            bsize[name] = float(mean_b)
    for name in bases:
        sources[name].reader.close()
    base = min(times["in-memory"])
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}), jax {jax.__version__} on {jax.default_backend()}")
    print(f"N={n} rows x d={D} float32, MHminibatch m={m} sigma=0.5, K=N/100, {chains} chain(s), {steps} steps, best of {args.repeats}")
    print(f"{'source':28s} {'steps/s':>10s} {'time vs in-memory':>18s} {'mean batch':>11s} {'prefetch hits':>14s}")
    for name in sources:
        best = min(times[name])
        h = f"{hits[name][0]}/{hits[name][1]}" if name in hits else "-"
        print(f"{name:28s} {steps / best:10.1f} {best / base:17.2f}x {bsize[name]:11.1f} {h:>14s}")
    print("all sources gave identical draws")


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else the platform string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def big_child(path: Path, steps: int, m: int, chains: int) -> None:
    """Open a large memory-mapped file, run ``sample`` with MHminibatch, print timings and peak RSS as JSON."""
    from minibatch_mcmc import sample

    t0 = time.perf_counter()
    src = open_npy({"x": path / "x.npy", "y": path / "y.npy"})
    t_open = time.perf_counter() - t0
    rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    theta = np.load(path / "theta.npy")
    st = chain_settings(src.n, theta)
    t0 = time.perf_counter()
    res = sample(
        logistic_regression(1.0), src, st["start"], proposal=random_walk(st["scale"]), test=mh_minibatch(m, sigma=0.5),
        num_samples=steps, num_chains=chains, key=0, progress=False, block_size=max(1, steps // 4),
        temperature=st["temperature"],
    )
    t_run = time.perf_counter() - t0
    status = {}
    if Path("/proc/self/status").exists():  # Linux: split of the current resident set
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, val = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmHWM"):
                status[key] = int(val.split()[0]) / 1024
    print(json.dumps({
        "status_mb": status,
        "n": src.n, "open_and_scan_s": t_open, "sample_s": t_run, "steps": steps,
        "mean_batch": float(res.records["batch_size"].mean()), "accept": float(res.records["accepted"].mean()),
        "maxrss_after_scan_mb": rss_open / 1024, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "file_gb": sum(os.path.getsize(path / f) for f in ("x.npy", "y.npy")) / 2**30,
    }))


def part2(args) -> None:
    """Peak resident memory of an MHminibatch run on the big file, in a fresh process."""
    cmd = [sys.executable, __file__, "--big-child", args.big, "--steps", str(args.big_steps), "--batch", str(args.batch),
           "--chains", str(args.chains)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    r = json.loads(out)
    print(f"\nbig file: N={r['n']} rows x d={D} float32 ({r['file_gb']:.2f} GiB on disk), memory-mapped")
    print(f"{'open + streaming NaN scan':34s} {r['open_and_scan_s']:8.1f} s   peak RSS so far {r['maxrss_after_scan_mb']:8.0f} MiB")
    print(f"{'sample(): ' + str(r['steps']) + ' MHminibatch steps':34s} {r['sample_s']:8.1f} s   (compile included; "
          f"mean batch {r['mean_batch']:.1f}, accept {r['accept']:.2f})")
    print(f"{'peak resident memory (ru_maxrss)':34s} {r['maxrss_mb']:8.0f} MiB")
    if r["status_mb"]:
        s = r["status_mb"]
        print(f"{'at the end: anonymous / file-backed':34s} {s.get('RssAnon', 0):8.0f} / {s.get('RssFile', 0):.0f} MiB")


def main() -> None:
    """Parse arguments and print the tables."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--depth", type=int, default=8, help="prefetch depth (steps read ahead)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="/tmp/minibatch-mcmc-ooc")
    p.add_argument("--big", default=None, help="directory with x.npy/y.npy/theta.npy of a large data set")
    p.add_argument("--big-steps", type=int, default=1000)
    p.add_argument("--big-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--skip-part1", action="store_true")
    args = p.parse_args()
    if args.big_child:
        big_child(Path(args.big_child), args.steps, args.batch, args.chains)
        return
    if not args.skip_part1:
        part1(args)
    if args.big:
        part2(args)


if __name__ == "__main__":
    main()
