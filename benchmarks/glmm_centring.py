"""Issue 31's 16-group logistic shape (``benchmarks/glmm_proxy.py``'s design) fitted as written centred and
non-centred with ``glmm_model``'s per-level centring (``models.glmm_centring``), against a reference.

    PYTHONPATH=src python benchmarks/glmm_centring.py --rows 327346 --written false true [--as-written]

The reference (``laplace_quadrature``): the posterior of the group s.d. ``tau`` on a grid of ``log tau`` with
``p(y | tau)`` from the Laplace approximation of the integral over ``(beta, u)`` at each ``tau`` (Newton in float64 on
all rows; groups of 30 rows and more make the conditional posterior near Gaussian), and each fixed effect's mean and
s.d. from the mixture over the grid of the conditional modes and Laplace variances. Each run records the weights the
pilot chose, the warm-up's phases (rows, passes over ``N``, seconds), sampling and check seconds, acceptance, rows
per test, the warnings raised, and the posterior of ``tau`` and ``beta[0..2]``; results go to
``docs/results/glmm_centring.json`` (one entry per rows/written form, merged into the file).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_results import command, table  # noqa: E402
from glmm_proxy import simulated_design  # noqa: E402

import minibatch_mcmc as mm  # noqa: E402
from minibatch_mcmc.models.glmm import GLMMPrior, glmm_model, initial_theta, prior_scales  # noqa: E402
from reproductions.results import results_payload, save_results  # noqa: E402

PRIOR = GLMMPrior(sd="half_normal", sd_scale=1.0)
RESULTS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "results" / "glmm_centring.json"
EFFECTS = 3
"""Fixed effects reported: the intercept and the first two slopes."""


def conditional_mode(
    x: np.ndarray,
    codes: np.ndarray,
    y: np.ndarray,
    groups: int,
    loc: np.ndarray,
    scale: np.ndarray,
    tau: float,
    start: np.ndarray,
) -> tuple[np.ndarray, float, np.ndarray]:
    """``(mode of (beta, u), log joint there, inverse of minus the Hessian)`` at fixed ``tau`` (Newton, float64)."""
    p = x.shape[1]
    theta = start.copy()
    prec = np.r_[1.0 / scale**2, np.full(groups, 1.0 / tau**2)]
    centre = np.r_[loc, np.zeros(groups)]
    for _ in range(50):
        eta = x @ theta[:p] + theta[p:][codes]
        prob = 1.0 / (1.0 + np.exp(-eta))
        r, w = y - prob, prob * (1.0 - prob)
        grad = np.r_[x.T @ r, np.bincount(codes, r, minlength=groups)] - prec * (theta - centre)
        hxx = (x.T * w) @ x
        hxz = np.stack([np.bincount(codes, w * x[:, j], minlength=groups) for j in range(p)])
        hzz = np.diag(np.bincount(codes, w, minlength=groups))
        neg_h = np.block([[hxx, hxz], [hxz.T, hzz]]) + np.diag(prec)
        step = np.linalg.solve(neg_h, grad)
        theta = theta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    eta = x @ theta[:p] + theta[p:][codes]
    log_joint = (
        np.sum(y * eta - np.logaddexp(0.0, eta)) - 0.5 * np.sum(prec * (theta - centre) ** 2) - groups * np.log(tau)
    )
    return theta, log_joint, np.linalg.inv(neg_h)


def laplace_quadrature(design, grid: np.ndarray) -> dict:
    """The reference of the module docstring: ``tau``'s and ``beta[:EFFECTS]``'s posterior mean and s.d."""
    scales = prior_scales(design, "bernoulli", PRIOR)
    x, y = np.asarray(design.x, np.float64), np.asarray(design.y, np.float64)
    codes, groups = np.asarray(design.factors[0].codes), len(design.factors[0].levels)
    theta = np.r_[scales.beta_loc, np.zeros(groups)]
    logs, means, variances = [], [], []
    for tau in grid:
        theta, log_joint, cov = conditional_mode(x, codes, y, groups, scales.beta_loc, scales.beta_scale, tau, theta)
        log_marginal = log_joint + 0.5 * np.linalg.slogdet(cov)[1]
        # tau ~ HalfNormal(1); the grid is even in log tau, hence the Jacobian tau
        logs.append(log_marginal - 0.5 * tau**2 + np.log(tau))
        means.append(theta[:EFFECTS])
        variances.append(np.diag(cov)[:EFFECTS])
    weight = np.exp(np.array(logs) - max(logs))
    weight /= weight.sum()
    means, variances = np.array(means), np.array(variances)
    beta_mean = weight @ means
    beta_sd = np.sqrt(weight @ (variances + means**2) - beta_mean**2)
    tau_mean = float(weight @ grid)
    return {
        "tau": [tau_mean, float(np.sqrt(weight @ grid**2 - tau_mean**2))],
        "beta": [[float(m), float(s)] for m, s in zip(beta_mean, beta_sd)],
        "grid": [float(grid[0]), float(grid[-1]), len(grid)],
        "edge_mass": float(weight[0] + weight[-1]),
    }


def fit(rows: int, written: str, as_written: bool, samples: int) -> dict:
    """One ``auto_sample`` fit and its record."""
    centred = {"auto": "auto", "true": True, "false": False}[written]
    design = simulated_design(rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        model, data = glmm_model(design, "bernoulli", centred=centred, prior=PRIOR, sample_as_written=as_written)
        pilot = time.perf_counter() - start
        result, warm = mm.auto_sample(
            model, data, initial_theta(model), num_samples=samples, num_chains=4, key=0, progress=False
        )
        post = result.summary()["posterior"]
    weights = np.asarray(model.glmm.layout.centring[0]).ravel()
    return {
        "rows": rows,
        "written": written,
        "as_written": as_written,
        "weights": [round(float(w), 3) for w in weights],
        "pilot_seconds": round(pilot, 2),
        "phases": {
            k: {"rows": int(v.data), "passes": round(float(v.passes), 3), "seconds": round(float(v.seconds), 1)}
            for k, v in warm.cost.items()
        },
        "kind": warm.kind,
        "stratum": 0 if warm.influence is None else int(warm.influence.rows.size),
        "acceptance": float(np.mean(result.records["accepted"])),
        "rows_per_test": float(np.mean(result.records["batch_size"]) + np.mean(result.records["hidden_data"])),
        "tau": [
            float(post.loc["sd_g[0]", "mean"]),
            float(post.loc["sd_g[0]", "sd"]),
            float(post.loc["sd_g[0]", "ess_bulk"]),
        ],
        "beta": [
            [
                float(post.loc[f"beta[{j}]", "mean"]),
                float(post.loc[f"beta[{j}]", "sd"]),
                float(post.loc[f"beta[{j}]", "ess_bulk"]),
            ]
            for j in range(EFFECTS)
        ],
        "warnings": [str(w.message)[:300] for w in caught],
    }


def fmt(pair: list) -> str:
    """``"mean +- sd"``."""
    return f"{pair[0]:.3f} +- {pair[1]:.3f}"


def result_table(runs: dict, references: dict) -> dict:
    """One row per run and per reference: rows, form, weights, passes per phase, acceptance, rows/test, posterior."""
    rows = []
    for key in sorted(references):
        ref = references[key]["reference"]
        rows.append(
            [
                f"{int(key):,}",
                "reference (Laplace quadrature in tau)",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                f"{references[key]['seconds']:.0f}",
                fmt(ref["tau"]),
                fmt(ref["beta"][0]),
                fmt(ref["beta"][1]),
            ]
        )
    for key in sorted(runs):
        r = runs[key]
        ph = r["phases"]
        form = (
            f"written {'centred' if r['written'] == 'true' else 'non-centred' if r['written'] == 'false' else 'auto'}"
        )
        form += ", sampled as written" if r["as_written"] else ", sampled per level"
        form += f", exact stratum {r['stratum']} rows" if r["stratum"] else ", no stratum"
        warm = sum(v["passes"] for k, v in ph.items() if k not in ("sampling", "check"))
        seconds = "/".join(
            f"{ph[k]['seconds']:.0f}" for k in ("mode", "proxy", "tuning", "sampling", "check") if k in ph
        )
        rows.append(
            [
                f"{r['rows']:,}",
                form,
                f"{min(r['weights']):.2f}-{max(r['weights']):.4f}",
                f"{ph['mode']['passes']:.2f}",
                f"{warm:.2f}",
                f"{r['acceptance']:.3f}",
                f"{r['rows_per_test']:,.0f}" + (f" + {r['stratum']:,}" if r["stratum"] else ""),
                str(len(r["warnings"])),
                seconds,
                fmt(r["tau"]),
                fmt(r["beta"][0]),
                fmt(r["beta"][1]),
            ]
        )
    return table(
        [
            "rows",
            "form",
            "weights",
            "mode passes",
            "warm-up passes",
            "acceptance",
            "rows/test (+ stratum)",
            "warnings",
            "seconds (mode/proxy/tuning/sampling/check; reference: all)",
            "tau",
            "beta[0]",
            "beta[1]",
        ],
        rows,
    )


def merge(entries: list[dict]) -> None:
    """Merge ``entries`` into the results file (same key replaced) and rewrite its payload and table."""
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs, references = dict(old.get("runs", {})), dict(old.get("references", {}))
    for e in entries:
        if "reference" in e:
            references[str(e["rows"])] = e
        else:
            runs[f"{e['rows']}_{e['written']}{'_as_written' if e['as_written'] else ''}_stratum{e['stratum']}"] = e
    payload = results_payload(
        "glmm_centring",
        command(),
        tables={"glmm_centring": result_table(runs, references)},
        extra={"runs": runs, "references": references},
    )
    save_results(RESULTS, payload)


def main() -> None:
    """Fit (and/or compute the reference) and merge the records into the results file."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=327_346)
    parser.add_argument("--written", nargs="*", default=["false", "true"], choices=("auto", "true", "false"))
    parser.add_argument("--as-written", action="store_true")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--reference", action="store_true", help="compute the Laplace-quadrature reference")
    parser.add_argument(
        "--merge", default=None, help="merge the JSON lines of an earlier run's output instead of fitting"
    )
    args = parser.parse_args()
    if args.merge:
        merge([json.loads(line) for line in pathlib.Path(args.merge).read_text().splitlines() if line.startswith("{")])
        return
    entries = []
    if args.reference:
        start = time.perf_counter()
        ref = laplace_quadrature(simulated_design(args.rows), np.exp(np.linspace(np.log(0.05), np.log(2.0), 60)))
        entries.append({"rows": args.rows, "reference": ref, "seconds": round(time.perf_counter() - start, 1)})
        print(json.dumps(entries[-1]), flush=True)
    for written in args.written:
        entries.append(fit(args.rows, written, args.as_written, args.samples))
        print(json.dumps(entries[-1]), flush=True)
    merge(entries)


if __name__ == "__main__":
    main()
