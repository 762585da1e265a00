"""Exact minibatch MH (Scalable MH with GLM bounds) beside auto_sample's MHminibatch, full-data MH and PyMHSS's MH-SS.

Logistic and Poisson (log link) regression, ``d`` standard normal covariates, prior N(0, 10^2), temperature 1,
float32, one chain per method, side by side in one process (``--sizes``, ``--dims``):

* "SMH-2 indep.": ``warmup(test="smh", proposal="independence", order=2)`` (mode, Laplace, the GLM proxy with
  Laplace-whitened bounds, the proxy posterior's Laplace approximation as an independence proposal);
* "SMH-2 RW" / "SMH-1 RW": the same bounds (order 2 / order 1) with the random walk ``N(0, (1.5/sqrt(d))^2 V)``,
  ``V`` the Laplace covariance: the proposal PyMHSS's MH-SS uses (``kappa = 1.5``, its default);
* "MHminibatch (auto)": ``warmup(test="mhminibatch", proposal="langevin")`` (MHminibatch m = 50, proxy-gradient MALA,
  tuned: the warm-up's defaults when this benchmark was written; today's are proxy HMC and the penalty test);
* "full-data MH": the exact Metropolis test on all N rows with SMH-2's independence proposal;
* "PyMHSS MH-SS-1/2": the authors' ``MH_SS`` (``--pymhss DIR``, a directory holding the ``PyMHSS`` package; it cannot
  be pip-installed offline), same data in float64, given our mode and Laplace covariance (its own mode search needs
  TensorFlow), ``kappa = 1.5``; the modules it imports for plots and its own ESS (plotnine, statsmodels, TensorFlow)
  are stubbed, its ``effective_sample_size`` replaced (ESS is ArviZ's here, as for every row) and ``np.Inf``
  restored for NumPy 2. Logistic only: PyMHSS's "poisson" model has the softplus link ``log(1 + e^eta)``.

Each of our methods runs jitted blocks until ``--time-cap`` seconds (the first call, compile included, is timed
apart and dropped); PyMHSS runs a pilot of 500 steps to time a step, then as many steps as fit the cap.
Columns: points read per step (mean), ESS per 1000 steps and ESS/s (ArviZ bulk ESS, minimum over coordinates),
ESS/s counting the warm-up, data points per effective sample (warm-up excluded), and the largest errors of the
posterior means (in posterior s.d.) and s.d.s (relative) against the reference: self-normalised importance sampling
of ``--ref-draws`` draws from the Laplace approximation (covariance widened 1.2^2) with full-data weights
(its Kish ESS is printed: the reference's own error in the mean is about ``1/sqrt(Kish ESS)`` s.d.). Then SMH-2 indep.'s kernel under ``vmap`` with 64 chains and with 1 chain: chain-steps
per second, side by side (on the first setting).

    nice -n 10 .venv/bin/python benchmarks/exact_mh.py --quick
    nice -n 10 .venv/bin/python benchmarks/exact_mh.py --sizes 100000 1000000 --time-cap 10 \
        --pymhss /tmp/pymhss/mhss --results docs/results/exact_mh.json
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import types

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from peer_runners import cv_kernel_block, timed_blocks

from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.control_variates import model_glm_proxy
from minibatch_mcmc.models import (
    logistic_log_lik,
    logistic_regression,
    make_glm_data,
    poisson_log_lik,
    poisson_regression,
)
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers import build_kernel
from minibatch_mcmc.warmup import warmup

PRIOR_SCALE = 10.0
KAPPA = 1.5
PYMHSS_MEMORY = 2e9
"""Bytes above which PyMHSS MH-SS-2 is not run (its set-up stores an (N, d, d) float64 array)."""
COLUMNS = [
    "family",
    "N",
    "d",
    "method",
    "points/step",
    "accept",
    "ESS/1000 steps",
    "ESS/s",
    "ESS/s incl. warm-up",
    "data/ESS",
    "mean err (sd)",
    "sd err",
    "warm-up s",
    "steps",
]


def model_of(family: str):
    return logistic_regression(PRIOR_SCALE) if family == "logistic" else poisson_regression(PRIOR_SCALE)


def log_lik_of(family: str):
    return logistic_log_lik if family == "logistic" else poisson_log_lik


def reference(family, data, mode, cov, draws, seed):
    """Self-normalised importance sampling from ``N(mode, 1.2^2 cov)``: full-data log-likelihoods (jitted, each row's
    term taken relative to its value at the mode, so float32 sums of N small terms keep the O(1) differences),
    weights in float64; returns the mean, the s.d. and the Kish ESS."""
    rng = np.random.default_rng(seed)
    chol = 1.2 * np.linalg.cholesky(cov)
    z = rng.standard_normal((draws, len(mode)))
    th = mode + z @ chol.T
    lik = log_lik_of(family)
    mode32 = jnp.asarray(mode, jnp.float32)

    @jax.jit
    def sums(thetas, rows):
        base = lik(mode32, rows)
        return jax.lax.map(lambda t: jnp.sum(lik(t, rows) - base), thetas)

    loglik = np.concatenate(
        [np.asarray(sums(jnp.asarray(th[s : s + 250], jnp.float32), data), np.float64) for s in range(0, draws, 250)]
    )
    lw = loglik - 0.5 * np.sum(th * th, 1) / PRIOR_SCALE**2 + 0.5 * np.sum(z * z, 1)
    w = np.exp(lw - lw.max())
    w /= w.sum()
    mean = w @ th
    return mean, np.sqrt(w @ (th - mean) ** 2), 1.0 / np.sum(w * w)


def figures(name, draws, seconds, warm_s, points, accept, ref, extra=""):
    """One row's figures from one chain's draws (steps x d)."""
    ess = float(np.min(az.ess(az.convert_to_dataset(draws[None]), method="bulk").to_array().values))
    steps = len(draws)
    mean_err = float(np.max(np.abs(draws.mean(0) - ref[0]) / ref[1]))
    sd_err = float(np.max(np.abs(draws.std(0) / ref[1] - 1.0)))
    return dict(
        method=name,
        points=points,
        accept=accept,
        ess_per_1000=1000 * ess / steps,
        ess_s=ess / seconds,
        ess_s_warm=ess / (seconds + warm_s),
        data_per_ess=points * steps / ess,
        mean_err=mean_err,
        sd_err=sd_err,
        warm_s=warm_s,
        steps=steps,
        seconds=seconds,
        extra=extra,
    )


def run_kernel(name, kernel, start, data, args, key, warm_s, ref, block_steps=None):
    block = cv_kernel_block(kernel, block_steps or args.block)
    draws, ends, _, _, st = timed_blocks(block, kernel.init(jnp.asarray(start, jnp.float32)), key, data, args.time_cap)
    return figures(name, draws, float(ends[-1]), warm_s, float(st[:, 1].mean()), float(st[:, 0].mean()), ref)


def load_pymhss(path):
    """The authors' ``PyMHSS.algorithms`` from ``path``, its unused heavy imports stubbed (see the module docstring)."""
    for mod in ("plotnine", "statsmodels", "statsmodels.api", "tensorflow"):
        sys.modules.setdefault(mod, types.ModuleType(mod))
    if not hasattr(np, "Inf"):
        np.Inf = np.inf  # removed in NumPy 2; MH_SS writes -np.Inf for a rejection
    sys.path.insert(0, str(path))
    os.environ.setdefault("TQDM_DISABLE", "1")
    from PyMHSS import algorithms

    algorithms.effective_sample_size = lambda x: np.nan
    return algorithms


