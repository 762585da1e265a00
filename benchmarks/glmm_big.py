"""GLMMs with more parameters than a dense Hessian allows (issue 31, "Scale"): the arrow-Hessian mode and Laplace fit.

One grouping factor of ``G`` levels with a long tail of sizes (``glmm.simulate``, ``--sizes tail``: log-normal
weights, median half the mean ``N / G``), logistic, ``y ~ x1 + x2 + x3 + (1 | g)``. Per ``(N, G)`` and
parameterisation (``--centred``: ``auto``, ``mm.glmm``'s per-level weights; ``non-centred``; ``centred``): seconds of
the design (the formula, the model and its centring pilot), of ``optim.block_newton.block_mode`` (damped Newton on
the arrow Hessian: Newton steps, full-data passes, whether it converged, its Newton decrement) and of the Laplace fit's
marginal variances; the fitted group s.d. against the simulated 0.5; the peak resident memory (sampled every 20 ms,
the process's: the data count). A failed fit is a row with its error.

    python benchmarks/glmm_big.py --n 1000000 --groups 10000 --results docs/results/glmm_big.json
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np
from bench_results import add_results_option, save, table
from glmm import GROUP_SD, PeakRSS, formula, simulate

from minibatch_mcmc.interop.formula import formula_design
from minibatch_mcmc.models.glmm import glmm_model, initial_theta
from minibatch_mcmc.optim.block_newton import block_mode, marginal_variances

COLUMNS = ["N", "G", "rows/group (median)", "largest group", "d", "parameterisation", "design s", "mode s",
           "Newton steps", "passes", "converged", "decrement", "Laplace s", "sd(1|g) at mode", "peak RSS GB", "note"]


def one(n: int, groups: int, centred: str, rows: list, values: dict, name: str) -> None:
    """Fit one configuration and append its row."""
    df = simulate(n, groups, "bernoulli", "tail", False)
    sizes = np.bincount(df["g"].to_numpy(), minlength=groups)
    head = [f"{n:.0e}", f"{groups:.0e}", f"{np.median(sizes):.0f}", f"{sizes.max()}"]
    flag = {"auto": "auto", "centred": True, "non-centred": False}[centred]
    with PeakRSS() as mem:
        try:
            start = time.perf_counter()
            model, data = glmm_model(formula_design(formula(False), df, "bernoulli").design, "bernoulli", centred=flag,
                                     sample_as_written=centred != "auto")
            design_s = time.perf_counter() - start
            d = int(initial_theta(model).size)
            found = block_mode(model, data, initial_theta(model))
            start = time.perf_counter()
            var = marginal_variances(found.factor)
            laplace_s = time.perf_counter() - start
        except Exception as err:  # noqa: BLE001 (a failed fit is a row)
            rows.append(head + ["", centred] + [""] * (len(COLUMNS) - 8) + [f"{mem.peak:.2f}", f"{type(err).__name__}: {err}"[:200]])
            print(" | ".join(rows[-1]), flush=True)
            return
    sd = float(np.exp(found.theta_hat[3 + groups]))
    rows.append(head + [str(d), centred, f"{design_s:.1f}", f"{found.seconds:.1f}", str(found.steps), str(found.passes),
                        str(found.converged), f"{found.decrement:.2g}", f"{laplace_s:.2f}",
                        f"{sd:.3f} +- {np.sqrt(var[3 + groups]) * sd:.3f} (true {GROUP_SD})", f"{mem.peak:.2f}", ""])
    print(" | ".join(rows[-1]), flush=True)
    values[f"{name}.{n}.{groups}.{centred}.mode_seconds"] = f"{found.seconds:.1f}"
    values[f"{name}.{n}.{groups}.{centred}.peak_gb"] = f"{mem.peak:.2f}"


def main() -> None:
    """Every ``(N, G)`` and parameterisation; the table printed and (``--results``) saved after each."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--groups", type=int, nargs="+", default=[10_000])
    ap.add_argument("--centred", nargs="+", default=["auto", "non-centred"], choices=("auto", "centred", "non-centred"))
    ap.add_argument("--name", default="glmm_big")
    add_results_option(ap)
    args = ap.parse_args()
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].device_kind}, "
               f"jax {jax.__version__}, load average at start {os.getloadavg()[0]:.1f}")
    print(f"machine: {machine}", flush=True)
    rows, values = [], {}
    for n, groups in zip(args.n, args.groups):
        for centred in args.centred:
            one(n, groups, centred, rows, values, args.name)
            save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values,
                 extra={"machine": machine, "complete": False})
    save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values,
         extra={"machine": machine, "complete": True, "load average at end": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
