"""The level-by-level Gibbs route at ``N = 10^7``, ``G = 10^5`` (issue 31, "Scale"), ours alone, its warm-up length named.

``mm.glmm`` routes this GLMM (``d = G + 5`` above ``MAX_DENSE_DIM``) to ``warmup.gibbs_route.group_gibbs`` with
``GIBBS_WARMUP = 200`` warm-up sweeps per chain, which ``mm.glmm`` does not let a caller change. At ``N = 10^7`` a sweep
of one chain reads the rows 4 times (seconds each on a 2-core CPU), so this script runs the same steps as ``mm.glmm``
(``formula_design``, ``glmm_model``, ``initial_theta``, the rows handed to JAX, then ``group_gibbs``) with ``--warmup``
sweeps (200 is the route's own; its first 25, ``gibbs_route.CLIMB``, climb in the globals to the posterior, the rest
tune), and reports the same columns as ``benchmarks/glmm.py``'s ``ours`` row: seconds per phase (the design with its
centring pilot and the rows handed to JAX; the warm-up sweeps; the kept sweeps), passes over ``N``, min bulk ESS and
max R-hat over every named effect, ESS/s with every second counted, the process's CPU seconds and ESS per CPU second,
and the process's peak resident memory (sampled every 20 ms; the simulated DataFrame and the design count). A second
table, ``NAME_params``, gives per parameter its bulk ESS, ESS per kept sweep (all chains), ESS per CPU second and R-hat:
every global, and of the group effects the levels with the fewest, the median and the most rows and the least ESS of
all (with the largest R-hat of all), so a run shows which parameter limits it.

    python benchmarks/glmm_large.py --n 10000000 --groups 100000 --chains 4 --warmup 100 --draws 200 \
        --name glmm_large_1e7 --results docs/results/glmm_large_1e7.json

(why these lengths: ``docs/benchmarks.md``, "Mixing per parameter at ``N = 10^6``, ``G = 10^4``"; the largest R-hat
over ``10^5`` effects comes near 1 only with enough draws a chain, even for independent draws).

``--before REV``: two versions of the library side by side (``revisions.py``: each revision's ``src`` in a fresh
process, both at once; ``--after``, default ``HEAD``), one row each, a second table ``NAME_memory`` with the process's
resident memory after each phase and (in brackets) its peak within the phase, and whether the two versions' draws
agree (every MH decision the same, the largest difference of a draw); ``--no-sweeps`` stops after the rows are handed to
JAX and compares those rows instead (the sampler's inputs, bitwise):

    python benchmarks/glmm_large.py --n 2000000 --groups 20000 --chains 2 --warmup 25 --draws 25 --before main \
        --name glmm_large_memory --results docs/results/glmm_large_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from bench_results import add_results_option, machine_line, save, table
from glmm import effect_stats, formula, mostly_centred, named_draws, rss_gb, simulate

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.interop.formula import formula_design
from minibatch_mcmc.interop.glmm_fit import GLMMResult
from minibatch_mcmc.models.glmm import glmm_model, initial_theta
from minibatch_mcmc.warmup.full_data import routed_warmup
from minibatch_mcmc.warmup.gibbs_route import GIBBS_WARMUP, gibbs_reason, group_gibbs

COLUMNS = [
    "N",
    "G",
    "rows/group (median)",
    "chains",
    "warm-up sweeps",
    "kept sweeps",
    "seconds",
    "convert",
    "warm-up",
    "sampling",
    "s per sweep (all chains)",
    "passes warm-up",
    "passes sampling",
    "acceptance",
    "min ESS",
    "max R-hat",
    "ESS/s",
    "CPU s",
    "ESS per CPU s",
    "peak RSS GB",
    "of which",
]
PHASES = ("table", "design", "model", "to JAX", "sweeps")
"""The phases whose resident memory is read: the simulated DataFrame, ``formula_design``, ``glmm_model`` with
``initial_theta`` and the route's check, ``as_data_source`` (the rows handed to JAX), ``group_gibbs``."""


PARAM_COLUMNS = ["parameter", "rows", "ESS", "ESS per kept sweep", "ESS per CPU s", "R-hat"]


