"""Effective draws per draw of each proposal ``auto_sample`` offers, on logistic regression d=10, N=10^5, K=1,
with MHminibatch (a Barker-type test, m=50), the penalty test (Metropolis-type, m=50, sigma_max=1) and AustereMH
(a Metropolis-type minibatch t-test, m=50, epsilon=0.01).

For each pair: ``auto_sample`` (mode, Laplace, second-order proxy, tuning where the proposal has a scale) from
zeros, then 4 chains x ``--draws`` draws from over-dispersed Laplace starts; the first ``--burn`` draws of each
chain are dropped. Reported: acceptance, data per test, ArviZ bulk ESS per draw (minimum over the 10 coefficients
``theta_j`` and, separately, over ``theta_j^2``: an anti-correlated move such as proxy HMC with a long trajectory
can inflate the first without the second), sampling seconds per 1000 draws per chain, warm-up seconds. The same
data set and keys for every row.

    .venv/bin/python benchmarks/proxy_ess.py [--draws 2000] [--results docs/results/proxy_ess.json]
"""

from __future__ import annotations

import argparse
import platform
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import austere_mh, mh_minibatch, penalty_test
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup import auto_sample

D = 10
KINDS = ["langevin", "random_walk", "independence", "independence_t", "proxy_hmc", "mixture"]
TESTS = {
    "mhminibatch": lambda: mh_minibatch(batch_size=50),
    "penalty": lambda: penalty_test(batch_size=50),
    "austere": lambda: austere_mh(batch_size=50, epsilon=0.01),
}
COLUMNS = [
    "test",
    "proposal",
    "acceptance",
    "data/test",
    "ESS/draw theta",
    "ESS/draw theta^2",
    "sampling s/1000",
    "warm-up s",
]


def min_ess_per_draw(draws: np.ndarray) -> tuple[float, float]:
    """Minimum bulk ESS per draw over coordinates of ``draws`` (chain, draw, d) and of their squared deviations."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    total = draws.shape[0] * draws.shape[1]
    sq = (draws - draws.mean(axis=(0, 1))) ** 2
    e1 = min(float(az.ess(draws[..., j], method="bulk")) for j in range(draws.shape[-1]))
    e2 = min(float(az.ess(sq[..., j], method="bulk")) for j in range(draws.shape[-1]))
    return e1 / total, e2 / total


def main() -> None:
    """Run every (test, proposal) pair and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--burn", type=int, default=200)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--proposals", nargs="+", default=KINDS)
    ap.add_argument("--tests", nargs="+", default=list(TESTS), choices=list(TESTS))
    add_results_option(ap)
    args = ap.parse_args()
    model = logistic_regression(prior_scale=10.0)
    data, _ = make_logistic_data(jax.random.key(0), args.n, D)
    print(
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}"
    )
    print(
        f"logistic regression d={D}, N={args.n:,}, K=1, {args.chains} chains x {args.draws} draws (burn-in {args.burn})"
    )
    widths = [12, 15, 11, 10, 15, 17, 16, 10]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows, values = [], {}
    for test_name in args.tests:
        for kind in args.proposals:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res, w = auto_sample(
                    model,
                    data,
                    jnp.zeros(D),
                    num_samples=args.draws,
                    num_chains=args.chains,
                    key=1,
                    test=TESTS[test_name](),
                    proposal=kind,
                    progress=False,
                )
            s = res.summary()
            e1, e2 = min_ess_per_draw(np.asarray(res.positions, np.float64)[:, args.burn :])
            rows.append(
                [
                    test_name,
                    kind,
                    f"{s['acceptance_rate']:.3f}",
                    f"{s['data_per_test']:.1f}",
                    f"{e1:.3f}",
                    f"{e2:.3f}",
                    f"{1000 * res.wall_time / args.draws:.2f}",
                    f"{w.total_seconds:.1f}",
                ]
            )
            values[f"proxy_ess.{test_name}.{kind}"] = f"{e1:.2f}"
            values[f"proxy_ess_sq.{test_name}.{kind}"] = f"{e2:.2f}"
            print(" ".join(c.rjust(w) for c, w in zip(rows[-1], widths)), flush=True)
    save(args.results, "proxy_ess", config=args, tables={"proxy_ess": table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
