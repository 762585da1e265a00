"""The default's minibatch at small and tall N: the check's acceptance-error bound and the rows per test of ``auto_sample``.

The README's logistic regression (``make_logistic_data``, d = 10, prior N(0, 10^2)) at each ``--sizes`` N, fitted by
``auto_sample`` at its defaults (proxy HMC with the penalty test, its minibatch sized by the warm-up:
``warmup.batch_choice``) and, side by side on the same data and keys, with the penalty test's minibatch fixed at
m = 50 (the default before the warm-up sized it). Per run: the minibatch, rows read per test, the share of tests whose
minibatch grew past ``m`` and the 99th percentile of the estimate's s.d. ``sqrt(s2)`` (where the penalty test's stopping
bias lives: it needs an s.d. near ``sigma_max = 1``), the warm-up's predicted
mean bound at that minibatch (``choose_batch_size`` rerun on the warm-up's proxy, estimator and Laplace fit), the
check's bound over its 100 checked moves (``ProxyCheck.acceptance_error``; it warns above 0.02) and whether the check
passed, acceptance, the minimum bulk ESS per draw over the coefficients, and the warm-up's, its batch phase's and
sampling's seconds. ``measured error`` is the acceptance error itself rather than its bound (``measured_error``: the
penalty test simulated on the exact residuals of 16 Laplace-drawn moves against its normal model, +- the Monte Carlo s.e.),
and ``Wasserstein bound`` a candidate bound the check does not use, at the same moves (``wasserstein_bound``).

    PYTHONPATH=src .venv/bin/python benchmarks/default_batch.py [--sizes 20000 100000 1000000] [--results docs/results/default_batch.json]

``--first-fit``: instead, the warm-up alone (as ``auto_sample(key=1)`` runs it) of each of ``first_fit.py``'s four NumPyro
models at each N: the minibatch chosen, the predicted bound at m = 50 and at the chosen m, and the seconds of the batch
phase against the whole warm-up (so whether sizing changes the first fit's draws, and what it adds to its time).
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from scipy.integrate import trapezoid
from scipy.special import eval_hermitenorm

from minibatch_mcmc.acceptance import penalty_test
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.diagnostics.normality import Z_GRID
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup import auto_sample
from minibatch_mcmc.warmup.batch_choice import choose_batch_size

D = 10
COLUMNS = [
    "N",
    "minibatch",
    "m",
    "rows/test",
    "tests grown",
    "estimate s.d. p99",
    "predicted bound",
    "check bound",
    "check passed",
    "Wasserstein bound",
    "measured error",
    "acceptance",
    "ESS/draw",
    "warm-up s",
    "batch phase s",
    "sampling s",
]


def min_ess_per_draw(draws: np.ndarray) -> float:
    """Minimum ArviZ bulk ESS per draw over the coordinates of ``draws`` (chain, draw, d)."""
    import arviz as az

    return min(float(az.ess(draws[..., j], method="bulk")) for j in range(draws.shape[-1])) / (
        draws.shape[0] * draws.shape[1]
    )


OFFSETS = (-1.0, -0.3, -0.1, -0.03, 0.0, 0.03, 0.1)
"""Full-data log acceptance ratios ``Delta`` (nats) at which the measured error is taken: where ``min(1, e^x)`` bends."""


def wasserstein_bound(d: np.ndarray, m: int) -> float:
    """A candidate bound the check does not use, for comparison: ``min(1, e^x)`` has slope at most 1, so the error is at
    most the noise's s.d. times the Wasserstein-1 distance of the standardised ``m``-row mean from the normal (the
    integral of the Edgeworth CDF terms' absolute value), plus the check's variance term ``sd^4 |g2 / m| / 8``."""
    n, z = d.size, Z_GRID
    sd, c = n * d.std() / np.sqrt(m), (d - d.mean()) / d.std()
    g1, g2 = np.mean(c**3) / np.sqrt(m), (np.mean(c**4) - 3.0) / m
    phi = np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    term = phi * (
        g1 / 6 * eval_hermitenorm(2, z) + g2 / 24 * eval_hermitenorm(3, z) + g1 * g1 / 72 * eval_hermitenorm(5, z)
    )
    return float(sd * trapezoid(np.abs(term), z) + sd**4 * abs(g2) / 8.0)


def measured_error(
    model, data, w, m: int, seed: int, moves: int = 16, draws: int = 200_000
) -> tuple[float, float, float]:
    """The acceptance-probability error itself, not its bound: at ``moves`` Laplace-drawn move pairs, the penalty test's
    mean acceptance on ``draws`` simulated ``m``-row minibatches of the move's exact residuals (with replacement) against
    the same rule on a normal mean with a scaled chi-square variance of the same s.d. (where it is exact to 6e-5), the
    largest difference over ``OFFSETS``; the mean over moves, its Monte Carlo s.e., and the mean ``wasserstein_bound``."""
    from jax.flatten_util import ravel_pytree

    from minibatch_mcmc.acceptance.penalty import penalty
    from minibatch_mcmc.warmup.batch_choice import laplace_pairs

    rng = np.random.default_rng(seed)
    at, moved = laplace_pairs(cholesky_factor(w.covariance, D), moves, rng)
    flat, unravel = ravel_pytree(w.proxy.centre)
    pop = w.estimator.population(as_data_source(data).arrays())
    resid = jax.jit(jax.vmap(lambda a, b: w.estimator.log_ratio(model, unravel(flat + a), unravel(flat + b))(pop)))
    d_all = np.asarray(resid(jnp.asarray(at, flat.dtype), jnp.asarray(moved, flat.dtype)), np.float64)
    n = d_all.shape[1]
    u = lambda x: np.asarray(penalty(jnp.asarray(x), jnp.asarray(m)), np.float64)  # noqa: E731
    worst, ses = [], []
    w1 = float(np.mean([wasserstein_bound(d, m) for d in d_all]))
    for d in d_all:
        sd = n * d.std() / np.sqrt(m)
        x = d[rng.integers(0, n, (draws, m))]
        actual, s2 = n * x.mean(axis=1), n * n * x.var(axis=1, ddof=1) / m
        normal, s2n = d.sum() + sd * rng.standard_normal(draws), sd * sd * rng.chisquare(m - 1, draws) / (m - 1)
        diffs = []
        for c in OFFSETS:
            a, b = (
                np.minimum(1.0, np.exp(c + actual - d.sum() - u(s2))),
                np.minimum(1.0, np.exp(c + normal - d.sum() - u(s2n))),
            )
            diffs.append((abs(a.mean() - b.mean()), np.sqrt((a.var() + b.var()) / draws)))
        k = int(np.argmax([x[0] for x in diffs]))
        worst.append(diffs[k][0])
        ses.append(diffs[k][1])
    return float(np.mean(worst)), float(np.sqrt(np.sum(np.square(ses))) / len(ses)), w1


def run(n: int, data, sized: bool, args) -> tuple[list, dict]:
    """One ``auto_sample`` at the defaults (``sized``) or with the penalty test's minibatch fixed at 50, and its cells."""
    model = logistic_regression(prior_scale=10.0)
    options = {} if sized else {"test": penalty_test(batch_size=50)}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, w = auto_sample(
            model, data, jnp.zeros(D), num_samples=args.samples, num_chains=4, key=args.seed, progress=False, **options
        )
    total = time.perf_counter() - t0
    c, rec = w.proxy_check, res.records
    m = int(w.test.batch_size)
    pred = choose_batch_size(
        model,
        as_data_source(data),
        w.estimator,
        w.proxy.centre,
        cholesky_factor(w.covariance, D),
        m,
        jax.random.key(args.seed + 7),
    ).initial_error
    rows = float(np.mean(np.asarray(rec["batch_size"]) + np.asarray(rec["hidden_data"])))
    grown = float(np.mean(np.asarray(rec["batch_size"]) > m))
    sd99 = float(np.sqrt(np.quantile(np.asarray(rec["s2"], np.float64), 0.99)))
    ess = min_ess_per_draw(np.asarray(res.kernel_positions)[:, args.samples // 10 :])
    err, err_se, w1 = measured_error(model, data, w, m, args.seed)
    batch_s = w.cost["batch"].seconds if "batch" in w.cost else 0.0
    name = "sized (default)" if sized else "fixed 50"
    cells = [
        f"{n:,}",
        name,
        str(m),
        f"{rows:.1f}",
        f"{grown:.1%}",
        f"{sd99:.2g}",
        f"{pred:.3g}",
        f"{c.acceptance_error:.3g}",
        "yes" if c.ok else "no",
        f"{w1:.2g}",
        f"{err:.2g} +- {err_se:.1g}",
        f"{float(np.mean(rec['accepted'])):.3f}",
        f"{ess:.2f}",
        f"{w.total_seconds:.1f}",
        f"{batch_s:.2f}",
        f"{res.wall_time:.1f}",
    ]
    print(cells, f"(all {total:.0f} s)", flush=True)
    key = f"default_batch.{n}.{'sized' if sized else 'fixed'}"
    return cells, {
        f"{key}.m": str(m),
        f"{key}.rows": f"{rows:.1f}",
        f"{key}.bound": f"{c.acceptance_error:.3g}",
        f"{key}.sd99": f"{sd99:.2g}",
        f"{key}.grown": f"{grown:.1%}",
        f"{key}.measured": f"{err:.2g}",
        f"{key}.wasserstein": f"{w1:.2g}",
        f"{key}.predicted": f"{pred:.3g}",
        f"{key}.ok": "passes" if c.ok else "warns",
    }


MODEL_COLUMNS = ["N", "model", "m", "predicted bound at 50", "predicted bound at m", "batch phase s", "warm-up s"]


def first_fit_rows(args) -> tuple[list, dict]:
    """The warm-up of each ``first_fit`` model at each N (``auto_sample(key=args.seed)``'s warm-up key) and its cells."""
    import first_fit

    from minibatch_mcmc.interop import from_numpyro
    from minibatch_mcmc.warmup import warmup

    rows, values = [], {}
    for n in args.sizes:
        for name, fn in first_fit.MODELS.items():
            conv = from_numpyro(fn, *first_fit.make_data(name, n))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                w = warmup(conv.model, conv.data, conv.init, key=jax.random.split(jax.random.key(args.seed), 3)[0])
            d = int(np.asarray(w.covariance).shape[0])
            factor = cholesky_factor(w.covariance, d)
            at50 = choose_batch_size(
                conv.model,
                as_data_source(conv.data),
                w.estimator,
                w.proxy.centre,
                factor,
                50,
                jax.random.key(args.seed + 7),
            )
            m = int(w.test.batch_size)
            at_m = (
                at50
                if m == 50
                else choose_batch_size(
                    conv.model,
                    as_data_source(conv.data),
                    w.estimator,
                    w.proxy.centre,
                    factor,
                    m,
                    jax.random.key(args.seed + 7),
                )
            )
            cells = [
                f"{n:,}",
                name,
                str(m),
                f"{at50.initial_error:.3g}",
                f"{at_m.initial_error:.3g}",
                f"{w.cost['batch'].seconds:.2f}",
                f"{w.total_seconds:.1f}",
            ]
            print(cells, flush=True)
            rows.append(cells)
            values[f"default_batch_models.{n}.{name}.m"] = str(m)
    return rows, values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000, 1_000_000])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first-fit", action="store_true", help="the warm-ups of first_fit.py's four models instead")
    add_results_option(ap)
    args = ap.parse_args(argv)
    if args.first_fit:
        rows, values = first_fit_rows(args)
        save(
            args.results,
            "default_batch_models",
            config=args,
            values=values,
            tables={"default_batch_models": table(MODEL_COLUMNS, rows)},
            argv=argv,
        )
        return 0
    rows, values = [], {}
    for n in args.sizes:
        data, _ = make_logistic_data(jax.random.key(0), n, D)
        for sized in (False, True):
            cells, v = run(n, data, sized, args)
            rows.append(cells)
            values.update(v)
    save(
        args.results,
        "default_batch",
        config=args,
        values=values,
        tables={"default_batch": table(COLUMNS, rows)},
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
