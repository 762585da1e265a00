"""Korattikara et al. Section 4.1: sequential IRLS vs batch IRLS vs annealed SGD, test error vs wall time.

LAD regression on a synthetic stand-in for the Million Song year-prediction set (463,715 x 90 training rows,
51,630 test rows, heavy-tailed targets) and logistic regression on a synthetic stand-in for the PCA-reduced
infinite-MNIST "3 vs rest" set (10^6 x 50 training rows, 10,000 test rows).  Neither real set is available
offline here; the stand-ins have the papers' sizes but their own (stated) generating processes, so only the
relative behaviour of the three methods is comparable with Figures 2 and 3, not the error values.

Settings follow the paper: epsilon = 0.01, N0 = N_inc = N / 1000, SGD on one point per update with step
``C1 (C2 + t)^{-C3}`` (LAD: 0.01, 1, 0.5; logistic: 1, 10, 0.7).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.optim import (
    IRLSProblem,
    SequentialIRLSConfig,
    SGDConfig,
    lad_problem,
    logistic_problem,
    run_irls,
    run_sgd,
)
from reproductions.options import experiment_parser, run_dir, split_list, written
from reproductions.plots import pyplot, save_figure
from reproductions.results import command_line, results_payload, table, write_results


class ProblemSetup(NamedTuple):
    """One comparison: sizes, iterations per method and the SGD constants."""

    name: str
    n_train: int
    n_test: int
    dim: int
    batch_iterations: int
    sequential_iterations: int
    sgd_updates: int
    sgd: SGDConfig
    rows_per_dim: int
    """N0 = N_inc = max(N / 1000, rows_per_dim * D): minibatch Newton steps need several rows per parameter."""


FULL = {
    "lad": ProblemSetup("lad", 463_715, 51_630, 90, 12, 40, 2 * 463_715, SGDConfig(0.01, 1.0, 0.5), 5),
    "logistic": ProblemSetup("logistic", 1_000_000, 10_000, 50, 8, 30, 2 * 1_000_000, SGDConfig(1.0, 10.0, 0.7), 20),
}
QUICK = {
    "lad": FULL["lad"]._replace(
        n_train=20_000, n_test=5_000, batch_iterations=8, sequential_iterations=20, sgd_updates=40_000
    ),
    "logistic": FULL["logistic"]._replace(
        n_train=20_000, n_test=5_000, batch_iterations=6, sequential_iterations=15, sgd_updates=40_000
    ),
}


def million_song_standin(seed: int, n_train: int, n_test: int, dim: int = 90) -> tuple[dict, dict]:
    """Synthetic LAD data: correlated standardised features, ``y = x theta* + 3 t_2`` noise (heavy tails)."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((dim, dim)) / np.sqrt(dim) + np.eye(dim)
    theta = rng.standard_normal(dim) * 2.0 / np.sqrt(dim)

    def draw(n: int) -> dict:
        x = rng.standard_normal((n, dim)) @ mix
        x = (x - x.mean(0)) / x.std(0)
        y = x @ theta + 3.0 * rng.standard_t(2, n)
        return {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.float32)}

    return draw(n_train), draw(n_test)


def infinite_mnist_standin(seed: int, n_train: int, n_test: int, dim: int = 50) -> tuple[dict, dict]:
    """Synthetic logistic data: a constant and 49 PCA-like features (variance ``1 / j``), labels
    ``~ Bernoulli(sigmoid(x theta*))`` with intercept -1.5, so about one label in four is 1 (one digit against the rest)."""
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(np.arange(1, dim))
    theta = np.concatenate([[-1.5], 1.5 * rng.standard_normal(dim - 1) * scale])

    def draw(n: int) -> dict:
        x = np.concatenate([np.ones((n, 1)), rng.standard_normal((n, dim - 1)) * scale], axis=1)
        y = rng.random(n) < 1.0 / (1.0 + np.exp(-(x @ theta)))
        return {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.float32)}

    return draw(n_train), draw(n_test)


def test_metric(problem: IRLSProblem, test: dict, thetas: np.ndarray) -> np.ndarray:
    """Mean test loss of every iterate: absolute error (LAD) or negative log-likelihood (logistic)."""
    loss = jax.jit(jax.vmap(lambda th: jnp.mean(problem.loss(th, test["x"], test["y"]))))
    return np.asarray(loss(jnp.asarray(thetas)), np.float64)


class Curve(NamedTuple):
    """Test metric after each iteration (or SGD checkpoint) against cumulative seconds and data points used."""

    method: str
    times: np.ndarray
    metric: np.ndarray
    data_used: np.ndarray


