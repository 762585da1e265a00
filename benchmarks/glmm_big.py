"""GLMMs with more parameters than a dense Hessian allows (issue 31, "Scale"): the arrow-Hessian mode and Laplace fit.

One grouping factor of ``G`` levels with a long tail of sizes (``glmm.simulate``, ``--sizes tail``: log-normal
weights, median half the mean ``N / G``), logistic, ``y ~ x1 + x2 + x3 + (1 | g)``. Per ``(N, G)`` and
parameterisation (``--centred``: ``auto``, ``mm.glmm``'s per-level weights; ``non-centred``; ``centred``): seconds of
the design (the formula, the model and its centring pilot), of ``optim.block_newton.block_mode`` (damped Newton on
the arrow Hessian: Newton steps, full-data passes, whether it converged, its Newton decrement) and of the Laplace fit's
marginal variances; the fitted group s.d. against the simulated 0.5; the peak resident memory (sampled every 20 ms,
the process's: the data count). With ``--sample S``: arrow proxy HMC (``control_variates.arrow_hmc``, the Laplace fit's
arrow factor as mass, a fixed step) on the GLMM proxy at the mode with the penalty test, ``S`` draws per chain: the
proxy pass's and sampling's seconds, acceptance, rows per test, the least bulk ESS over every coordinate and ESS/s
with every second counted (design, mode, proxy, sampling). A failed fit is a row with its error.

    python benchmarks/glmm_big.py --n 1000000 --groups 10000 --results docs/results/glmm_big.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_results import add_results_option, machine_line, save_rows
from glmm import GROUP_SD, PeakRSS, formula, simulate

import minibatch_mcmc as mm
from minibatch_mcmc.control_variates.arrow_hmc import arrow_hmc, arrow_mass
from minibatch_mcmc.interop.formula import formula_design
from minibatch_mcmc.models.glmm import glmm_model, initial_theta
from minibatch_mcmc.optim.block_newton import block_mode, marginal_variances

COLUMNS = [
    "N",
    "G",
    "rows/group (median)",
    "largest group",
    "d",
    "parameterisation",
    "design s",
    "mode s",
    "Newton steps",
    "passes",
    "converged",
    "decrement",
    "Laplace s",
    "sd(1|g) at mode",
    "proxy s",
    "sampling s",
    "acceptance",
    "rows per test",
    "min ESS",
    "ESS/s (all time)",
    "peak RSS GB",
    "note",
]


def run_sampler(model, data, found, args) -> tuple:
    """Proxy HMC with the arrow mass on the GLMM proxy at the mode, the penalty test: seconds of the proxy pass and of
    sampling, acceptance, rows per test and the least bulk ESS over every coordinate (``--sample`` draws per chain)."""
    import arviz as az

    start = time.perf_counter()
    proxy = mm.glmm_proxy(model, data, found.theta_hat)
    proxy_s = time.perf_counter() - start
    proposal = arrow_hmc(proxy, model.log_prior, args.step_size, arrow_mass(found.factor), num_steps=args.leapfrog)
    start = time.perf_counter()
    res = mm.sample(
        model,
        data,
        found.theta_hat,
        proposal=proposal,
        test=mm.penalty_test(args.batch),
        estimator=proxy,
        num_samples=args.sample,
        num_chains=args.chains,
        key=3,
        progress=False,
    )
    sampling_s = time.perf_counter() - start
    draws = np.asarray(res.unconstrained, np.float64)
    ess = float(np.min(np.asarray(az.ess({"t": draws}, method="bulk")["t"])))
    rec = res.records
    return (
        proxy_s,
        sampling_s,
        float(np.mean(rec["accepted"])),
        float(np.mean(rec["batch_size"]) + np.mean(rec["hidden_data"])),
        ess,
    )


def one(n: int, groups: int, centred: str, rows: list, values: dict, name: str, args) -> None:
    """Fit one configuration and append its row."""
    df = simulate(n, groups, "bernoulli", "tail", False)
    sizes = np.bincount(df["g"].to_numpy(), minlength=groups)
    head = [f"{n:.0e}", f"{groups:.0e}", f"{np.median(sizes):.0f}", f"{sizes.max()}"]
    flag = {"auto": "auto", "centred": True, "non-centred": False}[centred]
    with PeakRSS() as mem:
        try:
            start = time.perf_counter()
            model, data = glmm_model(
                formula_design(formula(False), df, "bernoulli").design,
                "bernoulli",
                centred=flag,
                sample_as_written=centred != "auto",
            )
            design_s = time.perf_counter() - start
            d = int(initial_theta(model).size)
            found = block_mode(model, data, initial_theta(model), max_steps=args.max_steps)
            start = time.perf_counter()
            var = marginal_variances(found.factor)
            laplace_s = time.perf_counter() - start
            sampled = run_sampler(model, data, found, args) if args.sample else None
        except Exception as err:  # noqa: BLE001 (a failed fit is a row)
            rows.append(
                head
                + ["", centred]
                + [""] * (len(COLUMNS) - 8)
                + [f"{mem.peak:.2f}", f"{type(err).__name__}: {err}"[:200]]
            )
            print(" | ".join(rows[-1]), flush=True)
            return
    sd = float(np.exp(found.theta_hat[3 + groups]))
    rows.append(
        head
        + [
            str(d),
            centred,
            f"{design_s:.1f}",
            f"{found.seconds:.1f}",
            str(found.steps),
            str(found.passes),
            str(found.converged),
            f"{found.decrement:.2g}",
            f"{laplace_s:.2f}",
            f"{sd:.3f} +- {np.sqrt(var[3 + groups]) * sd:.3f} (true {GROUP_SD})",
        ]
        + (
            ["-"] * 6
            if sampled is None
            else [
                f"{sampled[0]:.1f}",
                f"{sampled[1]:.1f}",
                f"{sampled[2]:.2f}",
                f"{sampled[3]:.0f}",
                f"{sampled[4]:.0f}",
                f"{sampled[4] / (design_s + found.seconds + sampled[0] + sampled[1]):.3f}",
            ]
        )
        + [
            f"{mem.peak:.2f}",
            ""
            if sampled is None
            else f"arrow proxy HMC, step {args.step_size}, {args.leapfrog} leapfrog steps, "
            f"penalty test batch {args.batch}, {args.chains} chains x {args.sample} draws",
        ]
    )
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
    ap.add_argument(
        "--max-steps", type=int, default=50, help="Newton steps at most (0: one derivative pass, for memory)"
    )
    ap.add_argument("--sample", type=int, default=0, help="draws per chain of arrow proxy HMC after the fit (0: none)")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--step-size", type=float, default=0.5, help="leapfrog step in whitened units")
    ap.add_argument("--leapfrog", type=int, default=8)
    ap.add_argument("--batch", type=int, default=500, help="the penalty test's first minibatch")
    add_results_option(ap)
    args = ap.parse_args()
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    rows, values = [], {}
    for n, groups in zip(args.n, args.groups):
        for centred in args.centred:
            one(n, groups, centred, rows, values, args.name, args)
            save_rows(args, COLUMNS, rows, values, machine, complete=False)
    save_rows(args, COLUMNS, rows, values, machine, complete=True)


if __name__ == "__main__":
    main()
