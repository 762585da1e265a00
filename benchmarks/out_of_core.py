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
memory (``VmHWM`` of ``/proc/self/status``: the high-water mark of its resident set, which counts the mapped
file pages the process touched; not ``ru_maxrss``, which in a child started by ``subprocess`` can report
the parent's peak, inherited through ``vfork``/``exec``).

With ``--generate-big ROWS`` the script first writes that file itself (``python -m
minibatch_mcmc.data.generate --format npy`` in a child process, timed, with its peak memory), with
``--baseline-rows R`` it runs part 2 again on an ``R``-row file (the memory of JAX and the model
alone), and with ``--delete-big`` it removes the generated files afterwards.

    .venv/bin/python benchmarks/out_of_core.py [--rows 2000000] [--chains 1 8] [--steps 400 200] \
        [--big /tmp/ooc-big --generate-big 100000000 --baseline-rows 200000 --delete-big] [--results FILE]

``--results FILE`` writes the tables ``out_of_core_chains{C}`` (part 1, one per chain count) and
``out_of_core_big`` (part 2), and the figures the docs quote in prose (``out_of_core.*``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.data import open_npy, open_parquet, prefetch
from minibatch_mcmc.data.generate import write_npy, write_parquet
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel, prefetch_plan

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


def part1(args, chains: int, steps: int) -> tuple[dict, dict]:
    """Steps/s per source at a size that fits in memory: the table ``out_of_core_chains{chains}`` and its prose values."""
    root = ensure_data(Path(args.workdir), args.rows)
    theta = np.load(root / "npy" / "theta.npy")
    n, m = args.rows, args.batch
    st = chain_settings(n, theta)
    positions = jnp.broadcast_to(st["start"], (chains, D))
    key = jax.random.key(args.seed)
    run = make_runner(n, steps, chains, m, st["scale"], st["temperature"])
    paths = {"x": root / "npy" / "x.npy", "y": root / "npy" / "y.npy"}
    memmap = open_npy(paths, check_finite=False)
    parquet = open_parquet(root / "parquet", check_finite=False)
    plan = prefetch_plan(mh_minibatch(m), key, steps, chains, n)
    sources = {
        "in-memory": {"x": jnp.asarray(np.load(paths["x"])), "y": jnp.asarray(np.load(paths["y"]))},
        "memmap (.npy)": memmap,
        "memmap + prefetch": prefetch(memmap, plan, depth=args.depth),
        "Parquet (16k-row groups, all cached)": parquet,
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
    print(
        f"\nN={n} rows x d={D} float32, MHminibatch m={m} sigma=0.5, K=N/100, {chains} chain(s), {steps} steps, best of {args.repeats}"
    )
    best = {name: min(t) for name, t in times.items()}
    return part1_results(n, chains, steps, best, bsize, hits)


def part1_results(
    n: int, chains: int, steps: int, best: dict[str, float], batch: dict[str, float], hits: dict[str, tuple[int, int]]
) -> tuple[dict, dict]:
    """Table ``out_of_core_chains{chains}`` (steps/s, time over in-memory, mean batch, prefetch hits) and the values."""
    base = best["in-memory"]
    label = f"source (N = {n:,}, {chains} chain{'s' if chains > 1 else ''}, {steps} steps)"
    rows = []
    for name, t in best.items():
        h = f"{hits[name][0]}/{hits[name][1]}" if name in hits else "-"
        rows.append([name, f"{steps / t:,.0f}", f"{t / base:.2f}x", f"{batch[name]:.1f}", h])
    tab = table([label, "steps/s", "time vs in-memory", "mean batch", "prefetch hits"], rows)
    print_table(tab)
    print("all sources gave identical draws")
    slug = {
        "in-memory": "memory",
        "memmap (.npy)": "memmap",
        "memmap + prefetch": "memmap_prefetch",
        "Parquet (16k-row groups, all cached)": "parquet",
        "Parquet + prefetch": "parquet_prefetch",
    }
    values = {}
    for name, t in best.items():
        key = f"out_of_core.c{chains}.{slug.get(name, name)}"
        values[f"{key}_ratio"] = f"{t / base:.1f}"
        values[f"{key}_ms_per_step"] = f"{1e3 * t / steps:.2g}"
        if name in hits:
            values[f"{key}_hits"] = f"{hits[name][0]}/{hits[name][1]}"
    if "Parquet + prefetch" in best:
        values[f"out_of_core.c{chains}.parquet_prefetch_gain"] = (
            f"{best['Parquet (16k-row groups, all cached)'] / best['Parquet + prefetch']:.1f}"
        )
    return {f"out_of_core_chains{chains}": tab}, values


def print_table(tab: dict) -> None:
    """Print a results table with fixed-width columns (first column left-aligned)."""
    rows = [tab["columns"], *tab["rows"]]
    widths = [max(len(r[j]) for r in rows) for j in range(len(tab["columns"]))]
    for r in rows:
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))


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
    hwm_open = proc_status().get("VmHWM", math.nan)
    theta = np.load(path / "theta.npy")
    st = chain_settings(src.n, theta)
    t0 = time.perf_counter()
    res = sample(
        logistic_regression(1.0),
        src,
        st["start"],
        proposal=random_walk(st["scale"]),
        test=mh_minibatch(m, sigma=0.5),
        num_samples=steps,
        num_chains=chains,
        key=0,
        progress=False,
        block_size=max(1, steps // 4),
        temperature=st["temperature"],
    )
    t_run = time.perf_counter() - t0
    status = proc_status()
    print(
        json.dumps(
            {
                "status_mb": status,
                "n": src.n,
                "open_and_scan_s": t_open,
                "sample_s": t_run,
                "steps": steps,
                "mean_batch": float(res.records["batch_size"].mean()),
                "accept": float(res.records["accepted"].mean()),
                "peak_after_scan_mb": hwm_open,
                "peak_mb": status.get("VmHWM", math.nan),
                "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "file_gb": sum(os.path.getsize(path / f) for f in ("x.npy", "y.npy")) / 2**30,
            }
        )
    )


def child_run(path: Path, args) -> dict:
    """Part 2 on the file under ``path`` in a fresh process: timings, mean batch and peak memory."""
    cmd = [
        sys.executable,
        __file__,
        "--big-child",
        str(path),
        "--big-steps",
        str(args.big_steps),
        "--batch",
        str(args.batch),
    ]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])