def compare(setup: ProblemSetup, seed: int, epsilon: float = 0.01) -> tuple[list[Curve], float]:
    """Run batch IRLS, sequential IRLS and SGD on one stand-in; returns the curves and the start's test metric."""
    gen = million_song_standin if setup.name == "lad" else infinite_mnist_standin
    train, test = gen(seed, setup.n_train, setup.n_test, setup.dim)
    problem = lad_problem() if setup.name == "lad" else logistic_problem()
    theta0 = jnp.zeros(setup.dim, jnp.float32)
    key = jax.random.PRNGKey(seed)
    batch = run_irls(problem, train, theta0, setup.batch_iterations)
    n0 = max(setup.n_train // 1000, setup.rows_per_dim * setup.dim)
    cfg = SequentialIRLSConfig(epsilon=epsilon, initial_size=n0, increment=n0)
    seq = run_irls(problem, train, theta0, setup.sequential_iterations, key, cfg)
    deb = run_irls(problem, train, theta0, setup.sequential_iterations, key, cfg._replace(debias=True))
    sgd = run_sgd(problem, train, theta0, setup.sgd_updates, jax.random.fold_in(key, 1), setup.sgd, num_checkpoints=20)
    start = float(test_metric(problem, test, np.asarray(theta0)[None])[0])
    curves = [
        Curve(
            "batch IRLS", batch.wall_times, test_metric(problem, test, batch.thetas[1:]), np.cumsum(batch.batch_sizes)
        ),
        Curve(
            f"sequential IRLS (eps={epsilon:g})",
            seq.wall_times,
            test_metric(problem, test, seq.thetas[1:]),
            np.cumsum(seq.batch_sizes),
        ),
        Curve(
            f"seq. IRLS debiased (eps={epsilon:g})",
            deb.wall_times,
            test_metric(problem, test, deb.thetas[1:]),
            np.cumsum(deb.batch_sizes),
        ),
        Curve(
            f"SGD C={setup.sgd.c1:g},{setup.sgd.c2:g},{setup.sgd.c3:g}",
            sgd.wall_times[1:],
            test_metric(problem, test, sgd.thetas[1:]),
            sgd.num_updates[1:],
        ),
    ]
    return curves, start


def time_to_reach(curve: Curve, target: float) -> float:
    """First recorded time at which the test metric is at or below ``target`` (inf if never)."""
    hit = np.nonzero(curve.metric <= target)[0]
    return float(curve.times[hit[0]]) if hit.size else float("inf")


SHORT_NAMES = ("batch", "sequential", "debiased", "sgd")
"""Value-key names of the curves :func:`compare` returns, in its order."""


def summary_rows(setup: ProblemSetup, curves: list[Curve], start: float) -> list[dict]:
    """Per method: final time, final test metric, data touched (in passes over N), and seconds to close 90% / 99% of
    the gap between the start's and batch IRLS's final test metric, with the ratio to batch IRLS's time."""
    best = curves[0].metric[-1]
    gap = start - best
    ref = [time_to_reach(curves[0], best + f * gap) for f in (0.1, 0.01)]
    rows = []
    for c in curves:
        t = [time_to_reach(c, best + f * gap) for f in (0.1, 0.01)]
        ratio = [tt / r if np.isfinite(tt) and r > 0 else float("inf") for tt, r in zip(t, ref)]
        rows.append(
            {
                "method": c.method,
                "time": float(c.times[-1]),
                "metric": float(c.metric[-1]),
                "passes": float(c.data_used[-1] / setup.n_train),
                "t10": t[0],
                "ratio10": ratio[0],
                "t1": t[1],
                "ratio1": ratio[1],
            }
        )
    return rows


def metric_name(setup: ProblemSetup) -> str:
    """``test MAE`` (LAD) or ``test NLL`` (logistic)."""
    return "test MAE" if setup.name == "lad" else "test NLL"


def format_table(setup: ProblemSetup, curves: list[Curve], start: float) -> str:
    """The rows of :func:`summary_rows` as printed text."""
    metric = metric_name(setup)
    lines = [
        f"{setup.name}: N={setup.n_train:,} x D={setup.dim}, {setup.n_test:,} test rows; start {metric} {start:.4f}",
        f"{'method':<32}{'time s':>9}{metric:>11}{'data/N':>9}{'t(10%) s':>10}{'ratio':>7}{'t(1%) s':>11}{'ratio':>7}",
    ]
    for r in summary_rows(setup, curves, start):
        lines.append(
            f"{r['method']:<32}{r['time']:>9.3f}{r['metric']:>11.4f}{r['passes']:>9.2f}"
            f"{r['t10']:>10.3f}{r['ratio10']:>7.2f}{r['t1']:>11.3f}{r['ratio1']:>7.2f}"
        )
    return "\n".join(lines)


def cells(r: dict) -> dict[str, str]:
    """The formatted figures of one :func:`summary_rows` row (``never`` for a gap never closed)."""

    def fmt(v: float, spec: str) -> str:
        return format(v, spec) if np.isfinite(v) else "never"

    return {
        "time": f"{r['time']:.3f}",
        "metric": f"{r['metric']:.4f}",
        "passes": f"{r['passes']:.2f}",
        "t10": fmt(r["t10"], ".3f"),
        "ratio10": fmt(r["ratio10"], ".2f"),
        "t1": fmt(r["t1"], ".3f"),
        "ratio1": fmt(r["ratio1"], ".2f"),
    }


def results_of(setup: ProblemSetup, curves: list[Curve], start: float) -> tuple[dict, dict[str, str]]:
    """The results table ``irls_NAME`` and the values ``irls.NAME.*`` the docs quote for one problem."""
    rows = summary_rows(setup, curves, start)
    columns = [
        "method",
        "time s",
        metric_name(setup),
        "data/N",
        "t(10%) s",
        "t(10%) / batch",
        "t(1%) s",
        "t(1%) / batch",
    ]
    fields = ("time", "metric", "passes", "t10", "ratio10", "t1", "ratio1")
    tab = table(columns, [[r["method"], *(cells(r)[f] for f in fields)] for r in rows])
    values = {f"irls.{setup.name}.start": f"{start:.4f}"}
    for short, r in zip(SHORT_NAMES, rows):
        values.update({f"irls.{setup.name}.{short}.{f}": v for f, v in cells(r).items()})
        values[f"irls.{setup.name}.{short}.speedup1"] = (
            f"{1 / r['ratio1']:.0f}" if 0 < r["ratio1"] < np.inf else "never"
        )
    seq = curves[1].metric[len(curves[1].metric) // 2 :]
    values[f"irls.{setup.name}.sequential.late_min"] = f"{seq.min():.4f}"
    values[f"irls.{setup.name}.sequential.late_max"] = f"{seq.max():.4f}"
    return {f"irls_{setup.name}": tab}, values


def write_outputs(out: Path, setup: ProblemSetup, curves: list[Curve]) -> None:
    """CSV of every curve and a test-metric vs time figure."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{setup.name}_curves.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "seconds", "test_metric", "data_used"])
        for c in curves:
            for row in zip(c.times, c.metric, c.data_used):
                w.writerow([c.method, f"{row[0]:.6f}", f"{row[1]:.6f}", int(row[2])])
    fig, ax = pyplot().subplots(figsize=(5.5, 3.8))
    for c in curves:
        ax.plot(c.times, c.metric, marker=".", label=c.method)
    ax.set_xscale("log")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("test MAE" if setup.name == "lad" else "test negative log-likelihood")
    ax.set_title(f"{setup.name} (synthetic stand-in, N={setup.n_train:,})")
    ax.legend(fontsize=8)
    save_figure(fig, out / f"{setup.name}_test_error_vs_time.png", dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce irls [--quick] [--problems lad,logistic] [--epsilon 0.01] [--n-train N]``."""
    p = experiment_parser("irls", __doc__, quick="20,000 training rows per problem (CI size)")
    p.add_argument("--problems", type=split_list, default=tuple(FULL), help="comma-separated subset of lad, logistic")
    p.add_argument("--epsilon", type=float, default=0.01, help="threshold of the 90-degree test (default 0.01)")
    p.add_argument("--n-train", type=int, default=None, help="override the training size of every problem")
    opts = p.parse_args(argv)
    bad = [s for s in opts.problems if s not in FULL]
    if bad or not opts.problems:
        raise ValueError(f"--problems {','.join(opts.problems)!r}: choose from {', '.join(FULL)}")
    SequentialIRLSConfig(epsilon=opts.epsilon).validate(10**6, 1)
    out = run_dir(opts, "reproduce-irls")
    sizes = QUICK if opts.quick else FULL
    tables, values, setups, t0 = {}, {}, {}, time.perf_counter()
    for name in opts.problems:
        setup = sizes[name]
        if opts.n_train is not None:
            if opts.n_train < 1000:
                raise ValueError(f"--n-train {opts.n_train} must be at least 1000")
            setup = setup._replace(n_train=opts.n_train, sgd_updates=2 * opts.n_train)
        print(f"Korattikara et al. 4.1, {name} on a synthetic stand-in ...", flush=True)
        curves, start = compare(setup, opts.seed, opts.epsilon)
        write_outputs(out, setup, curves)
        print(format_table(setup, curves, start), flush=True)
        tab, vals = results_of(setup, curves, start)
        tables.update(tab)
        values.update(vals)
        setups[name] = setup
    values["irls.wall_s"] = f"{time.perf_counter() - t0:.0f}"
    payload = results_payload(
        "irls",
        command_line("irls", list(argv or [])),
        config={"epsilon": opts.epsilon, "seed": opts.seed, "problems": setups},
        tables=tables,
        values=values,
        figures=[f"{n}_test_error_vs_time.png" for n in opts.problems],
    )
    write_results(out, payload, copy_to=opts.results)
    print(written(out))
    return 0
