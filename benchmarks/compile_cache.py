"""A first fit in a new process, with JAX's persistent compilation cache cold and then warm (issue 33's target:
the warm fit's total at most 40% of the cold one's).

For each N: one fresh subprocess fits ``first_fit.py``'s logistic regression (10 covariates, NumPyro model,
``from_numpyro`` then ``auto_sample``, 4 chains x ``--draws``) with the cache pointed at an empty directory
(``MINIBATCH_MCMC_COMPILATION_CACHE``), then ``--warm`` more fresh subprocesses fit it again on that filled cache.
Each reports its seconds per phase (conversion, the warm-up's phases, sampling, the post-sampling check, and the rest),
the fit's total (``from_numpyro`` to the draws; the data simulated before the clock starts) in wall-clock seconds and
in CPU seconds of the process (user + system: on a shared machine the wall clock measures the other jobs too, the CPU
seconds much less so), the process's wall time (Python, JAX and NumPyro imports included), and what JAX compiled:
programs compiled or read from the cache (``backend_compile`` events, all and distinct function names), cache hits,
and seconds spent tracing, lowering and compiling (or reading from the cache). ``--cache off`` runs the same processes with the cache turned off
(each is then a cold fit).

    .venv/bin/python benchmarks/compile_cache.py --n 100000 1000000 [--results docs/results/compile_cache.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

PROCESS_START = time.perf_counter()
HERE = Path(__file__).resolve().parent
COLUMNS = [
    "N",
    "cache",
    "fit s",
    "x cold",
    "process s",
    "CPU s",
    "CPU x cold",
    "conversion",
    "warm-up",
    "sampling",
    "check",
    "rest",
    "programs",
    "distinct",
    "cache hits",
    "trace s",
    "lower s",
    "compile s",
    "phases",
]
EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}


def child(n: int, draws: int, chains: int) -> dict:
    """One fit in this process: seconds by phase and what JAX compiled."""
    import jax
    from jax import monitoring

    seconds, programs, hits = Counter(), Counter(), Counter()

    def on_duration(event: str, duration: float, fun_name: str = "?", **_) -> None:
        if event in EVENTS:
            seconds[EVENTS[event]] += duration
            if EVENTS[event] == "compile":
                programs[fun_name] += 1

    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(lambda event, **_: hits.update([event.rsplit("/", 1)[-1]]))
    sys.path.insert(0, str(HERE))
    from first_fit import logistic, make_data

    from minibatch_mcmc.interop import from_numpyro
    from minibatch_mcmc.warmup import auto_sample

    data = make_data("logistic", n)
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    conv = from_numpyro(logistic, *data)
    converted = time.perf_counter()
    res, w = auto_sample(conv.model, conv.data, conv.init, num_samples=draws, num_chains=chains, key=1, progress=False)
    jax.block_until_ready(res.positions)
    end = time.perf_counter()
    phases = {k: c.seconds for k, c in w.cost.items()}
    warm = sum(v for k, v in phases.items() if k not in ("sampling", "check"))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    return {
        "fit": end - start,
        "process": end - PROCESS_START,
        "cpu": cpu,
        "process_cpu": usage.ru_utime + usage.ru_stime,
        "conversion": converted - start,
        "warmup": warm,
        "sampling": phases.get("sampling", res.wall_time),
        "check": phases.get("check", 0.0),
        "rest": end - converted - sum(phases.values()),
        "phases": {k: round(c.seconds, 2) for k, c in w.cost.items()},
        "programs": sum(programs.values()),
        "distinct": len(programs),
        "by_name": dict(programs.most_common()),
        "cache_hits": hits["cache_hits"],
        "cache_misses": hits["cache_misses"],
        **{k: seconds[k] for k in ("trace", "lower", "compile")},
        "cache_dir": jax.config.jax_compilation_cache_dir,
    }


def run_child(n: int, draws: int, chains: int, cache: str) -> dict:
    """``child`` in a fresh Python process with the cache setting ``cache`` (a directory, or ``off``)."""
    env = {**os.environ, "MINIBATCH_MCMC_COMPILATION_CACHE": cache}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(n), "--draws", str(draws), "--chains", str(chains)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(n: int, label: str, r: dict, cold: dict) -> list[str]:
    """One table row (``cold``: the cold fit of the same N)."""
    phases = ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
    return [
        f"{n:.0e}",
        label,
        f"{r['fit']:.1f}",
        f"{r['fit'] / cold['fit']:.2f}",
        f"{r['process']:.1f}",
        f"{r['cpu']:.1f}",
        f"{r['cpu'] / cold['cpu']:.2f}",
        f"{r['conversion']:.1f}",
        f"{r['warmup']:.1f}",
        f"{r['sampling']:.1f}",
        f"{r['check']:.1f}",
        f"{r['rest']:.1f}",
        str(r["programs"]),
        str(r["distinct"]),
        str(r["cache_hits"]),
        f"{r['trace']:.1f}",
        f"{r['lower']:.1f}",
        f"{r['compile']:.1f}",
        phases,
    ]


def main() -> None:
    """Cold then warm fits in fresh processes for every N; print and save the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warm", type=int, default=2, help="warm-cache fits per N, each in a new process")
    ap.add_argument("--cache", choices=["on", "off"], default="on", help="off: every process with the cache turned off")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--name", default="compile_cache")
    from bench_results import add_results_option, save, table

    add_results_option(ap)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.draws, args.chains)))
        return
    print(f"load average at start {os.getloadavg()}", flush=True)
    rows, values, runs = [], {}, {}
    for n in args.n:
        with tempfile.TemporaryDirectory(prefix="mm-compile-cache-") as tmp:
            cache = tmp if args.cache == "on" else "off"
            cold = run_child(n, args.draws, args.chains, cache)
            runs[f"{n}.cold"] = cold
            rows.append(row(n, "cold" if args.cache == "on" else "off", cold, cold))
            print(" | ".join(rows[-1]), flush=True)
            for i in range(args.warm):
                warm = run_child(n, args.draws, args.chains, cache)
                runs[f"{n}.warm{i}"] = warm
                rows.append(row(n, f"warm {i + 1}" if args.cache == "on" else "off", warm, cold))
                print(" | ".join(rows[-1]), flush=True)
            warms = [runs[f"{n}.warm{i}"] for i in range(args.warm)]
            best = min(warms, key=lambda r: r["fit"]) if warms else {"fit": float("nan"), "cpu": float("nan")}
            for key, field in (("", "fit"), ("cpu_", "cpu")):
                values[f"{args.name}.{n}.cold_{key}s"] = f"{cold[field]:.1f}"
                values[f"{args.name}.{n}.warm_{key}s"] = f"{best[field]:.1f}"
                values[f"{args.name}.{n}.{key}warm_over_cold"] = f"{best[field] / cold[field]:.2f}"
            values[f"{args.name}.{n}.programs"] = str(cold["programs"])
            values[f"{args.name}.{n}.distinct"] = str(cold["distinct"])
    print(f"load average at end {os.getloadavg()}")
    save(
        args.results,
        args.name,
        config=args,
        tables={args.name: table(COLUMNS, rows)},
        values=values,
        extra={"fits": runs, "load_average_end": os.getloadavg()},
    )


if __name__ == "__main__":
    main()
