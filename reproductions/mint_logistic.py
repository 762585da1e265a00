"""Li and Wong, Section 4.2: MINT on two-class logistic regression beside tempered and untempered full-data MCMC.

Left panel of their Figure 2: for a fixed ``theta`` the statistic ``t = sqrt(m) (mu_hat - mu)`` over
5000 random minibatches of ``m = 100`` against a Gaussian with the same mean and variance. Right
panel: test accuracy against epochs (passes over the training data) for MINT (``m = 100``,
``lambda = tau / 2``), tempered full-data MCMC at the same ``T = n^(1 - lambda)`` and full-data MCMC
at ``T = 1``, over independent runs. Accuracy is that of the running posterior-predictive average
(mean of ``sigmoid(x theta_t)`` over thinned draws); the per-draw accuracy is reported too.
Data: the Fashion-MNIST sandal/sneaker set when ``make data`` installed it (a stand-in for the
paper's MNIST 1 vs 7), else a synthetic 784-feature set; the prior is ``N(0, 1)`` (see notes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from minibatch_mcmc.acceptance import MetropolisTest, mint
from minibatch_mcmc.models import logistic_log_lik, logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import SampleResult, sample
from reproductions.options import experiment_parser, positive_int, run_dir
from reproductions.plots import pyplot, save_figure
from reproductions.reproduce_logistic import DATASETS, accuracy_curve, load_dataset
from reproductions.results import command_line, results_payload, table, write_results


class MintLogisticConfig(NamedTuple):
    """Settings of the experiment (paper: m = 100, 10 runs; lambda = tau / 2 is our choice, as in 4.1)."""

    dataset: str = "fashion-13k"
    batch_size: int = 100
    alpha: float = 0.5
    prior_scale: float = 1.0
    runs: int = 10
    mint_epochs: float = 200.0
    full_epochs: int = 400
    """Full-data samplers make one step per epoch."""
    t_batches: int = 5000
    target_acceptance: float = 0.3
    checkpoints: int = 120
    seed: int = 0


PAPER_MEAN_JUMP = {"MINT": 1.71, "tempered MCMC": 1.50, "MCMC": 0.05}
"""The paper's mean accepted jump per sampler (Section 4.2)."""
PAPER_TABLE1 = {"MHminibatch": 125.4, "AustereMH(nc)": 973.8, "AustereMH(c)": 1924.3, "MHSubLhd": 10783.4}
"""The minibatch sizes the paper's Table 1 quotes for the other tests (Seita et al.'s figures)."""

STEP_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
"""Random-walk s.d.s tried by the pilot runs that tune each sampler to the target acceptance rate."""


def t_statistic(theta: np.ndarray, train: dict, batch_size: int, batches: int, seed: int) -> np.ndarray:
    """``t = sqrt(m) (mu_hat(theta) - mu(theta))`` over random minibatches drawn without replacement."""
    ll = np.asarray(logistic_log_lik(jnp.asarray(theta), {k: jnp.asarray(v) for k, v in train.items()}), np.float64)
    rng = np.random.default_rng(seed)
    n = ll.shape[0]
    idx = np.stack([rng.choice(n, batch_size, replace=False) for _ in range(batches)])
    return np.sqrt(batch_size) * (ll[idx].mean(axis=1) - ll.mean())


def normality(t: np.ndarray) -> dict:
    """How close ``t`` is to a Gaussian with its own mean and variance: KS distance, skewness, excess kurtosis."""
    ks = sps.kstest((t - t.mean()) / t.std(), "norm")
    return {
        "ks_distance": float(ks.statistic),
        "ks_pvalue": float(ks.pvalue),
        "skewness": float(sps.skew(t)),
        "excess_kurtosis": float(sps.kurtosis(t)),
        "mean": float(t.mean()),
        "sd": float(t.std()),
    }


