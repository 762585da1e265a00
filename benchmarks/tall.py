"""``auto_sample`` from disk at 10^7 and 10^8 rows: every second of the fit by phase, passes over N, peak memory, the floor.

The data are a d = 10 logistic regression written by ``make tall-data N=...`` (``python -m minibatch_mcmc.data.generate``
in chunks: ``data/tall/N/npy/{x,y}.npy`` and ``data/tall/N/parquet/part-*.parquet``, not committed). For each ``N`` and
each source (``open_npy``: a memory map; ``open_parquet``: 4M-row shards of 64k-row groups) two fresh child processes run:

- ``floor``: one plain numpy pass over the same file in 2^20-row chunks (``readinto`` for ``.npy``, pyarrow's
  ``iter_batches`` for Parquet), once reading only and once computing the log-likelihood and its gradient at a fixed
  ``theta`` (``x @ theta``, ``logaddexp``, ``x.T @ r``): what one streamed pass of any sampler costs at least. It runs
  just before the fit, so both see the page cache in the same state. The target is the whole fit within four such
  passes + 30 s.
- ``fit``: opening the source (its validation scan, a pass) and ``auto_sample(logistic_regression(10.0), ...)`` with its
  defaults (4 chains x ``--samples``, the post-sampling check included); ``fit_cost`` gives each phase's seconds, rows and
  passes over N (``open`` first), beside the child's own clock around the whole fit; min bulk ESS over the 10
  coordinates (ArviZ) over those seconds gives ESS/s. CPU seconds per phase are read off the child's CPU clock (sampled
  every ``CPU_TICK`` s) at the phases' wall boundaries laid end to end: ``proxy`` (the mode search's last pass) is carved
  out of ``mode``'s time, so their split is approximate and their sum exact; each streamed Newton pass's own CPU seconds
  are timed around it. Peak memory: ``ru_maxrss`` and ``VmHWM`` of the child (the parent
  imports no JAX or data, so a peak inherited through ``exec`` is small), and the largest ``RssAnon``/``RssFile`` seen
  every 0.2 s.

With ``--hmcecs-rows N`` a third child loads that ``.npy`` into memory (timed) and runs NumPyro's HMCECS on the same
model (``beta ~ Normal(0, 10)``; Taylor proxy at an SVI MAP on 1000-row minibatches, 1000 rows a step, 100 blocks,
chains one after another, ``--hmcecs-warmup`` + ``--hmcecs-draws`` steps each); its ESS/s is set against ours.

    make tall-data N=1e7 && make tall-data N=1e8
    python benchmarks/tall.py --rows 10000000 100000000 --hmcecs-rows 10000000 --results docs/results/tall.json

``--append`` keeps the runs already in the results file (another ``N`` or source, each with its own command and date);
``--merge A.json B.json --results C.json`` runs nothing and joins the runs of separate invocations.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tall_check import hwm_mib, watch  # noqa: E402

CPU_TICK = 0.05
"""Seconds between two readings of the fit's CPU clock (its phases' CPU seconds are read off them)."""
CHUNK = 1 << 20
"""Rows per chunk of the plain numpy pass."""
PRIOR_SCALE = 10.0
FLOOR_PASSES, FLOOR_SLACK = 4, 30.0
"""The target: the whole fit within ``FLOOR_PASSES`` plain numpy passes + ``FLOOR_SLACK`` seconds."""


def memory(peaks: dict) -> dict:
    """This process's peak memory in MiB: ``ru_maxrss``, ``VmHWM``, and the largest anonymous / file-backed RSS seen."""
    return {
        "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "vmhwm_mib": hwm_mib(),
        "peak_anon_mib": peaks.get("RssAnon", math.nan),
        "peak_file_mib": peaks.get("RssFile", math.nan),
    }


def watched() -> tuple[dict, threading.Event]:
    """Start the 0.2 s watcher of ``RssAnon``/``RssFile``; its peaks and its stop event."""
    peaks, stop = {}, threading.Event()
    threading.Thread(target=watch, args=(peaks, stop), daemon=True).start()
    return peaks, stop