def param_rows(stats: dict, sizes: np.ndarray, kept: int, cpu: float) -> list:
    """Per parameter: every global (a named array of at most ``SMALL`` entries) one row each; each factor's effects
    (``G`` entries) as the levels with the fewest, the median and the most rows, and the least ESS over all of them."""
    out = []

    def row(label, rows, ess, rhat):
        out.append([label, rows, f"{ess:.0f}", f"{ess / kept:.3f}", f"{ess / cpu:.3f}", f"{rhat:.3f}"])

    for name, (ess, rhat, *_) in stats.items():
        if ess.size != sizes.size:
            for j in range(ess.size):
                row(name if ess.size == 1 else f"{name}[{j}]", "all", float(ess[j]), float(rhat[j]))
            continue
        order = np.argsort(sizes, kind="stable")
        for what, g in (("fewest rows", order[0]), ("median rows", order[sizes.size // 2]), ("most rows", order[-1])):
            row(f"{name}[{g}] ({what})", str(sizes[g]), float(ess[g]), float(rhat[g]))
        low = int(np.argmin(ess))
        row(
            f"{name}: all {sizes.size} (least ESS: level {low}; largest R-hat)",
            str(sizes[low]),
            float(ess[low]),
            float(np.max(rhat)),
        )
    return out


class PhaseRSS:
    """The process's resident set size (GB) at the end of each phase and the largest seen during it (every 20 ms)."""

    def __enter__(self) -> PhaseRSS:
        self.phases: list[tuple[str, float, float]] = []
        self._peak, self._lock, self._stop = rss_gb(), threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            now = rss_gb()
            with self._lock:
                self._peak = max(self._peak, now)

    def mark(self, phase: str) -> None:
        """End ``phase``: record the RSS now and the phase's peak, and start the next phase's peak from now."""
        now = rss_gb()
        with self._lock:
            self.phases.append((phase, now, max(self._peak, now)))
            self._peak = now

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> float:
        """The largest RSS seen in any phase."""
        return max(p for _, _, p in self.phases)


def run(n: int, groups: int, args) -> tuple[list, dict, list, dict, list]:
    """Simulate, fit with ``--warmup`` sweeps; the table row, its values, each phase's ``(name, RSS after, peak)``, the
    draws (the kernel's positions and each step's MH decision) and the per-parameter rows (``param_rows``)."""
    with warnings.catch_warnings(), PhaseRSS() as mem:
        warnings.simplefilter("ignore")
        df = simulate(n, groups, "bernoulli", "tail", False)
        sizes = np.bincount(df["g"].to_numpy(), minlength=groups)
        median = float(np.median(sizes))
        mem.mark("table")
        start, cpu_start = time.perf_counter(), time.process_time()
        fitted = formula_design(formula(False), df, "bernoulli")
        mem.mark("design")
        model, data = glmm_model(fitted.design, "bernoulli")
        theta0 = initial_theta(model)
        reason = gibbs_reason(model, data, False)
        mem.mark("model")
        source = as_data_source(data)
        jax.block_until_ready(source.arrays())
        mem.mark("to JAX")
        convert = time.perf_counter() - start
        print(f"  convert {convert:.1f} s ({reason})", flush=True)
        if args.no_sweeps:
            return [], {}, mem.phases, {k: np.asarray(v) for k, v in source.arrays().items()}, []
        result, cost = group_gibbs(
            model,
            source,
            theta0,
            num_samples=args.draws,
            num_chains=args.chains,
            key=jax.random.PRNGKey(1),
            num_warmup=args.warmup,
        )
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        warm = routed_warmup(theta0, result, cost, "group_gibbs", reason or "named")
        res = GLMMResult(fitted, result, warm, "auto", model.glmm.layout.centring)
        mem.mark("sweeps")
    print(f"  warm-up {cost['adaptation'].seconds:.1f} s, sampling {cost['sampling'].seconds:.1f} s", flush=True)
    stats = effect_stats(named_draws(res))
    ess = min(float(s[0].min()) for s in stats.values())
    rhat = max(float(s[1].max()) for s in stats.values())
    sweeps = args.warmup + args.draws
    row = [
        f"{n:.0e}",
        f"{groups:.0e}",
        f"{median:.0f}",
        str(args.chains),
        str(args.warmup),
        str(args.draws),
        f"{seconds:.1f}",
        f"{convert:.1f}",
        f"{cost['adaptation'].seconds:.1f}",
        f"{cost['sampling'].seconds:.1f}",
        f"{(cost['adaptation'].seconds + cost['sampling'].seconds) / sweeps:.2f}",
        f"{cost['adaptation'].passes:.0f}",
        f"{cost['sampling'].passes:.0f}",
        f"{float(np.mean(result.records['accepted'])):.2f}",
        f"{ess:.0f}",
        f"{rhat:.3f}",
        f"{ess / seconds:.3f}",
        f"{cpu:.0f}",
        f"{ess / cpu:.3f}",
        f"{mem.peak:.2f}",
        f"group_gibbs ({reason}); "
        f"{'centred' if mostly_centred(res.centring) else 'non-centred'} "
        f"(mean weight {float(np.mean(res.centring[0])):.2f})",
    ]
    key = f"{args.name}.{n}.{groups}"
    values = {f"{key}.seconds": f"{seconds:.0f}", f"{key}.peak_gb": f"{mem.peak:.2f}", f"{key}.rhat": f"{rhat:.3f}"}
    values[f"{key}.ess_per_s"] = f"{ess / seconds:.3f}"
    values[f"{key}.min_ess"] = f"{ess:.0f}"
    draws = {"accepted": np.asarray(result.records["accepted"])}
    draws.update({f"position.{k}": np.asarray(v) for k, v in result.positions.items()})
    return row, values, mem.phases, draws, param_rows(stats, sizes, args.chains * args.draws, cpu)


def worker(args) -> None:
    """One version's fit (``--before``), written to ``--out`` (JSON) and its draws to ``--draws-dir`` (``.npz`` named
    as ``--out``: ``revisions.run_workers`` numbers the versions' outputs in order)."""
    row, values, phases, draws, _ = run(args.n, args.groups, args)
    np.savez(Path(args.draws_dir) / f"{Path(args.out).stem}.npz", **draws)
    Path(args.out).write_text(json.dumps({"row": row, "values": values, "phases": phases}))


def agreement(draws_dir: Path) -> tuple[int, float]:
    """The MH decisions that differ between the two versions' runs and the largest difference of a draw (with
    ``--no-sweeps``: the rows handed to JAX, the number of arrays that differ and the largest difference)."""
    first, second = (np.load(draws_dir / f"{i}.npz") for i in range(2))
    if "accepted" not in first.files:
        differ = sum(not np.array_equal(first[k], second[k]) for k in first.files)
        return differ, max(float(np.max(np.abs(first[k] - second[k]), initial=0.0)) for k in first.files)
    differ = int(np.sum(first["accepted"] != second["accepted"]))
    gap = max(float(np.max(np.abs(first[k] - second[k]))) for k in first.files if k.startswith("position."))
    return differ, gap


def side_by_side(args, machine: str) -> None:
    """``--before``: both versions at once (module docstring); the two tables printed and (``--results``) saved."""
    from revisions import extract_sources, run_workers

    with tempfile.TemporaryDirectory() as tmp:
        versions = extract_sources({"before": args.before, "after": args.after}, Path(tmp))
        flags = ["--n", str(args.n), "--groups", str(args.groups), "--chains", str(args.chains)]
        flags += ["--warmup", str(args.warmup), "--draws", str(args.draws), "--name", args.name]
        flags += ["--no-sweeps"] if args.no_sweeps else []
        got = run_workers(__file__, versions, [*flags, "--draws-dir", tmp])
        differ, gap = agreement(Path(tmp))
    rows, memory, values = [], [], {}
    what = "arrays of rows handed to JAX differ" if args.no_sweeps else "MH decisions differ"
    for name, r in got.items():
        label = name.split()[0]
        peak = f"{max(p for _, _, p in r['phases']):.2f}"
        if r["row"]:
            rows.append([name, *r["row"][:-1], f"{r['row'][-1]}; {differ} {what}, draws within {gap:.1e}"])
        cells = [f"{after:.2f} ({top:.2f})" for _, after, top in r["phases"]]
        memory.append([name, *cells, *[""] * (len(PHASES) - len(cells)), peak, f"{differ} {what}, within {gap:.1e}"])
        key = f"{args.name}.{label}"
        values[f"{key}.peak_gb"] = peak
        by_phase = {p: after for p, after, _ in r["phases"]}
        values[f"{key}.to_jax_gb"] = f"{by_phase['to JAX'] - by_phase['model']:.2f}"
        print(dict(zip(["version", *COLUMNS], rows[-1] if rows else [])), flush=True)
    values[f"{args.name}.decisions_differ"] = str(differ)
    values[f"{args.name}.draws_gap"] = f"{gap:.1e}"
    tables = {f"{args.name}_memory": table(["version", *(f"{p} GB" for p in PHASES), "peak RSS GB", "same?"], memory)}
    if rows:
        tables[args.name] = table(["version", *COLUMNS], rows)
    for line in memory:
        print(line, flush=True)
    save(args.results, args.name, config=args, tables=tables, values=values, extra={"machine": machine})


def main() -> None:
    """One row per ``(N, G)`` (or per version with ``--before``); the table printed and (``--results``) saved."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=GIBBS_WARMUP, help="warm-up sweeps per chain (the route's: 200)")
    ap.add_argument("--draws", type=int, default=50, help="kept sweeps per chain")
    ap.add_argument("--name", default="glmm_large")
    ap.add_argument("--before", default=None, help="git revision to run beside --after (both at once)")
    ap.add_argument("--after", default="HEAD", help="git revision of the 'after' version (with --before)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--draws-dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-sweeps", action="store_true", help="stop after the rows are handed to JAX (memory only)")
    add_results_option(ap)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    if args.before:
        side_by_side(args, machine)
        return
    row, values, phases, _, params = run(args.n, args.groups, args)
    print(" | ".join(row), flush=True)
    for line in params:
        print(" | ".join(line), flush=True)
    print("RSS GB after (peak in) each phase:", {p: f"{a:.2f} ({k:.2f})" for p, a, k in phases}, flush=True)
    tables = {args.name: table(COLUMNS, [row]), f"{args.name}_params": table(PARAM_COLUMNS, params)}
    extra = {"machine": machine, "complete": True, "load average at end": os.getloadavg()[0]}
    save(args.results, args.name, config=args, tables=tables, values=values, extra=extra)


if __name__ == "__main__":
    main()
