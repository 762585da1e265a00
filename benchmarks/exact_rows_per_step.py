"""Rows read per step by the exact bound-based tests (Scalable MH, MH-SS, TunaMH) on logistic regression, d=10, K=1.

For each ``N``: simulated data (``make_logistic_data``, key 0), the mode and Laplace covariance by float64 Newton
steps (prior N(0, 5^2)), ``logistic_proxy`` of order 1 and 2 around the mode with Laplace-whitened bounds and an
alias table, then 4 chains x ``--draws`` draws from Laplace starts with two Laplace-shaped proposals: a random walk
``N(theta, (2.38^2 / d) Sigma)`` and the independence proposal ``N(mode, Sigma)``. Reported per row: acceptance, mean
rows evaluated per step, mean Poisson mean, fallback steps, steps with a bound exceeded, sampling seconds per 1000
draws per chain (one compilation included). Rates, not efficiency: ESS is left to the peers benchmark.

    .venv/bin/python benchmarks/exact_rows_per_step.py [--sizes 100000 1000000] [--draws 2000]
        [--results docs/results/exact_rows_per_step.json]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import mhss, scalable_mh, tunamh
from minibatch_mcmc.control_variates.glm import logistic_proxy
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.proposals import independence_gaussian
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers import sample

D, PRIOR = 10, 5.0
COLUMNS = [
    "N",
    "test",
    "order",
    "proposal",
    "acceptance",
    "rows/step",
    "Poisson mean",
    "fallback steps",
    "bound exceeded",
    "s/1000 draws",
]


def laplace(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mode and Laplace covariance of the logistic regression by float64 Newton steps."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    th = np.zeros(x.shape[1])
    for _ in range(25):
        p = 1 / (1 + np.exp(-x @ th))
        h = -(x.T * (p * (1 - p))) @ x - np.eye(x.shape[1]) / PRIOR**2
        th = th - np.linalg.solve(h, x.T @ (y - p) - th / PRIOR**2)
    return th, np.linalg.inv(-h)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--draws", type=int, default=2000)
    add_results_option(parser)
    args = parser.parse_args()
    model = logistic_regression(prior_scale=PRIOR)
    rows, values = [], {}
    for n in args.sizes:
        data, _ = make_logistic_data(jax.random.key(0), n, D)
        mode, cov = laplace(data)
        chol = np.linalg.cholesky(cov)
        starts = jnp.asarray(mode + (chol @ np.random.default_rng(0).standard_normal((D, 4))).T, jnp.float32)
        proposals = {
            "random walk": scaled_random_walk(jnp.asarray(chol, jnp.float32), 2.38 / np.sqrt(D)),
            "independence": independence_gaussian(mode, cov=cov),
        }
        for order in (1, 2):
            est = logistic_proxy(data, mode.astype(np.float32), order=order, whiten=chol)
            for test in (scalable_mh(), mhss(), tunamh()):
                for pname, proposal in proposals.items():
                    t = time.perf_counter()
                    res = sample(
                        model,
                        data,
                        starts,
                        proposal=proposal,
                        test=test,
                        estimator=est,
                        num_samples=args.draws,
                        num_chains=4,
                        key=1,
                        batched_init=True,
                        progress=False,
                    )
                    secs = (time.perf_counter() - t) / args.draws * 1000
                    rec = {k: np.asarray(v) for k, v in res.records.items()}
                    row = [
                        n,
                        test.name,
                        order,
                        pname,
                        f"{rec['accepted'].mean():.3f}",
                        f"{rec['batch_size'].mean():.3f}",
                        f"{rec['expected_batch_size'].mean():.3f}",
                        int(rec["fallback"].sum()),
                        int(rec["bound_exceeded"].sum()),
                        f"{secs:.2f}",
                    ]
                    print(" | ".join(str(c) for c in row), flush=True)
                    rows.append(row)
                    values[f"rows_{test.name}{order}_{pname.replace(' ', '_')}_{n}"] = float(rec["batch_size"].mean())
    save(
        args.results,
        "exact_rows_per_step",
        config=args,
        tables={"exact_rows_per_step": table(COLUMNS, rows)},
        values=values,
    )


if __name__ == "__main__":
    main()