def run_pymhss(alg, order, data, mode, cov, args, ref, warm_s, seed):
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    np.random.seed(seed)
    t0 = time.perf_counter()
    pilot = alg.MH_SS(y, x, cov, mode, 0, 500, "logistic", "vectorised", taylor_order=order, kappa=KAPPA)
    setup = time.perf_counter() - t0 - pilot["cpu_time"]
    steps = max(1000, int(args.time_cap / (pilot["cpu_time"] / 500)))
    out = alg.MH_SS(y, x, cov, mode, 0, steps, "logistic", "vectorised", taylor_order=order, kappa=KAPPA)
    points = float(np.mean(out["BoverN"]) * len(y))
    return figures(
        f"PyMHSS MH-SS-{order}",
        out["parameters"],
        out["cpu_time"],
        warm_s + setup,
        points,
        out["acc_rate"],
        ref,
        extra=f"setup {setup:.1f} s",
    )


def chains_speed(kernel, start, data, chains, steps, key):
    """Chain-steps per second of ``chains`` vmapped chains over ``steps`` steps (compile excluded)."""
    temp = jnp.float32(1.0)
    states = jax.vmap(kernel.init)(jnp.tile(jnp.asarray(start, jnp.float32), (chains, 1)))

    @jax.jit
    def block(states, k):
        def body(st, kk):
            st, _ = jax.vmap(lambda s, q: kernel.step(q, s, data, temp))(st, jax.random.split(kk, chains))
            return st, None

        return jax.lax.scan(body, states, jax.random.split(k, steps))[0]

    jax.block_until_ready(block(states, key))
    t0 = time.perf_counter()
    jax.block_until_ready(block(states, jax.random.fold_in(key, 1)))
    return chains * steps / (time.perf_counter() - t0)


