"""The batch sizing's predicted per-step acceptance error against the one a run measured, on heavy_tails.py's cases.

For each row of a ``heavy_tails.py`` results file with a ``decisions differed`` figure (the check after sampling: the
fraction of coupled steps, at the run's own proxy-HMC proposals, whose minibatch and exact decisions differed), the
same case's warm-up is run again (``--n`` rows, key 0, the same estimator: the warm-up's, or uniform rows, or the
weights built as ``heavy_tails.py`` builds them) and, at that row's ``m``, the sizing's prediction
(``warmup.step_error``: the penalty test's minibatches on sampled rows' residuals at Laplace-drawn moves) and the bound
it used before issue 32's calibration (``normality.minibatch_shape``'s, at the same moves) are written beside the
measured figure.

    .venv/bin/python benchmarks/step_error_calibration.py --n 300000 --measured docs/results/heavy_tails_3e5_groups.json \
        --results docs/results/step_error_calibration.json
"""

from __future__ import annotations

import argparse
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from heavy_tails import CASES, as_source, method_estimator, warmup_passes

from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.diagnostics.normality import minibatch_shape
from minibatch_mcmc.warmup import warmup
from minibatch_mcmc.warmup.batch_choice import MOVES, ROWS, laplace_pairs, power_sums, residual_matrix
from minibatch_mcmc.warmup.step_error import orders, step_error

COLUMNS = [
    "case",
    "N",
    "method",
    "m",
    "measured (decisions differed)",
    "predicted",
    "predicted / measured",
    "bound before",
    "bound / measured",
    "warm-up passes",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--measured", nargs="+", required=True, help="heavy_tails.py results files")
    parser.add_argument("--name", default="step_error_calibration", help="the results' experiment and table name")
    add_results_option(parser)
    args = parser.parse_args()
    rows, values = [], {}
    for path in args.measured:
        measured = json.load(open(path))
        for tab in measured["tables"].values():
            col = {c: i for i, c in enumerate(tab["columns"])}
            for r in tab["rows"]:
                if "decisions differed" not in col or not r[col["decisions differed"]]:
                    continue
                name, method, m = r[col["case"]], r[col["method"]], int(r[col["m"]])
                model, data, theta0 = CASES[name](args.n, np.random.default_rng(0))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    w = warmup(model, data, jnp.asarray(theta0, jnp.float32), key=0)
                    est, _ = method_estimator("uniform" if method == "unsized" else method, model, data, w)
                chol = np.linalg.cholesky(w.covariance)
                source = as_source(data)
                n_pop = est.population_size(source.n)
                rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.key(1))).ravel().tolist())
                idx = np.sort(rng.choice(n_pop, min(n_pop, ROWS), replace=False))
                sample = take(est.population(source.arrays()), jnp.asarray(idx, jnp.int32))
                terms = residual_matrix(model, est, sample, w.centre, *laplace_pairs(chol, MOVES, rng))
                d = terms.read
                predicted = step_error(d, orders(d.shape[1], rng), n_pop, m, 1.0, exact=terms.exact).error
                bound = float(
                    np.mean(
                        minibatch_shape(
                            power_sums(d) * (n_pop / d.shape[1]), n_pop, m, 1.0, "metropolis"
                        ).acceptance_error
                    )
                )
                got = float(r[col["decisions differed"]].rstrip("%")) / 100
                rows.append(
                    [
                        name,
                        args.n,
                        method,
                        m,
                        f"{100 * got:.2f}%",
                        f"{100 * predicted:.2f}%",
                        f"{predicted / got:.2f}",
                        f"{bound:.3g}",
                        f"{bound / got:.1f}",
                        f"{warmup_passes(w):.2f}",
                    ]
                )
                prefix = "" if args.name == "step_error_calibration" else f"{args.name}."  # keys unique over the files
                values[f"{prefix}{name}_{method}_{m}_predicted_over_measured"] = predicted / got
                print(" | ".join(map(str, rows[-1])), flush=True)
    save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
