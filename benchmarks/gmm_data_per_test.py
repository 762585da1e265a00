"""Data consumed per MH test on the Section 6.1 mixture (Seita et al. Table 1 / Table 4).

Runs MHminibatch for 10 trials (10 independent chains, 3000 samples each, m=50, K=10^4,
random-walk s.d. 0.15, N=10^6) at sigma=1 and at the largest shipped sigma whose correction
error is at most 9e-4 (the paper's own correction error at sigma=1), plus a full-data Barker
run as the reference. Prints mean minibatch size +- s.d. over trials, the binned Poisson
log-likelihood (Equation 40) and chi-squared against the exact posterior on a grid, and ratios.

    .venv/bin/python benchmarks/gmm_data_per_test.py [--trials 10] [--num-samples 3000] [--results docs/results/gmm_data_per_test.json]

The MHminibatch sigma=1 row has the settings and seed of the MHminibatch row of
``minibatch-mcmc reproduce gmm`` (Table 1), so the two give the same figures.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import repository  # noqa: F401  (the repository root on sys.path, for reproductions/)

from minibatch_mcmc.acceptance import BarkerTest, mh_minibatch
from minibatch_mcmc.acceptance.correction import correction_error, largest_sigma_with_error
from minibatch_mcmc.models import gaussian_mixture
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample
from reproductions.gmm import GMMConfig, exact_grid, make_data, sample_quality
from reproductions.results import results_payload, table, write_results

PAPER_MEAN, PAPER_SD = 182.3, 11.4


def run(cfg: GMMConfig, data, test, trials: int, seed: int):
    """``trials`` independent chains of one test; returns the result and per-trial metrics."""
    res = sample(
        gaussian_mixture(),
        data,
        jnp.asarray(cfg.initial, jnp.float32),
        proposal=random_walk(scale=cfg.proposal_sd),
        test=test,
        num_samples=cfg.num_samples,
        num_chains=trials,
        key=seed,
        temperature=cfg.temperature,
        progress=False,
    )
    return res


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--num-samples", type=int, default=3000)
    ap.add_argument("--reference-samples", type=int, default=3000)
    ap.add_argument("--max-error", type=float, default=9e-4)
    ap.add_argument(
        "--out", default="runs/gmm-data-per-test", help="folder of results.json (default runs/gmm-data-per-test)"
    )
    ap.add_argument(
        "--results",
        default=None,
        metavar="FILE",
        help="also write the results file to FILE (docs/results/gmm_data_per_test.json)",
    )
    args = ap.parse_args()

    cfg = GMMConfig(num_samples=args.num_samples)
    data = make_data(cfg)
    grid = exact_grid(cfg, np.asarray(data))
    big_sigma = largest_sigma_with_error(args.max_error)
    print(
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}"
    )
    print(
        f"N={cfg.n_data:,}  K={cfg.temperature:g}  m={cfg.batch_size}  random-walk s.d. {cfg.proposal_sd}  "
        f"{cfg.num_samples} samples x {args.trials} trials"
    )
    rows = []
    literal = cfg._replace(proposal_sd=float(np.sqrt(cfg.proposal_sd)))
    for label, sigma, c in ((None, 1.0, cfg), (None, big_sigma, cfg), ("cov 0.15 I (s.d. 0.387)", 1.0, literal)):
        t0 = time.perf_counter()
        res = run(c, data, mh_minibatch(cfg.batch_size, sigma=sigma), args.trials, seed=1)
        wall = time.perf_counter() - t0
        bs = res.records["batch_size"].astype(float)
        per_trial = bs.mean(axis=1)
        q = [sample_quality(np.asarray(res.positions)[c], grid) for c in range(args.trials)]
        rows.append(
            {
                "method": f"MHminibatch sigma={sigma:g}" + (f", {label}" if label else ""),
                "corr_err": correction_error(sigma),
                "mean_bs": per_trial.mean(),
                "sd_bs": per_trial.std(ddof=1) if args.trials > 1 else 0.0,
                "accept": res.records["accepted"].mean(),
                "eq40": np.mean([x["poisson_loglik_eq40"] for x in q]),
                "eq40_sd": np.std([x["poisson_loglik_eq40"] for x in q], ddof=1) if args.trials > 1 else 0.0,
                "chi2": np.mean([x["chi_squared"] for x in q]),
                "chi2_sd": np.std([x["chi_squared"] for x in q], ddof=1) if args.trials > 1 else 0.0,
                "dof": q[0]["chi_squared_dof"],
                "wall": wall,
            }
        )
    ref_cfg = cfg._replace(num_samples=args.reference_samples)
    t0 = time.perf_counter()
    res = run(ref_cfg, data, BarkerTest(), min(args.trials, 2), seed=2)
    wall = time.perf_counter() - t0
    q = [sample_quality(np.asarray(res.positions)[c], grid) for c in range(res.num_chains)]
    rows.append(
        {
            "method": "full-data Barker",
            "corr_err": 0.0,
            "mean_bs": float(cfg.n_data),
            "sd_bs": 0.0,
            "accept": res.records["accepted"].mean(),
            "eq40": np.mean([x["poisson_loglik_eq40"] for x in q]),
            "eq40_sd": np.std([x["poisson_loglik_eq40"] for x in q], ddof=1) if len(q) > 1 else 0.0,
            "chi2": np.mean([x["chi_squared"] for x in q]),
            "chi2_sd": np.std([x["chi_squared"] for x in q], ddof=1) if len(q) > 1 else 0.0,
            "dof": q[0]["chi_squared_dof"],
            "wall": wall,
        }
    )
    print()
    print(
        f"{'method':<44} {'corr. err':>9} {'mean batch +- sd':>20} {'accept':>7} {'Eq.40 loglik':>18} {'chi2 (dof)':>22} {'wall s':>7}"
    )
    for r in rows:
        print(
            f"{r['method']:<44} {r['corr_err']:>9.1e} {r['mean_bs']:>11.1f} +- {r['sd_bs']:<6.1f} {r['accept']:>7.3f} "
            f"{r['eq40']:>9.1f} +- {r['eq40_sd']:<6.1f} {r['chi2']:>9.1f} +- {r['chi2_sd']:<6.1f}({r['dof']}) {r['wall']:>7.1f}"
        )
    print(f"{'paper MHminibatch (Table 1)':<44} {'8.9e-04':>9} {PAPER_MEAN:>11.1f} +- {PAPER_SD:<6.1f}")
    print()
    print(f"ratio mean batch, sigma=1 / paper:            {rows[0]['mean_bs'] / PAPER_MEAN:.3f}")
    print(f"ratio mean batch, sigma={big_sigma:g} / sigma=1:       {rows[1]['mean_bs'] / rows[0]['mean_bs']:.3f}")
    print(f"ratio data per test, full data / MHminibatch sigma=1: {cfg.n_data / rows[0]['mean_bs']:.0f}")
    print(
        f"ratio mean batch, literal covariance reading / s.d. reading (sigma=1): {rows[2]['mean_bs'] / rows[0]['mean_bs']:.2f}"
    )
    print("(chi2 and Eq. 40 of the literal-covariance row use the same grid; its chain explores the same posterior)")
    tables, values = results_tables(rows, big_sigma)
    config = cfg._asdict() | {
        "trials": args.trials,
        "reference_samples": args.reference_samples,
        "reference_chains": min(args.trials, 2),
        "max_error": args.max_error,
        "seed_minibatch": 1,
        "seed_reference": 2,
    }
    payload = results_payload(
        "gmm_data_per_test", " ".join(["python", *sys.argv]), config=config, tables=tables, values=values
    )
    for path in write_results(args.out, payload, copy_to=args.results):
        print(f"wrote {path}")


def results_tables(rows: list[dict], big_sigma: float) -> tuple[dict, dict]:
    """The benchmark's table (with the paper's row) and the figures the docs' prose quotes, as strings."""
    body = [
        [
            r["method"],
            f"{r['corr_err']:.1e}",
            f"{r['mean_bs']:.1f} +- {r['sd_bs']:.1f}",
            f"{r['accept']:.3f}",
            f"{r['eq40']:.1f} +- {r['eq40_sd']:.1f}",
            f"{r['chi2']:.1f} +- {r['chi2_sd']:.1f} ({r['dof']})",
            f"{r['wall']:.1f}",
        ]
        for r in rows
    ]
    body.append(["paper MHminibatch (Table 1)", "8.9e-04", f"{PAPER_MEAN:.1f} +- {PAPER_SD:.1f}", "", "", "", ""])
    columns = [
        "method",
        "corr. err",
        "mean batch +- s.d.",
        "acceptance",
        "Eq. 40 loglik",
        "chi-squared (dof)",
        "wall s",
    ]
    mb, big, literal, ref = rows
    values = {
        "gmm_data_per_test.big_sigma": f"{big_sigma:g}",
        "gmm_data_per_test.sigma1_mean": f"{mb['mean_bs']:.1f} +- {mb['sd_bs']:.1f}",
        "gmm_data_per_test.big_sigma_mean": f"{big['mean_bs']:.1f}",
        "gmm_data_per_test.big_over_sigma1": f"{big['mean_bs'] / mb['mean_bs']:.2f}",
        "gmm_data_per_test.inverse_sigma_squared": f"{1 / big_sigma**2:.2f}",
        "gmm_data_per_test.sigma1_over_paper": f"{mb['mean_bs'] / PAPER_MEAN:.2f}",
        "gmm_data_per_test.full_over_sigma1": f"{ref['mean_bs'] / mb['mean_bs']:,.0f}",
        "gmm_data_per_test.literal_over_sd": f"{literal['mean_bs'] / mb['mean_bs']:.1f}",
        "gmm_data_per_test.literal_mean": f"{literal['mean_bs']:.0f}",
        "gmm_data_per_test.sigma1_chi2": f"{mb['chi2']:.0f} +- {mb['chi2_sd']:.0f}",
        "gmm_data_per_test.big_sigma_chi2": f"{big['chi2']:.0f} +- {big['chi2_sd']:.0f}",
        "gmm_data_per_test.barker_chi2": f"{ref['chi2']:.0f} +- {ref['chi2_sd']:.0f}",
        "gmm_data_per_test.sigma1_wall": f"{mb['wall']:.1f}",
        "gmm_data_per_test.barker_wall": f"{ref['wall']:.1f}",
    }
    return {"gmm_data_per_test": table(columns, body)}, values


if __name__ == "__main__":
    main()