def clocked() -> tuple[list, threading.Event]:
    """Start a thread recording ``(wall, CPU)`` clock pairs of this process every ``CPU_TICK`` seconds; the list and its
    stop event."""
    marks, stop = [], threading.Event()

    def run() -> None:
        while not stop.wait(CPU_TICK):
            marks.append((time.perf_counter(), time.process_time()))

    threading.Thread(target=run, daemon=True).start()
    return marks, stop


def phase_cpu(marks: list, start: tuple[float, float], seconds: list[float]) -> list[float]:
    """CPU seconds of consecutive phases of the given wall ``seconds`` from ``start`` (wall, CPU): the CPU clock read off
    the recorded ``marks`` (linear between two) at each phase's wall boundaries."""
    import numpy as np

    walls, cpus = (np.array([start[i]] + [m[i] for m in marks]) for i in (0, 1))
    edges = start[0] + np.cumsum([0.0] + list(seconds))
    return [float(v) for v in np.diff(np.interp(edges, walls, cpus))]


def npy_chunks(path: Path):
    """``(x, y)`` chunks of ``CHUNK`` rows of ``path/x.npy`` and ``path/y.npy``, read with ``readinto`` (no map)."""
    import numpy as np
    from numpy.lib import format as npy_format

    with open(path / "x.npy", "rb") as fx, open(path / "y.npy", "rb") as fy:
        (n, d), _, xt = (
            npy_format.read_array_header_2_0(fx)
            if npy_format.read_magic(fx) == (2, 0)
            else npy_format.read_array_header_1_0(fx)
        )
        (_,), _, yt = (
            npy_format.read_array_header_2_0(fy)
            if npy_format.read_magic(fy) == (2, 0)
            else npy_format.read_array_header_1_0(fy)
        )
        bx, by = np.empty((CHUNK, d), xt), np.empty(CHUNK, yt)
        for start in range(0, n, CHUNK):
            b = min(CHUNK, n - start)
            fx.readinto(memoryview(bx[:b]).cast("B"))
            fy.readinto(memoryview(by[:b]).cast("B"))
            yield bx[:b], by[:b]


def parquet_chunks(path: Path):
    """``(x, y)`` chunks of at most ``CHUNK`` rows of the Parquet shards under ``path`` (pyarrow's ``iter_batches``)."""
    import pyarrow.parquet as pq

    for f in sorted(path.glob("*.parquet")):
        for batch in pq.ParquetFile(f).iter_batches(batch_size=CHUNK, columns=["x", "y"]):
            x = batch.column("x")
            yield x.values.to_numpy().reshape(len(x), x.type.list_size), batch.column("y").to_numpy()


def child_floor(fmt: str, path: Path) -> dict:
    """One reading pass, then one log-likelihood + gradient pass, over the file; seconds of each, and the peak memory."""
    import numpy as np
    import pyarrow.parquet  # noqa: F401  (imported before the clock starts)

    peaks, stop = watched()
    chunks = npy_chunks if fmt == "npy" else parquet_chunks
    t0, c0, rows = time.perf_counter(), time.process_time(), 0
    for x, _ in chunks(path):
        rows += len(x)
    read_s, read_cpu = time.perf_counter() - t0, time.process_time() - c0
    theta = np.full(10, 0.1, np.float32)
    t0, c0, ll, grad = time.perf_counter(), time.process_time(), 0.0, np.zeros(10)
    for x, y in chunks(path):
        z, yf = x @ theta, y.astype(np.float32)
        ll += float(np.sum(yf * z - np.logaddexp(np.float32(0.0), z), dtype=np.float64))
        grad += x.T @ (yf - np.float32(1.0) / (np.float32(1.0) + np.exp(-z)))
    pass_s, pass_cpu = time.perf_counter() - t0, time.process_time() - c0
    stop.set()
    return {
        "rows": rows,
        "read_s": read_s,
        "read_cpu_s": read_cpu,
        "pass_s": pass_s,
        "pass_cpu_s": pass_cpu,
        "loglik": ll,
        **memory(peaks),
    }


def open_source(fmt: str, path: Path):
    """The data source, opened (validation scan included)."""
    from minibatch_mcmc.data import open_npy, open_parquet

    return (
        open_npy({"x": path / "x.npy", "y": path / "y.npy"}) if fmt == "npy" else open_parquet(path, columns=["x", "y"])
    )


