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

Each fit also reports the min bulk ESS of its draws (``first_fit.min_ess``) and ESS per second of the fit. With
``--hmcecs`` one more fresh process runs ``first_fit.py``'s HMCECS on the same data (its SVI MAP counted,
``--hmcecs-warmup`` + ``--hmcecs-draws`` steps, 4 chains) between the cold fit and the warm ones, so that the two
libraries' fits alternate and see the same load, and every fit's ESS/s is given as a multiple of HMCECS's
(issue 33: at least 30x with the cache warm, the cold figure beside it). ``--source npy`` writes the rows to ``.npy``
files (after the conversion; the writing's seconds left out of the fit's) and fits them out of core (``open_npy``).

    .venv/bin/python benchmarks/compile_cache.py --n 100000 1000000 [--hmcecs] [--results docs/results/compile_cache.json]
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
    "min ESS",
    "ESS/s",
    "x HMCECS",
    "x HMCECS CPU",
    "phases",
]
EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}


def to_disk(data: dict) -> tuple[object, float, float]:
    """``data`` written as ``.npy`` files to a temporary directory and opened out of core (``open_npy``): the source,
    and the wall and CPU seconds the writing took (left out of the fit's)."""
    import numpy as np

    from minibatch_mcmc.data.memmap import open_npy

    start, before = time.perf_counter(), time.process_time()
    folder = Path(tempfile.mkdtemp(prefix="mm-compile-cache-data-"))
    for name, leaf in data.items():
        np.save(folder / f"{name}.npy", np.asarray(leaf))
    written, cpu = time.perf_counter() - start, time.process_time() - before
    return open_npy({name: folder / f"{name}.npy" for name in data}), written, cpu


def child(n: int, draws: int, chains: int, source: str = "memory", test: str | None = None) -> dict:
    """One fit in this process (``source="npy"``: its rows read out of core from ``.npy`` files): seconds by phase
    and what JAX compiled."""
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
    from first_fit import logistic, make_data, min_ess, scalars

    from minibatch_mcmc.interop import from_numpyro
    from minibatch_mcmc.warmup import auto_sample

    data = make_data("logistic", n)
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    conv = from_numpyro(logistic, *data)
    converted = time.perf_counter()
    rows, written, written_cpu = (conv.data, 0.0, 0.0) if source == "memory" else to_disk(conv.data)
    res, w = auto_sample(
        conv.model, rows, conv.init, num_samples=draws, num_chains=chains, key=1, progress=False, test=test
    )
    jax.block_until_ready(res.positions)
    end = time.perf_counter() - written  # the files' writing left out
    phases = {k: c.seconds for k, c in w.cost.items()}
    warm = sum(v for k, v in phases.items() if k not in ("sampling", "check"))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime - written_cpu
    ess = min_ess(scalars({k: v for k, v in res.positions.items()}, sorted(res.positions)))
    return {
        "ess": ess,
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


def hmcecs_child(n: int, chains: int, warmup: int, draws: int) -> dict:
    """``first_fit.py``'s HMCECS (SVI MAP, Taylor proxy, NUTS inside) on the same data in this process."""
    sys.path.insert(0, str(HERE))
    from first_fit import logistic, make_data, min_ess, run_hmcecs, scalars

    data = make_data("logistic", n)
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    samples, seconds, split = run_hmcecs(logistic, data, chains, warmup, draws, 1000)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "fit": time.perf_counter() - start,
        "process": time.perf_counter() - PROCESS_START,
        "cpu": usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime,
        "ess": min_ess(scalars(samples, sorted(samples))),
        "split": split,
    }


def run_child(
    n: int,
    draws: int,
    chains: int,
    cache: str,
    hmcecs: tuple[int, int] | None = None,
    source: str = "memory",
    test: str | None = None,
) -> dict:
    """``child`` (or, given ``hmcecs=(warm-up, draws)``, ``hmcecs_child``) in a fresh Python process with the cache
    setting ``cache`` (a directory, or ``off``)."""
    env = {**os.environ, "MINIBATCH_MCMC_COMPILATION_CACHE": cache}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    extra = [] if hmcecs is None else ["--hmcecs-child", str(hmcecs[0]), str(hmcecs[1])]
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--draws",
            str(draws),
            "--chains",
            str(chains),
            "--source",
            source,
        ]
        + extra
        + ([] if test is None else ["--test", test]),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def hmcecs_row(n: int, r: dict) -> list[str]:
    """The HMCECS row: its seconds, CPU seconds, ESS and ESS/s (the columns of a fit's phases left empty)."""
    cells = {"N": f"{n:.0e}", "cache": "HMCECS", "fit s": f"{r['fit']:.1f}", "process s": f"{r['process']:.1f}"}
    cells |= {"CPU s": f"{r['cpu']:.1f}", "min ESS": f"{r['ess']:.0f}", "ESS/s": f"{r['ess'] / r['fit']:.1f}"}
    return [cells.get(c, "") for c in COLUMNS[:-1]] + [r["split"]]


def row(n: int, label: str, r: dict, cold: dict, hmcecs: dict | None = None) -> list[str]:
    """One table row (``cold``: the cold fit of the same N; ``hmcecs``: HMCECS's run, if any)."""
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
        f"{r['ess']:.0f}",
        f"{r['ess'] / r['fit']:.1f}",
        "" if hmcecs is None else f"{(r['ess'] / r['fit']) / (hmcecs['ess'] / hmcecs['fit']):.1f}",
        "" if hmcecs is None else f"{(r['ess'] / r['cpu']) / (hmcecs['ess'] / hmcecs['cpu']):.1f}",
        phases,
    ]