def generate(path: Path, rows: int) -> dict:
    """Write a ``rows`` x 10 ``.npy`` data set under ``path`` in a child process: seconds and the child's peak memory."""
    cmd = [
        sys.executable,
        "-c",
        GENERATE_CHILD,
        "--rows",
        str(rows),
        "--dim",
        str(D),
        "--format",
        "npy",
        "--out",
        str(path),
    ]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return {"seconds": time.perf_counter() - t0, "peak_mb": float(out)}


def proc_status() -> dict[str, float]:
    """Peak and current resident memory of this process in MiB (``VmHWM``, ``RssAnon``, ``RssFile``; Linux only)."""
    path = Path("/proc/self/status")
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        key, _, val = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmHWM"):
            out[key] = int(val.split()[0]) / 1024
    return out


GENERATE_CHILD = (
    "import sys; from minibatch_mcmc.data.generate import main; main(sys.argv[1:]); "
    "print([int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
)
"""Child process that writes the data set and prints its own peak memory."""


def part2(args) -> tuple[dict, dict]:
    """Peak resident memory of an MHminibatch run on the big file, in a fresh process: table ``out_of_core_big`` and values."""
    big = Path(args.big)
    gen = generate(big, args.generate_big) if args.generate_big else None
    r = child_run(big, args)
    base = None
    if args.baseline_rows:
        small = big.parent / f"{big.name}-baseline-{args.baseline_rows}"
        generate(small, args.baseline_rows)
        base = child_run(small, args)
        shutil.rmtree(small)
    if args.delete_big and args.generate_big:
        shutil.rmtree(big)
    tab, values = part2_results(r, gen, base, args.baseline_rows)
    print()
    print_table(tab)
    return {"out_of_core_big": tab}, values


