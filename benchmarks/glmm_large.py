"""The level-by-level Gibbs route at ``N = 10^7``, ``G = 10^5`` (issue 31, "Scale"), ours alone, its warm-up length named.

``mm.glmm`` routes this GLMM (``d = G + 5`` above ``MAX_DENSE_DIM``) to ``warmup.gibbs_route.group_gibbs`` with
``GIBBS_WARMUP = 200`` warm-up sweeps per chain, which ``mm.glmm`` does not let a caller change. At ``N = 10^7`` a sweep
of one chain reads the rows 4 times (seconds each on a 2-core CPU), so this script runs the same steps as ``mm.glmm``
(``formula_design``, ``glmm_model``, ``initial_theta``, then ``group_gibbs``) with ``--warmup`` sweeps (200 is the
route's own; its first 25, ``gibbs_route.CLIMB``, climb in the globals to the posterior, the rest tune), and reports the same columns as ``benchmarks/glmm.py``'s ``ours`` row: seconds per phase (the design
with its centring pilot; the warm-up sweeps; the kept sweeps), passes over ``N``, min bulk ESS and max R-hat over every
named effect, ESS/s with every second counted, the process's CPU seconds and ESS per CPU second, and the process's
peak resident memory (sampled every 20 ms; the simulated DataFrame and the design count). A second table,
``NAME_params``, gives per parameter its bulk ESS, ESS per kept sweep (all chains), ESS per CPU second and R-hat: every
global, and of the group effects the levels with the fewest, the median and the most rows and the least ESS of all
(with the largest R-hat of all), so a run shows which parameter limits it.

    python benchmarks/glmm_large.py --n 10000000 --groups 100000 --chains 4 --warmup 100 --draws 200 \
        --name glmm_large_1e7 --results docs/results/glmm_large_1e7.json

(why these lengths: ``docs/benchmarks.md``, "Mixing per parameter at ``N = 10^6``, ``G = 10^4``"; the largest R-hat
over ``10^5`` effects comes near 1 only with enough draws a chain, even for independent draws).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import jax
import numpy as np
from bench_results import add_results_option, machine_line, save, table
from glmm import PeakRSS, effect_stats, formula, mostly_centred, named_draws, simulate

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


def run(n: int, groups: int, args) -> tuple[list, dict, list]:
    """Simulate, fit with ``--warmup`` sweeps, and return the table row, its values and the per-parameter rows."""
    df = simulate(n, groups, "bernoulli", "tail", False)
    sizes = np.bincount(df["g"].to_numpy(), minlength=groups)
    median = float(np.median(sizes))
    with warnings.catch_warnings(), PeakRSS() as mem:
        warnings.simplefilter("ignore")
        start, cpu_start = time.perf_counter(), time.process_time()
        fitted = formula_design(formula(False), df, "bernoulli")
        model, data = glmm_model(fitted.design, "bernoulli")
        theta0 = initial_theta(model)
        reason = gibbs_reason(model, data, False)
        convert = time.perf_counter() - start
        print(f"  convert {convert:.1f} s ({reason})", flush=True)
        result, cost = group_gibbs(
            model,
            data,
            theta0,
            num_samples=args.draws,
            num_chains=args.chains,
            key=jax.random.PRNGKey(1),
            num_warmup=args.warmup,
        )
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        warm = routed_warmup(theta0, result, cost, "group_gibbs", reason or "named")
        res = GLMMResult(fitted, result, warm, "auto", model.glmm.layout.centring)
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
    return row, values, param_rows(stats, sizes, args.chains * args.draws, cpu)


def main() -> None:
    """One row per ``(N, G)``; the table printed and (``--results``) saved."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=GIBBS_WARMUP, help="warm-up sweeps per chain (the route's: 200)")
    ap.add_argument("--draws", type=int, default=50, help="kept sweeps per chain")
    ap.add_argument("--name", default="glmm_large")
    add_results_option(ap)
    args = ap.parse_args()
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    row, values, params = run(args.n, args.groups, args)
    print(" | ".join(row), flush=True)
    for line in params:
        print(" | ".join(line), flush=True)
    tables = {args.name: table(COLUMNS, [row]), f"{args.name}_params": table(PARAM_COLUMNS, params)}
    extra = {"machine": machine, "complete": True, "load average at end": os.getloadavg()[0]}
    save(args.results, args.name, config=args, tables=tables, values=values, extra=extra)


if __name__ == "__main__":
    main()