def summarise(runs: dict, ns: list[int], warm: int, name: str, cache: str) -> tuple[list, dict]:
    """The table's rows and the figures of the fits ``runs`` (``"{n}.cold"``, ``"{n}.warm{i}"``, ``"{n}.hmcecs"``)."""
    rows, values = [], {}
    for n in ns:
        hmcecs, cold = runs.get(f"{n}.hmcecs"), runs[f"{n}.cold"]
        if hmcecs is not None:
            rows.append(hmcecs_row(n, hmcecs))
        rows.append(row(n, "cold" if cache == "on" else "off", cold, cold, hmcecs))
        warms = [runs[f"{n}.warm{i}"] for i in range(warm)]
        rows += [row(n, f"warm {i + 1}" if cache == "on" else "off", r, cold, hmcecs) for i, r in enumerate(warms)]
        nan = float("nan")
        best = min(warms, key=lambda r: r["fit"]) if warms else {"fit": nan, "cpu": nan, "ess": nan}
        for key, field in (("", "fit"), ("cpu_", "cpu")):
            values[f"{name}.{n}.cold_{key}s"] = f"{cold[field]:.1f}"
            values[f"{name}.{n}.warm_{key}s"] = f"{best[field]:.1f}"
            values[f"{name}.{n}.{key}warm_over_cold"] = f"{best[field] / cold[field]:.2f}"
        if hmcecs is not None:
            values[f"{name}.{n}.hmcecs_s"] = f"{hmcecs['fit']:.1f}"
            values[f"{name}.{n}.hmcecs_cpu_s"] = f"{hmcecs['cpu']:.1f}"
            values[f"{name}.{n}.hmcecs_ess_per_s"] = f"{hmcecs['ess'] / hmcecs['fit']:.1f}"
            for label, r in (("cold", cold), ("warm", best)):
                values[f"{name}.{n}.{label}_x_hmcecs"] = f"{r['ess'] / r['fit'] / (hmcecs['ess'] / hmcecs['fit']):.1f}"
                values[f"{name}.{n}.{label}_x_hmcecs_cpu"] = (
                    f"{r['ess'] / r['cpu'] / (hmcecs['ess'] / hmcecs['cpu']):.1f}"
                )
        values[f"{name}.{n}.programs"] = str(cold["programs"])
        values[f"{name}.{n}.distinct"] = str(cold["distinct"])
        values[f"{name}.{n}.cold_cache_misses"] = str(cold.get("cache_misses", ""))
        values[f"{name}.{n}.warm_cache_misses"] = str(best.get("cache_misses", ""))
    return rows, values


def main() -> None:
    """Cold then warm fits in fresh processes for every N; print and save the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warm", type=int, default=2, help="warm-cache fits per N, each in a new process")
    ap.add_argument("--cache", choices=["on", "off"], default="on", help="off: every process with the cache turned off")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--hmcecs", action="store_true", help="also run HMCECS on the same data in a fresh process")
    ap.add_argument("--hmcecs-warmup", type=int, default=500)
    ap.add_argument("--hmcecs-draws", type=int, default=1000)
    ap.add_argument("--hmcecs-child", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--source", choices=["memory", "npy"], default="memory", help="npy: the rows read out of core from .npy files"
    )
    ap.add_argument("--test", default=None, help="auto_sample's test by name (default: its own)")
    ap.add_argument("--rescore", default=None, metavar="FILE", help="rebuild the tables of a saved results file")
    ap.add_argument("--name", default="compile_cache")
    from bench_results import add_results_option, save, table

    add_results_option(ap)
    args = ap.parse_args()
    if args.child is not None:
        if args.hmcecs_child is not None:
            print(json.dumps(hmcecs_child(args.child, args.chains, *args.hmcecs_child)))
        else:
            print(json.dumps(child(args.child, args.draws, args.chains, args.source, args.test)))
        return
    if args.rescore:  # the tables and figures of a saved run, rebuilt by this code: nothing is run
        saved = json.loads(Path(args.rescore).read_text())
        runs = saved["fits"]
        rows, values = summarise(
            runs, saved["config"]["n"], saved["config"]["warm"], args.name, saved["config"]["cache"]
        )
        extra = {"fits": runs, "load_average_end": saved["load_average_end"], "rescored_from": args.rescore}
        extra |= {"run": {k: saved[k] for k in ("command", "date", "load_average")}}
        save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values, extra=extra)
        return
    print(f"load average at start {os.getloadavg()}", flush=True)
    runs = {}
    for n in args.n:
        with tempfile.TemporaryDirectory(prefix="mm-compile-cache-") as tmp:
            cache = tmp if args.cache == "on" else "off"
            for label in ["cold"] + [f"warm{i}" for i in range(args.warm)]:
                runs[f"{n}.{label}"] = run_child(n, args.draws, args.chains, cache, source=args.source, test=args.test)
                print(label, {k: v for k, v in runs[f"{n}.{label}"].items() if k != "by_name"}, flush=True)
                if label == "cold" and args.hmcecs:  # between the cold and the warm fits: the load both see alike
                    hmcecs = run_child(n, args.draws, args.chains, "off", (args.hmcecs_warmup, args.hmcecs_draws))
                    runs[f"{n}.hmcecs"] = hmcecs
                    print(hmcecs, flush=True)
    rows, values = summarise(runs, args.n, args.warm, args.name, args.cache)
    for r in rows:
        print(" | ".join(r))
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