def part2_results(r: dict, gen: dict | None, base: dict | None, baseline_rows: int | None) -> tuple[dict, dict]:
    """The big-file table (generation, open + scan, ``sample()``, peak memory, baseline) and its prose values."""
    rows = []
    if gen:
        rows.append(
            [
                f"generate (chunks of 2^20 rows, child process; generator peak resident memory {gen['peak_mb']:.0f} MiB)",
                f"{gen['seconds']:.0f} s",
            ]
        )
    rows.append(
        [
            "`open_npy` incl. streaming NaN/inf scan of all rows (pread, 2^18-row blocks)",
            f"{r['open_and_scan_s']:.1f} s",
        ]
    )
    rows.append(
        [
            f"`sample()`: {r['steps']} MHminibatch steps, compile included (mean batch {r['mean_batch']:.1f}, accept {r['accept']:.2f})",
            f"{r['sample_s']:.0f} s",
        ]
    )
    rows.append(["**peak resident memory of the process (`VmHWM`)**", f"**{r['peak_mb']:.0f} MiB**"])
    s = r.get("status_mb") or {}
    if s:
        rows.append(
            [
                "at the end: anonymous / file-backed resident memory",
                f"{s.get('RssAnon', 0):.0f} / {s.get('RssFile', 0):.0f} MiB",
            ]
        )
    values = {
        "out_of_core.big_rows": f"{r['n']:,}",
        "out_of_core.big_gib": f"{r['file_gb']:.2f}",
        "out_of_core.big_peak_mib": f"{r['peak_mb']:.0f}",
        "out_of_core.big_open_s": f"{r['open_and_scan_s']:.1f}",
        "out_of_core.big_sample_s": f"{r['sample_s']:.0f}",
    }
    if gen:
        values["out_of_core.big_generate_s"] = f"{gen['seconds']:.0f}"
    if base:
        rows.append([f"same run on a {baseline_rows:,}-row file (JAX + model baseline)", f"{base['peak_mb']:.0f} MiB"])
        values["out_of_core.baseline_peak_mib"] = f"{base['peak_mb']:.0f}"
        values["out_of_core.big_over_baseline_mib"] = f"{r['peak_mb'] - base['peak_mb']:.0f}"
    label = f"{r['n']:,} rows x {D} float32 ({r['file_gb']:.2f} GiB on disk), memory-mapped"
    return table([label, "measured"], rows), values


def main() -> None:
    """Parse arguments, print the tables and write the results file."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--chains", type=int, nargs="+", default=[1], help="part 1 chain counts (one table each)")
    p.add_argument(
        "--steps", type=int, nargs="+", default=[400], help="part 1 steps, one per chain count (or one for all)"
    )
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--depth", type=int, default=8, help="prefetch depth (steps read ahead)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="/tmp/minibatch-mcmc-ooc")
    p.add_argument("--big", default=None, help="directory with x.npy/y.npy/theta.npy of a large data set")
    p.add_argument(
        "--generate-big", type=int, default=None, metavar="ROWS", help="write a ROWS-row data set to --big first"
    )
    p.add_argument(
        "--baseline-rows", type=int, default=None, help="also run part 2 on a file of this many rows (baseline memory)"
    )
    p.add_argument("--delete-big", action="store_true", help="delete the data set written by --generate-big afterwards")
    p.add_argument("--big-steps", type=int, default=1000)
    p.add_argument("--big-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--skip-part1", action="store_true")
    add_results_option(p)
    args = p.parse_args()
    if args.big_child:
        big_child(Path(args.big_child), args.big_steps, args.batch, 1)
        return
    if len(args.steps) not in (1, len(args.chains)):
        raise ValueError(f"--steps {args.steps}: give one value, or one per --chains {args.chains}")
    if (args.generate_big or args.baseline_rows) and not args.big:
        raise ValueError("--generate-big and --baseline-rows need --big DIR (where to write the data set)")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()}), jax {jax.__version__} on {jax.default_backend()}"
    )
    tables, values = {}, {}
    if not args.skip_part1:
        for chains, steps in zip(args.chains, args.steps * len(args.chains) if len(args.steps) == 1 else args.steps):
            t, v = part1(args, chains, steps)
            tables.update(t)
            values.update(v)
    if args.big:
        t, v = part2(args)
        tables.update(t)
        values.update(v)
    save(args.results, "out_of_core", config=args, tables=tables, values=values, extra={"cpu": cpu_model()})


if __name__ == "__main__":
    main()