def one_setting(family, n, d, args, alg, key, chains):
    data, _ = make_glm_data(jax.random.fold_in(key, n * 100 + d), n, d, family)
    model = model_of(family)
    zeros = jnp.zeros(d, jnp.float32)
    t0 = time.perf_counter()
    w = warmup(model, data, zeros, key=1, test="smh", proposal="independence", order=2, num_starts=0)
    warm_smh = time.perf_counter() - t0
    mode, cov = np.asarray(w.centre, np.float64), np.asarray(w.covariance, np.float64)
    chol = np.linalg.cholesky(cov)
    t0 = time.perf_counter()
    ref = reference(family, data, mode, cov, args.ref_draws, seed=n + d)
    print(
        f"{family} N={n} d={d}: SMH warm-up {warm_smh:.1f} s; reference (IS, Kish ESS {ref[2]:.0f}) "
        f"{time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    start = np.asarray(mode + chol @ np.random.default_rng(n).standard_normal(d), np.float32)
    rows = []
    smh = w.test
    rows.append(
        run_kernel(
            "SMH-2 indep.",
            build_kernel(model, w.proposal, smh, n, w.estimator),
            start,
            data,
            args,
            jax.random.fold_in(key, 1),
            warm_smh,
            ref,
        )
    )
    walk = scaled_random_walk(jnp.asarray(chol, jnp.float32), KAPPA / math.sqrt(d))
    rows.append(
        run_kernel(
            "SMH-2 RW",
            build_kernel(model, walk, smh, n, w.estimator),
            start,
            data,
            args,
            jax.random.fold_in(key, 2),
            warm_smh,
            ref,
        )
    )
    t0 = time.perf_counter()
    est1 = model_glm_proxy(model, data, w.centre, order=1, whiten=chol)
    warm1 = warm_smh + time.perf_counter() - t0
    rows.append(
        run_kernel(
            "SMH-1 RW",
            build_kernel(model, walk, smh, n, est1),
            start,
            data,
            args,
            jax.random.fold_in(key, 3),
            warm1,
            ref,
        )
    )
    t0 = time.perf_counter()
    wa = warmup(model, data, zeros, key=2, num_starts=0, test="mhminibatch", proposal="langevin")
    warm_auto = time.perf_counter() - t0
    rows.append(
        run_kernel(
            "MHminibatch (auto)",
            build_kernel(model, wa.proposal, wa.test, n, wa.estimator),
            start,
            data,
            args,
            jax.random.fold_in(key, 4),
            warm_auto,
            ref,
        )
    )
    rows.append(
        run_kernel(
            "full-data MH",
            build_kernel(model, w.proposal, MetropolisTest(), n),
            start,
            data,
            args,
            jax.random.fold_in(key, 5),
            warm_smh,
            ref,
            block_steps=max(10, min(args.block, 5 * 10**6 // n)),
        )
    )
    for order in (1, 2):
        if alg is None:
            print(f"  PyMHSS MH-SS-{order}: skipped ({args.pymhss_reason})")
        elif family != "logistic":
            print(f"  PyMHSS MH-SS-{order}: skipped (its Poisson model has the softplus link, not the log link)")
        elif order == 2 and n * d * d * 8 > PYMHSS_MEMORY:
            print(
                f"  PyMHSS MH-SS-2: skipped (its set-up keeps every row's d x d Hessian: {n * d * d * 8 / 1e9:.1f} GB)"
            )
        else:
            rows.append(run_pymhss(alg, order, data, mode, cov, args, ref, w.cost["mode"].seconds, seed=order))
    for r in rows:
        r.update(family=family, n=n, d=d, ref_ess=ref[2])
        print(
            f"  {r['method']:20s} points/step {r['points']:10.3g}  accept {r['accept']:.2f}  ESS/1000 {r['ess_per_1000']:6.1f}"
            f"  ESS/s {r['ess_s']:9.1f}  incl. warm-up {r['ess_s_warm']:8.1f}  data/ESS {r['data_per_ess']:10.3g}"
            f"  mean err {r['mean_err']:.3f}  sd err {r['sd_err']:.3f}  {r['extra']}",
            flush=True,
        )
    speed = None
    if chains:
        one = chains_speed(build_kernel(model, w.proposal, smh, n, w.estimator), start, data, 1, args.chain_steps, key)
        many = chains_speed(
            build_kernel(model, w.proposal, smh, n, w.estimator), start, data, args.chains, args.chain_steps, key
        )
        speed = dict(family=family, n=n, d=d, one=one, many=many, chains=args.chains)
        print(f"  chain-steps/s: 1 chain {one:.0f}, {args.chains} chains {many:.0f} ({many / one:.1f}x)", flush=True)
    return rows, speed


def fmt(v, digits=3):
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def table_row(r: dict) -> list[str]:
    """One method's row of the ``exact_mh`` table."""
    return [
        r["family"],
        f"{r['n']:,}",
        str(r["d"]),
        r["method"],
        fmt(r["points"]),
        f"{r['accept']:.2f}",
        f"{r['ess_per_1000']:.0f}",
        fmt(r["ess_s"]),
        fmt(r["ess_s_warm"]),
        fmt(r["data_per_ess"]),
        f"{r['mean_err']:.3f}",
        f"{r['sd_err']:.3f}",
        f"{r['warm_s']:.1f}",
        str(r["steps"]),
    ]


def speed_row(s: dict) -> list[str]:
    """One setting's row of the ``exact_mh_chains`` table."""
    return [
        s["family"],
        f"{s['n']:,}",
        str(s["d"]),
        f"{s['one']:.0f}",
        f"{s['many']:.0f}",
        f"{s['many'] / s['one']:.1f}",
    ]


def results_values(rows: list[dict], speeds: list[dict], load: float, name: str = "exact_mh") -> dict[str, str]:
    """The figures the prose quotes: SMH-2 indep.'s and MH-SS-2's points per step and ESS/s per setting, their ESS/s
    ratios (SMH-2 indep. and SMH-2 RW over MH-SS-2), the 64-over-1-chain ratio and the load average."""
    values = {f"{name}.load": f"{load:.1f}"}
    by = {(r["family"], r["n"], r["d"], r["method"]): r for r in rows}
    for (family, n, d, method), r in by.items():
        k = f"{name}.{family}.{n}.{d}.{method.split()[0]}"
        if method in ("SMH-2 indep.", "PyMHSS MH-SS-2"):
            values[k + ".points"] = fmt(r["points"])
            values[k + ".ess_s"] = fmt(r["ess_s"])
        mhss = by.get((family, n, d, "PyMHSS MH-SS-2"))
        if mhss is not None and method in ("SMH-2 indep.", "SMH-2 RW"):
            tag = "indep" if method == "SMH-2 indep." else "rw"
            values[f"{name}.{family}.{n}.{d}.ratio_{tag}"] = f"{r['ess_s'] / mhss['ess_s']:.1f}"
    for s in speeds:
        values[f"{name}.{s['family']}.{s['n']}.chains_ratio"] = f"{s['many'] / s['one']:.1f}"
    return values


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["logistic", "poisson"])
    p.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000])
    p.add_argument("--dims", nargs="+", type=int, default=[10])
    p.add_argument("--time-cap", type=float, default=10.0)
    p.add_argument("--block", type=int, default=500)
    p.add_argument("--ref-draws", type=int, default=2000)
    p.add_argument(
        "--chains", type=int, default=64, help="chains of the vmap speed comparison, first setting only (0: skip)"
    )
    p.add_argument("--chain-steps", type=int, default=500)
    p.add_argument("--pymhss", default=None, metavar="DIR", help="directory holding the PyMHSS package")
    p.add_argument("--name", default="exact_mh", help="name of the tables and prefix of the values in the results file")
    p.add_argument("--quick", action="store_true", help="N = 20,000, logistic, 3 s per method, no results file")
    add_results_option(p)
    args = p.parse_args(argv)
    if args.quick:
        args.families, args.sizes, args.time_cap, args.ref_draws, args.results = ["logistic"], [20_000], 3.0, 500, None
    alg, args.pymhss_reason = None, "no --pymhss DIR given"
    if args.pymhss:
        try:
            alg = load_pymhss(args.pymhss)
        except ImportError as err:
            args.pymhss_reason = f"PyMHSS not importable from {args.pymhss}: {err}"
    load = os.getloadavg()[0]
    print(f"load average at start {load:.2f}, {os.cpu_count()} cores, JAX {jax.default_backend()}", flush=True)
    rows, speeds = [], []
    key = jax.random.key(0)
    for family in args.families:
        for n in args.sizes:
            for d in args.dims:
                r, s = one_setting(family, n, d, args, alg, key, chains=args.chains and not speeds)
                rows += r
                speeds += [s] if s else []
    values = results_values(rows, speeds, load, args.name)
    tables = {args.name: table(COLUMNS, [table_row(r) for r in rows])}
    if speeds:
        tables[f"{args.name}_chains"] = table(
            ["family", "N", "d", "1 chain (chain-steps/s)", f"{args.chains} chains", "ratio"],
            [speed_row(s) for s in speeds],
        )
    save(
        args.results,
        "exact_mh",
        config=args,
        values=values,
        tables=tables,
        extra={"rows": rows, "speeds": speeds, "load_at_start": load},
    )


if __name__ == "__main__":
    main()