def min_ess(draws) -> float:
    """Min ArviZ bulk ESS over the coordinates of ``(chains, draws, d)`` draws."""
    import arviz as az
    import numpy as np

    a = np.asarray(draws, np.float64)
    return min(float(az.ess(a[..., i], method="bulk")) for i in range(a.shape[-1]))


def child_fit(fmt: str, path: Path, samples: int, chains: int) -> dict:
    """Open the source and run ``auto_sample``: ``fit_cost``'s phases, the child's own clock, ESS, memory."""
    import warnings

    import jax.numpy as jnp
    import numpy as np

    from minibatch_mcmc.models import logistic_regression
    from minibatch_mcmc.samplers.phase_cost import PhaseCost
    from minibatch_mcmc.warmup import auto_sample, fit_cost, lean

    passes_cpu, stream = [], lean.stream

    def timed_stream(*args, **kwargs):  # each streamed Newton pass's CPU seconds (the phases' are read off the clock)
        c = time.process_time()
        out = stream(*args, **kwargs)
        passes_cpu.append(time.process_time() - c)
        return out

    lean.stream = timed_stream
    peaks, stop = watched()
    marks, tick = clocked()
    t0, c0, load0 = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    data = open_source(fmt, path)
    opened = PhaseCost(data.n, time.perf_counter() - t0, 1.0, math.nan)  # the validation scan reads every row once
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, w = auto_sample(
            logistic_regression(PRIOR_SCALE),
            data,
            jnp.zeros(10),
            num_samples=samples,
            num_chains=chains,
            key=0,
            progress=True,
        )
    clock, cpu = time.perf_counter() - t0, time.process_time() - c0
    stop.set()
    tick.set()
    marks.append((time.perf_counter(), time.process_time()))
    cost = fit_cost(warm=w, before={"open": opened})
    cpus = phase_cpu(marks, (t0, c0), [c.seconds for c in cost.phases.values()])
    theta = np.load(path / "theta.npy")
    mean = np.asarray(res.positions).reshape(-1, 10).mean(0)
    return {
        "n": data.n,
        "clock_s": clock,
        "cpu_s": cpu,
        "load_average": [load0, os.getloadavg()[0]],
        "fit_s": cost.seconds,
        "passes": cost.passes,
        "ess": min_ess(res.positions),
        "phases": {
            k: {"seconds": c.seconds, "cpu_s": u, "rows": c.data, "passes": c.passes}
            for (k, c), u in zip(cost.phases.items(), cpus)
        },
        "newton_passes_cpu_s": passes_cpu,
        "proposal": w.kind,
        "test": w.test.name,
        "check_ok": bool(w.proxy_check.ok),
        "max_abs_mean_minus_truth": float(np.max(np.abs(mean - theta))),
        "warnings": [str(c.message)[:300] for c in caught],
        **memory(peaks),
        "file_gib": sum(f.stat().st_size for f in path.iterdir() if f.name != "theta.npy") / 2**30,
    }


def hmcecs_model(x, y, sub=None):
    """Logistic regression with ``beta ~ Normal(0, PRIOR_SCALE)``, rows subsampled by ``numpyro.subsample``."""
    import numpyro
    import numpyro.distributions as dist

    beta = numpyro.sample("beta", dist.Normal(0.0, PRIOR_SCALE).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0], subsample_size=sub):
        xb, yb = numpyro.subsample(x, event_dim=1), numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.Bernoulli(logits=xb @ beta), obs=yb)