def predictive_accuracy(
    positions: np.ndarray, test: dict, checkpoints: int, burn: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy of the running average of ``sigmoid(x theta_t)`` at ``checkpoints`` draw indices, per run."""
    steps = positions.shape[1]
    at = np.unique(np.linspace(max(1, steps // checkpoints), steps, checkpoints).astype(int)) - 1
    thin = jnp.asarray(positions[:, at])  # (runs, points, d)
    x = jnp.asarray(test["x"])
    y = np.asarray(test["y"]).astype(bool)
    probs = np.asarray(jax.nn.sigmoid(jnp.einsum("nd,rpd->rpn", x, thin)))  # (runs, points, n_test)
    start = int(burn * len(at))
    cum = np.cumsum(probs[:, start:], axis=1) / np.arange(1, len(at) - start + 1)[None, :, None]
    acc = np.mean((cum > 0.5) == y[None, None, :], axis=2)
    return at[start:] + 1, acc


def tune_step(run_pilot, target: float) -> tuple[float, float]:
    """The step s.d. from ``STEP_GRID`` whose pilot acceptance rate is closest to ``target``."""
    rates = {s: run_pilot(s) for s in STEP_GRID}
    best = min(rates, key=lambda s: abs(rates[s] - target))
    return best, rates[best]


def mean_accepted_jump(positions: np.ndarray, accepted: np.ndarray) -> float:
    """Average Euclidean length of accepted moves."""
    jumps = np.linalg.norm(np.diff(positions, axis=1), axis=-1)
    acc = accepted[:, 1:]
    return float(jumps[acc].mean()) if acc.any() else 0.0


def run_sampler(
    model, train: dict, test, step: float, steps: int, runs: int, temperature: float, key: int, progress: bool
) -> SampleResult:
    """``runs`` chains from the origin with a random-walk proposal of s.d. ``step``."""
    return sample(
        model,
        train,
        jnp.zeros(train["x"].shape[1], jnp.float32),
        proposal=random_walk(scale=step),
        test=test,
        num_samples=steps,
        num_chains=runs,
        temperature=temperature,
        key=key,
        block_size=2000,
        progress=progress,
    )


def plot(cfg: MintLogisticConfig, t: np.ndarray, curves: dict, out: Path) -> Path:
    """Figure 2 of the paper: t against a Gaussian; accuracy against epochs (mean +- s.e. over runs)."""
    fig, ax = pyplot().subplots(1, 2, figsize=(12, 4.3))
    ax[0].hist(t, bins=60, density=True, alpha=0.6, label="empirical t")
    g = np.linspace(t.min(), t.max(), 300)
    ax[0].plot(g, sps.norm.pdf(g, t.mean(), t.std()), "k", label="Gaussian, same mean and variance")
    ax[0].set_xlabel(f"t = sqrt(m)(mu_hat - mu), m = {cfg.batch_size}")
    ax[0].legend(fontsize=8)
    for name, (epochs, acc) in curves.items():
        m, se = acc.mean(0), acc.std(0, ddof=1) / np.sqrt(acc.shape[0])
        ax[1].semilogx(epochs, m, label=name)
        ax[1].fill_between(epochs, m - se, m + se, alpha=0.3)
    ax[1].set_xlabel("epochs (passes over the training data)")
    ax[1].set_ylabel("test accuracy (posterior-predictive average)")
    ax[1].legend(fontsize=8)
    return save_figure(fig, out / "mint_logistic_figure2.png")


def plot_wall_clock(times: dict, curves: dict, out: Path) -> Path:
    """Appendix B, Figure 5 of the paper: test accuracy against sampling wall-clock seconds (mean +- s.e. over runs)."""
    fig, ax = pyplot().subplots(figsize=(6.4, 4.3))
    for name, (_, acc) in curves.items():
        m, se = acc.mean(0), acc.std(0, ddof=1) / np.sqrt(acc.shape[0])
        ax.semilogx(times[name], m, label=name)
        ax.fill_between(times[name], m - se, m + se, alpha=0.3)
    ax.set_xlabel("sampling wall-clock seconds (all runs vmapped; shared 2-core CPU)")
    ax.set_ylabel("test accuracy (posterior-predictive average)")
    ax.legend(fontsize=8)
    return save_figure(fig, out / "mint_logistic_figure5_wallclock.png")


def first_reaching(x: np.ndarray, acc: np.ndarray, target: float) -> float | None:
    """The first ``x`` at which the mean accuracy over runs reaches ``target`` (``None``: never)."""
    hit = np.flatnonzero(acc.mean(0) >= target)
    return float(x[hit[0]]) if hit.size else None


def results_tables(rows: dict, norm: dict, settings, cfg: MintLogisticConfig) -> tuple[dict, dict]:
    """The results file's tables (``mint_logistic_samplers``, ``mint_logistic_table1``) and the prose values."""

    def reach(v, spec):
        return "not reached" if v is None else format(v, spec)

    cells = [
        [
            name,
            f"{r['temperature']:,.0f}",
            f"{r['step_sd']:g}",
            f"{r['acceptance_rate']:.3f}",
            f"{r['data_per_step']:,.0f}",
            f"{r['epochs']:,.0f}",
            f"{r['final_predictive_accuracy']:.3f} +- {r['final_predictive_accuracy_se']:.3f}",
            f"{r['last_draw_accuracy']:.3f}",
            reach(r["epochs_to_0.8"], ",.0f"),
            reach(r["seconds_to_0.8"], ".1f"),
            f"{r['wall_time_s']:.0f}",
            f"{r['mean_accepted_jump']:.2f} ({PAPER_MEAN_JUMP[name]:.2f})",
        ]
        for name, r in rows.items()
    ]
    cols = [
        "sampler",
        "T",
        "step s.d.",
        "acceptance",
        "data per step",
        "epochs run",
        "test accuracy",
        "last-draw accuracy",
        "epochs to 0.8",
        "seconds to 0.8",
        "sampling wall s",
        "mean accepted jump (paper)",
    ]
    t1 = [["MINT", f"{settings.batch_size} (constant)", f"{settings.batch_size} (constant)"]]
    t1 += [[k, f"{v:,.1f}", "Seita et al. Section 6.2 table"] for k, v in PAPER_TABLE1.items()]
    values = {
        "mint_logistic.ks_distance": f"{norm['ks_distance']:.3f}",
        "mint_logistic.ks_pvalue": f"{norm['ks_pvalue']:.2g}",
        "mint_logistic.skewness": f"{norm['skewness']:.2f}",
        "mint_logistic.excess_kurtosis": f"{norm['excess_kurtosis']:.2f}",
        "mint_logistic.t_batches": f"{cfg.t_batches}",
    }
    for name, key in (("MINT", "mint"), ("tempered MCMC", "tempered"), ("MCMC", "mcmc")):
        r = rows[name]
        values[f"mint_logistic.{key}_accuracy"] = f"{r['final_predictive_accuracy']:.3f}"
        values[f"mint_logistic.{key}_last_draw_accuracy"] = f"{r['last_draw_accuracy']:.2f}"
        values[f"mint_logistic.{key}_wall_s"] = f"{r['wall_time_s']:.0f}"
    tables = {
        "mint_logistic_samplers": table(cols, cells),
        "mint_logistic_table1": table(["test", "minibatch size (paper)", "ours"], t1),
    }
    return tables, values


def run(
    cfg: MintLogisticConfig, out: Path, progress: bool = True, command: str | None = None, results: str | None = None
) -> str:
    """Run the three samplers, write the figures, table, summary and results file; return the table."""
    out.mkdir(parents=True, exist_ok=True)
    train, test_set = load_dataset(cfg.dataset, cfg.seed)
    n = int(train["y"].shape[0])
    model = logistic_regression(cfg.prior_scale)
    mint_test = mint(batch_size=cfg.batch_size, alpha=cfg.alpha)
    settings = mint_test.settings(n)
    temp = settings.temperature
    samplers = {
        "MINT": (mint_test, 1.0, int(round(cfg.mint_epochs * n / cfg.batch_size)), cfg.batch_size / n),
        "tempered MCMC": (MetropolisTest(), temp, cfg.full_epochs, 1.0),
        "MCMC": (MetropolisTest(), 1.0, cfg.full_epochs, 1.0),
    }
    curves, rows, sampled, times = {}, {}, {}, {}
    for i, (name, (test, temperature, steps, epochs_per_step)) in enumerate(samplers.items()):
        pilot_steps = 400 if epochs_per_step < 1 else 120
        step, pilot_rate = tune_step(
            lambda s: run_sampler(model, train, test, s, pilot_steps, 2, temperature, cfg.seed + 50 + i, False).summary(
                posterior=False
            )["acceptance_rate"],
            cfg.target_acceptance,
        )
        res = run_sampler(model, train, test, step, steps, cfg.runs, temperature, cfg.seed + 10 * i + 1, progress)
        pos = np.asarray(res.positions)
        at, acc = predictive_accuracy(pos, test_set, cfg.checkpoints)
        curves[name] = (at * epochs_per_step, acc)
        times[name] = (
            at / steps * res.wall_time
        )  # each step costs the same: elapsed time pro rata (compilation included)
        per_draw = accuracy_curve(pos[:, -1:], test_set)[:, 0]
        sampled[name] = res
        rows[name] = {
            "temperature": float(res.temperature[-1]),
            "step_sd": step,
            "pilot_acceptance": pilot_rate,
            "acceptance_rate": res.summary(posterior=False)["acceptance_rate"],
            "steps": steps,
            "epochs": steps * epochs_per_step,
            "data_per_step": res.summary(posterior=False)["data_per_test"],
            "final_predictive_accuracy": float(acc[:, -1].mean()),
            "final_predictive_accuracy_se": float(acc[:, -1].std(ddof=1) / np.sqrt(cfg.runs)),
            "last_draw_accuracy": float(per_draw.mean()),
            "mean_accepted_jump": mean_accepted_jump(pos, res.records["accepted"]),
            "wall_time_s": res.wall_time,
        }
        for target in (0.8, 0.9, 0.95):
            rows[name][f"epochs_to_{target}"] = first_reaching(curves[name][0], acc, target)
            rows[name][f"seconds_to_{target}"] = first_reaching(times[name], acc, target)
    theta = np.asarray(sampled["MINT"].positions)[0, -1]
    t = t_statistic(theta, train, cfg.batch_size, cfg.t_batches, cfg.seed)
    norm = normality(t)
    fig = plot(cfg, t, curves, out)
    fig5 = plot_wall_clock(times, curves, out)
    summary = {
        "dataset": cfg.dataset,
        "n_train": n,
        "n_test": int(test_set["y"].shape[0]),
        "mint": settings._asdict(),
        "prior_scale": cfg.prior_scale,
        "runs": cfg.runs,
        "t_statistic": norm,
        "samplers": rows,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    tables, values = results_tables(rows, norm, settings, cfg)
    payload = results_payload(
        "mint-logistic",
        command or command_line("mint-logistic", []),
        config=cfg,
        tables=tables,
        values=values,
        figures=[str(fig), str(fig5)],
        extra={"dataset": cfg.dataset, "n_train": n, "temperature": temp},
    )
    write_results(out, payload, copy_to=results)
    lines = [
        f"Li and Wong 4.2 on {cfg.dataset}: n={n:,}, m={settings.batch_size}, tau={settings.tau:.3f}, lambda={settings.lam:.3f}, "
        f"T = n^(1-lambda) = {temp:,.0f}; prior N(0, {cfg.prior_scale:g}^2); {cfg.runs} runs",
        f"t over {cfg.t_batches} minibatches: KS distance to a Gaussian {norm['ks_distance']:.4f} (p={norm['ks_pvalue']:.2f}), "
        f"skewness {norm['skewness']:.3f}, excess kurtosis {norm['excess_kurtosis']:.3f}",
        "",
        f"{'sampler':<15} {'T':>7} {'step':>6} {'accept':>7} {'data/step':>10} {'epochs':>7} {'acc (pred.)':>13} "
        f"{'ep. to 0.9':>10} {'last-draw acc':>13} {'mean jump':>9} {'wall s':>7}",
    ]
    for name, r in rows.items():
        e90 = "-" if r["epochs_to_0.9"] is None else f"{r['epochs_to_0.9']:.2f}"
        lines.append(
            f"{name:<15} {r['temperature']:>7.0f} {r['step_sd']:>6g} {r['acceptance_rate']:>7.3f} {r['data_per_step']:>10.0f} "
            f"{r['epochs']:>7.0f} {r['final_predictive_accuracy']:>7.3f}+-{r['final_predictive_accuracy_se']:.3f} "
            f"{e90:>10} {r['last_draw_accuracy']:>13.3f} {r['mean_accepted_jump']:>9.3f} {r['wall_time_s']:>7.1f}"
        )
    lines += [
        "",
        "Table 1 (minibatch size): MINT " + f"{settings.batch_size} (constant); the paper quotes MHminibatch 125.4, "
        "AustereMH(nc) 973.8, AustereMH(c) 1924.3, MHSubLhd 10783.4 (ours: docs/reproduction.md, Table 2)",
        f"figures: {fig}, {fig5}",
    ]
    table = "\n".join(lines)
    (out / "table.txt").write_text(table + "\n")
    return table


QUICK = dict(runs=3, mint_epochs=10.0, full_epochs=30, t_batches=1000, checkpoints=30)
"""``--quick``: 3 runs, MINT for 10 epochs, the full-data samplers for 30 steps."""


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce mint-logistic [--quick] [--dataset D] [--runs R]``."""
    p = experiment_parser(
        "mint-logistic",
        __doc__,
        quick="3 runs, MINT for 10 epochs, 30 full-data steps",
        trials="independent runs (as --runs)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        choices=DATASETS,
        help="data set (default fashion-13k if `make data` ran, else synthetic)",
    )
    p.add_argument("--runs", type=positive_int, default=None, help="independent runs per sampler (default 10)")
    opts = p.parse_args(argv)
    cfg = MintLogisticConfig(seed=opts.seed)
    if opts.dataset:
        cfg = cfg._replace(dataset=opts.dataset)
    else:
        from reproductions.mnist import DEBIAN_FASHION_DIR

        if not Path(DEBIAN_FASHION_DIR).exists():
            print(f"{DEBIAN_FASHION_DIR} not found (run `make data`): using the synthetic data set", flush=True)
            cfg = cfg._replace(dataset="synthetic")
    if opts.quick:
        cfg = cfg._replace(**QUICK)
    if opts.runs is not None or opts.trials:
        cfg = cfg._replace(runs=opts.runs or opts.trials)
    if cfg.runs < 2:
        raise ValueError(f"runs={cfg.runs} must be at least 2 (standard errors over runs)")
    out = run_dir(opts, "mint-logistic")
    print(f"Li and Wong 4.2: MINT vs tempered MCMC vs MCMC on {cfg.dataset}, {cfg.runs} runs each", flush=True)
    command = command_line("mint-logistic", list(argv) if argv is not None else [])
    print(run(cfg, out, progress=not opts.no_progress, command=command, results=opts.results))
    return 0
