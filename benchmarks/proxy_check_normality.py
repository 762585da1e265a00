"""The normality part of the proxy check after sampling (issue 19): what it measures on runs it must flag and must not.

``auto_sample`` (MHminibatch m=50, proxy-gradient MALA, 4 chains) on issue 19's five-Cauchy-rows case (N = 100,000;
``tests/control_variates/helpers_cauchy.py``) with the exact stratum off and on, and on a logistic regression
(``make_logistic_data``, N = 100,000, d = 10, prior N(0, 10^2)). For each run: the posterior s.d. of the first
coordinate, Pareto k-hat, the mean acceptance-probability error of the m-row normal approximation over the 100
checked moves (threshold 0.02), the median Edgeworth error, skewness and excess kurtosis of the m-row mean, the
exact residual s.d. / the run's median ``residual_sd``, whether the check passed, and its seconds.

    PYTHONPATH=src .venv/bin/python benchmarks/proxy_check_normality.py --results docs/results/proxy_check_normality.json
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup import auto_sample

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "control_variates"))
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, posterior_a  # noqa: E402

COLUMNS = [
    "run",
    "sd of theta[0]",
    "k-hat",
    "acceptance error",
    "threshold",
    "Edgeworth error",
    "skewness",
    "excess kurtosis",
    "exact / recorded residual s.d.",
    "check passed",
    "check s",
]


def row(name: str, model, data, theta0, stratum: bool, args) -> tuple[list, dict]:
    """One ``auto_sample`` run and what its check measured."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, w = auto_sample(
            model,
            data,
            theta0,
            num_samples=args.samples,
            num_chains=4,
            key=args.seed,
            test=mh_minibatch(batch_size=50),
            proposal="langevin",
            progress=False,
            stratum=stratum,
        )
    c = w.proxy_check
    sd = float(np.asarray(res.positions)[:, args.samples // 10 :, 0].std())
    cells = [
        name,
        f"{sd:.3f}",
        f"{c.k_hat:.2f}",
        f"{c.acceptance_error:.2g}",
        f"{c.acceptance_error_max:g}",
        f"{c.edgeworth_error:.2g}",
        f"{c.skewness:.2g}",
        f"{c.excess_kurtosis:.3g}",
        f"{c.sd_ratio:.3g}",
        "yes" if c.ok else "no",
        f"{c.seconds:.1f}",
    ]
    print(cells, flush=True)
    return cells, {
        f"proxy_check_normality.{name}.acceptance_error": f"{c.acceptance_error:.2g}",
        f"proxy_check_normality.{name}.ok": "passed" if c.ok else "failed",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--samples", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    add_results_option(p)
    args = p.parse_args(argv)
    data, _ = cauchy_rows_data(args.n)
    rows, values = [], {"proxy_check_normality.cauchy_quadrature_sd": f"{posterior_a()[1]:.3f}"}
    for name, stratum in (("cauchy_stratum_off", False), ("cauchy_stratum_on", True)):
        cells, v = row(name, cauchy_rows_model(), data, jnp.zeros(2), stratum, args)
        rows.append(cells)
        values.update(v)
    logistic, _ = make_logistic_data(jax.random.key(0), args.n, 10)
    cells, v = row("logistic", logistic_regression(prior_scale=10.0), logistic, jnp.zeros(10), True, args)
    rows.append(cells)
    values.update(v)
    save(
        args.results,
        "proxy_check_normality",
        config=args,
        values=values,
        tables={"proxy_check_normality": table(COLUMNS, rows)},
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