def child_hmcecs(path: Path, chains: int, warm: int, draws: int, sub: int) -> dict:
    """Load the ``.npy`` into memory and run HMCECS (SVI MAP, Taylor proxy): seconds by part, min ESS, memory."""
    import jax
    import numpy as np
    import numpyro
    from numpyro.infer import HMCECS, MCMC, NUTS, SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoDelta

    peaks, stop = watched()
    t0, c0 = time.perf_counter(), time.process_time()
    x, y = jax.device_put(np.load(path / "x.npy")), jax.device_put(np.load(path / "y.npy").astype(np.float32))
    load_s = time.perf_counter() - t0
    guide = AutoDelta(hmcecs_model)
    svi = SVI(hmcecs_model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    fit = svi.run(jax.random.PRNGKey(3), 3000, x, y, sub=sub, progress_bar=False)
    ref = guide.median(fit.params)
    svi_s = time.perf_counter() - t0 - load_s
    kernel = HMCECS(NUTS(hmcecs_model), num_blocks=100, proxy=HMCECS.taylor_proxy(ref))
    mcmc = MCMC(
        kernel, num_warmup=warm, num_samples=draws, num_chains=chains, chain_method="sequential", progress_bar=False
    )
    mcmc.run(jax.random.PRNGKey(4), x, y, sub=sub)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    stop.set()
    beta = np.asarray(mcmc.get_samples(group_by_chain=True)["beta"])
    return {
        "n": int(x.shape[0]),
        "load_s": load_s,
        "svi_s": svi_s,
        "mcmc_s": total - load_s - svi_s,
        "total_s": total,
        "cpu_s": cpu,
        "ess": min_ess(beta),
        "chains": chains,
        "warmup": warm,
        "draws": draws,
        "subsample": sub,
        **memory(peaks),
    }


def run_child(*argv: str) -> dict:
    """This script in a fresh process (``--child ...``); its last stdout line as JSON (its stderr passes through)."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", *argv], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def fit_row(rec: dict) -> dict:
    """The derived figures of one (N, source) record: the target in wall and in CPU seconds, ESS/s."""
    fit, floor = rec["fit"], rec["floor"]
    target = FLOOR_PASSES * floor["pass_s"] + FLOOR_SLACK
    cpu_target = FLOOR_PASSES * floor.get("pass_cpu_s", math.nan) + FLOOR_SLACK
    return {
        "target_s": target,
        "over_target": fit["fit_s"] / target,
        "ess_per_s": fit["ess"] / fit["fit_s"],
        "cpu_target_s": cpu_target,
        "cpu_over_target": fit.get("cpu_s", math.nan) / cpu_target,
    }


def results(records: list[dict], hmcecs: list[dict]) -> tuple[dict, dict]:
    """Table ``tall`` (phase by phase, one column per run), ``tall_hmcecs``, and the prose values."""
    from bench_results import table

    label = lambda r: f"N = {r['n']:.0e}, {r['format']}"  # noqa: E731
    phases = list(dict.fromkeys(k for r in records for k in r["fit"]["phases"]))
    cell = lambda p: f"{p['seconds']:.1f} s; {p.get('cpu_s', math.nan):.1f} CPU s ({p['passes']:.3g})"  # noqa: E731
    rows = [
        [f"{k}: seconds; CPU seconds (passes over N)"]
        + [cell(r["fit"]["phases"][k]) if k in r["fit"]["phases"] else "-" for r in records]
        for k in phases
    ]
    der = [fit_row(r) for r in records]
    rows += [
        ["**whole fit** (sum of the phases; the child's own clock)"]
        + [f"**{r['fit']['fit_s']:.1f} s** ({r['fit']['clock_s']:.1f} s)" for r in records],
        ["passes over N, in all"] + [f"{r['fit']['passes']:.2f}" for r in records],
        ["streamed Newton passes (in mode and proxy): CPU seconds each"]
        + [", ".join(f"{v:.1f}" for v in r["fit"].get("newton_passes_cpu_s", [])) or "-" for r in records],
        ["plain numpy pass: read only; log-lik + gradient"]
        + [f"{r['floor']['read_s']:.1f} s; {r['floor']['pass_s']:.1f} s" for r in records],
        [f"target: {FLOOR_PASSES} numpy passes + {FLOOR_SLACK:.0f} s (fit / target)"]
        + [f"{d['target_s']:.1f} s ({d['over_target']:.2f}x)" for d in der],
        ["CPU seconds (all threads): whole fit; numpy log-lik + gradient pass"]
        + [f"{r['fit'].get('cpu_s', math.nan):.1f} s; {r['floor'].get('pass_cpu_s', math.nan):.1f} s" for r in records],
        [f"target in CPU seconds: {FLOOR_PASSES} passes' + {FLOOR_SLACK:.0f} s (fit / target)"]
        + [f"{d['cpu_target_s']:.1f} s ({d['cpu_over_target']:.2f}x)" for d in der],
        ["load average (1 min) at the fit's start; end"]
        + ["; ".join(f"{v:.1f}" for v in r["fit"].get("load_average", [math.nan] * 2)) for r in records],
        ["peak RSS (`ru_maxrss`; `VmHWM`)"]
        + [f"{r['fit']['ru_maxrss_mib']:.0f}; {r['fit']['vmhwm_mib']:.0f} MiB" for r in records],
        ["of which anonymous; file-backed (largest seen every 0.2 s)"]
        + [f"{r['fit']['peak_anon_mib']:.0f}; {r['fit']['peak_file_mib']:.0f} MiB" for r in records],
        ["numpy pass's peak RSS"] + [f"{r['floor']['ru_maxrss_mib']:.0f} MiB" for r in records],
        ["min bulk ESS (10 coordinates); ESS/s of the whole fit"]
        + [f"{r['fit']['ess']:.0f}; {d['ess_per_s']:.1f}" for r, d in zip(records, der)],
        ["proposal, test; post-sampling check"]
        + [
            f"{r['fit']['proposal']}, {r['fit']['test']}; {'ok' if r['fit']['check_ok'] else 'FAILED'}" for r in records
        ],
        ["warnings"] + [str(len(r["fit"]["warnings"])) for r in records],
    ]
    tabs = {"tall": table(["phase"] + [f"{label(r)} ({r['fit']['file_gib']:.2f} GiB)" for r in records], rows)}
    values = {}
    for r, d in zip(records, der):
        key = f"tall.{short(r['n'])}.{r['format']}"
        values.update(
            {
                f"{key}.fit_s": f"{r['fit']['fit_s']:.0f}",
                f"{key}.target_s": f"{d['target_s']:.0f}",
                f"{key}.over_target": f"{d['over_target']:.2f}",
                f"{key}.peak_mib": f"{r['fit']['ru_maxrss_mib']:.0f}",
                f"{key}.pass_s": f"{r['floor']['pass_s']:.1f}",
                f"{key}.passes": f"{r['fit']['passes']:.2f}",
                f"{key}.cpu_s": f"{r['fit'].get('cpu_s', math.nan):.0f}",
                f"{key}.cpu_over_target": f"{d['cpu_over_target']:.2f}",
            }
        )
    hrows = []
    for h in hmcecs:
        ours = [r for r in records if r["n"] == h["n"] and r["format"] == "npy"]
        rate = h["ess"] / h["total_s"]
        ratio = fit_row(ours[0])["ess_per_s"] / rate if ours else math.nan
        cpu_ratio = (
            ours[0]["fit"]["ess"] / ours[0]["fit"].get("cpu_s", math.nan) / (h["ess"] / h.get("cpu_s", math.nan))
            if ours
            else math.nan
        )
        hrows.append(
            [
                f"{h['n']:,}",
                f"{h['chains']} x ({h['warmup']} + {h['draws']}), {h['subsample']} rows a step",
                f"{h['load_s']:.1f} + {h['svi_s']:.1f} + {h['mcmc_s']:.1f} = {h['total_s']:.1f}",
                f"{h.get('cpu_s', math.nan):.0f}",
                f"{h['ess']:.0f}",
                f"{rate:.2f}",
                f"{ratio:.1f}x",
                f"{cpu_ratio:.1f}x",
                f"{h['ru_maxrss_mib']:.0f} MiB",
            ]
        )
        values.update(
            {
                f"tall.{short(h['n'])}.hmcecs_ratio": f"{ratio:.1f}",
                f"tall.{short(h['n'])}.hmcecs_ess_per_s": f"{rate:.2f}",
                f"tall.{short(h['n'])}.hmcecs_cpu_ratio": f"{cpu_ratio:.1f}",
            }
        )
    if hrows:
        tabs["tall_hmcecs"] = table(
            [
                "N",
                "HMCECS: chains x (warm-up + draws)",
                "seconds: load + SVI MAP + MCMC",
                "CPU seconds",
                "min bulk ESS",
                "ESS/s",
                "ours (.npy) / HMCECS, ESS/s",
                "the same, ESS per CPU second",
                "peak RSS",
            ],
            hrows,
        )
    return tabs, values


def short(n: int) -> str:
    """``10000000`` as ``1e7`` (a key of the docs' values)."""
    return f"{n:.0e}".replace("e+0", "e").replace("e+", "e")


def merge(old: list[dict], new: list[dict], key) -> list[dict]:
    """``old`` with the records of ``new`` replacing those with the same ``key``, then the rest of ``new``; sorted by key."""
    by = {key(r): r for r in old}
    by.update({key(r): r for r in new})
    return [by[k] for k in sorted(by)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(float(s)), nargs="*", default=[10_000_000])
    parser.add_argument("--formats", nargs="+", choices=("npy", "parquet"), default=["npy", "parquet"])
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "data" / "tall",
        help="where `make tall-data` wrote N/npy and N/parquet",
    )
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--hmcecs-rows", type=lambda s: int(float(s)), nargs="*", default=[])
    parser.add_argument("--hmcecs-chains", type=int, default=4)
    parser.add_argument("--hmcecs-warmup", type=int, default=500)
    parser.add_argument("--hmcecs-draws", type=int, default=1000)
    parser.add_argument("--append", action="store_true", help="keep the runs already in --results")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        metavar="FILE",
        help="run nothing: join the runs of these results files (each kept with its command) into --results",
    )
    parser.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    from bench_results import add_results_option, command, save

    add_results_option(parser)
    args = parser.parse_args()
    if args.child is not None:
        kind, *rest = args.child
        out = {
            "floor": lambda f, p: child_floor(f, Path(p)),
            "fit": lambda f, p, s, c: child_fit(f, Path(p), int(s), int(c)),
            "hmcecs": lambda p, c, w, d: child_hmcecs(Path(p), int(c), int(w), int(d), 1000),
        }[kind](*rest)
        return print(json.dumps(out), flush=True)
    if args.merge:
        parts = [json.loads(f.read_text()) for f in args.merge]
        records = merge([], [r for p in parts for r in p.get("records", [])], lambda r: (r["n"], r["format"]))
        hmcecs = merge([], [h for p in parts for h in p.get("hmcecs", [])], lambda r: r["n"])
        tables, values = results(records, hmcecs)
        runs = [run for p in parts for run in p.get("runs", [])]
        save(
            args.results,
            "tall",
            config=args,
            tables=tables,
            values=values,
            extra={"records": records, "hmcecs": hmcecs, "runs": runs},
        )
        return None
    stamp = {
        "command": command(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": os.getloadavg(),
        "compilation_cache": os.environ.get("MINIBATCH_MCMC_COMPILATION_CACHE", "default (on)"),
    }
    records, hmcecs = [], []
    for n in args.rows:
        for fmt in args.formats:
            path = args.data / str(n) / fmt
            if not path.exists():
                sys.exit(f"{path} does not exist: run `make tall-data N={n}` first")
            floor = run_child("floor", fmt, str(path))
            print(f"N={n:,} {fmt}: numpy pass {json.dumps(floor)}", flush=True)
            fit = run_child("fit", fmt, str(path), str(args.samples), str(args.chains))
            records.append({"n": n, "format": fmt, "floor": floor, "fit": fit, **stamp})
            print(f"N={n:,} {fmt}: fit {json.dumps(fit)}", flush=True)
    for n in args.hmcecs_rows:
        h = run_child(
            "hmcecs",
            str(args.data / str(n) / "npy"),
            str(args.hmcecs_chains),
            str(args.hmcecs_warmup),
            str(args.hmcecs_draws),
        )
        hmcecs.append({**h, **stamp})
        print(f"N={n:,} HMCECS {json.dumps(h)}", flush=True)
    old = (
        json.loads(Path(args.results).read_text())
        if args.append and args.results and Path(args.results).exists()
        else {}
    )
    records = merge(old.get("records", []), records, lambda r: (r["n"], r["format"]))
    hmcecs = merge(old.get("hmcecs", []), hmcecs, lambda r: r["n"])
    tables, values = results(records, hmcecs)
    for name, tab in tables.items():
        print(name, *(" | ".join(r) for r in [tab["columns"], *tab["rows"]]), sep="\n")
    runs = old.get("runs", []) + [stamp]
    save(
        args.results,
        "tall",
        config=args,
        tables=tables,
        values=values,
        extra={"records": records, "hmcecs": hmcecs, "runs": runs},
    )


if __name__ == "__main__":
    main()
