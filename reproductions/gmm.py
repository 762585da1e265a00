"""Section 6.1 of Seita et al.: the Welling-Teh mixture with 10^6 points at temperature K = 10^4."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import BarkerTest, mh_minibatch
from minibatch_mcmc.diagnostics import chi_squared, grid_posterior, poisson_log_likelihood
from minibatch_mcmc.models import gaussian_mixture, log_posterior_grid, make_mixture_data
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import SampleResult, sample
from reproductions.plots import minibatch_size_histogram, pyplot, save_figure


class GMMConfig(NamedTuple):
    """Settings of the mixture experiment (defaults: the paper's)."""

    n_data: int = 1_000_000
    theta_true: tuple[float, float] = (0.0, 1.0)
    temperature: float = 10_000.0
    proposal_sd: float = 0.15
    """Random-walk s.d. per coordinate; the paper's "0.15" (see docs/notes-on-the-papers.md)."""
    batch_size: int = 50
    num_samples: int = 3000
    sigma: float = 1.0
    initial: tuple[float, float] = (0.0, 0.0)
    seed: int = 0


T1_RANGE = (-1.5, 2.5)
T2_RANGE = (-3.0, 3.0)


def make_data(cfg: GMMConfig) -> jax.Array:
    """The experiment's data set, drawn from the model at ``theta_true``."""
    return make_mixture_data(jax.random.key(cfg.seed), cfg.n_data, cfg.theta_true)


def run_method(
    cfg: GMMConfig, data: jax.Array, method: str, seed: int | None = None, progress: bool = True
) -> SampleResult:
    """Run ``mhminibatch`` or the full-data ``barker`` reference on the mixture."""
    tests = {
        "mhminibatch": lambda: mh_minibatch(batch_size=cfg.batch_size, sigma=cfg.sigma),
        "barker": BarkerTest,
    }
    if method not in tests:
        raise ValueError(f"method={method!r}; expected one of {sorted(tests)}")
    return sample(
        gaussian_mixture(),
        data,
        jnp.asarray(cfg.initial, jnp.float32),
        proposal=random_walk(scale=cfg.proposal_sd),
        test=tests[method](),
        num_samples=cfg.num_samples,
        key=cfg.seed + 1 if seed is None else seed,
        temperature=cfg.temperature,
        progress=progress,
    )


def exact_grid(cfg: GMMConfig, data: np.ndarray, bins: int = 60):
    """Exact tempered posterior bin probabilities on the experiment's plotting window."""
    e1 = np.linspace(*T1_RANGE, bins + 1)
    e2 = np.linspace(*T2_RANGE, bins + 1)
    return grid_posterior(lambda a, b: log_posterior_grid(data, a, b, cfg.temperature), e1, e2, refine=3)


def sample_quality(samples: np.ndarray, grid) -> dict:
    """Equation 40 and the chi-squared statistic of 2-D samples against the exact bin probabilities."""
    chi = chi_squared(samples, grid)
    return {
        "poisson_loglik_eq40": poisson_log_likelihood(samples, grid),
        "chi_squared": chi.statistic,
        "chi_squared_dof": chi.dof,
    }


def plot_results(cfg: GMMConfig, data: np.ndarray, results: dict[str, SampleResult], out: Path) -> list[Path]:
    """Figure 1 (samples over log-posterior contours) and Figure 2 (log-log minibatch-size histograms)."""
    plt = pyplot()
    t1 = np.linspace(*T1_RANGE, 160)
    t2 = np.linspace(*T2_RANGE, 160)
    lp = log_posterior_grid(data, t1, t2, cfg.temperature)
    lp = lp - lp.max()
    names = list(results)
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(4.2 * (len(names) + 1), 4), sharex=True, sharey=True)
    levels = np.linspace(-10, 0, 21)
    axes[0].contourf(t1, t2, lp.T, levels=levels, cmap="viridis")
    axes[0].set_title("log posterior")
    for ax, name in zip(axes[1:], names):
        th = np.asarray(results[name].positions).reshape(-1, 2)
        ax.contour(t1, t2, lp.T, levels=levels[::2], colors="0.6", linewidths=0.5)
        ax.scatter(th[:, 0], th[:, 1], s=3, alpha=0.3, color="C3")
        ax.set_title(name)
    for ax in axes:
        ax.set_xlabel("theta_1")
    axes[0].set_ylabel("theta_2")
    p1 = save_figure(fig, out / "samples_over_posterior.png")

    mb = {k: v for k, v in results.items() if v.records["batch_size"].min() < v.n_data}  # drop full-data runs
    fig, axes = plt.subplots(1, max(len(mb), 1), figsize=(4.5 * max(len(mb), 1), 3.6), squeeze=False)
    for ax, (name, res) in zip(axes[0], mb.items()):
        bs = res.records["batch_size"].ravel()
        bins = np.logspace(np.log10(max(bs.min(), 1)), np.log10(res.n_data), 40)
        minibatch_size_histogram(ax, bs, bins, f"{name}: mean {bs.mean():.1f}", color="C0")
        ax.set_ylabel("count")
    p2 = save_figure(fig, out / "minibatch_sizes.png")
    return [p1, p2]


def format_table(rows: list[dict]) -> str:
    """A plain-text table of run summaries."""
    cols = [
        ("method", "{}", "method"),
        ("samples", "{:d}", "draws"),
        ("acceptance", "{:.3f}", "acceptance_rate"),
        ("mean batch", "{:.1f}", "mean_batch_size"),
        ("data/test", "{:.1f}", "data_per_test"),
        ("eq40 loglik", "{:.1f}", "poisson_loglik_eq40"),
        ("chi2", "{:.1f}", "chi_squared"),
        ("wall s", "{:.2f}", "wall_time_s"),
    ]
    header = " | ".join(f"{c[0]:>12}" for c in cols)
    lines = [header, "-" * len(header)]
    for r in rows:
        cells = []
        for _, fmt, key in cols:
            v = r.get(key, "")
            cells.append(f"{(fmt.format(v) if v != '' else ''):>12}")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def run_demo(
    cfg: GMMConfig, out: Path, methods: tuple[str, ...] = ("mhminibatch", "barker"), progress: bool = True
) -> str:
    """Run the experiment, write InferenceData, figures and a summary to ``out``; return the table."""
    mh_minibatch(batch_size=cfg.batch_size, sigma=cfg.sigma)  # fail on bad settings before any work
    out.mkdir(parents=True, exist_ok=True)
    data = make_data(cfg)
    data_np = np.asarray(data)
    grid = exact_grid(cfg, data_np)
    results: dict[str, SampleResult] = {}
    rows = []
    for method in methods:
        res = run_method(cfg, data, method, progress=progress)
        results[method] = res
        res.to_inference_data().to_netcdf(str(out / f"{method}.nc"))
        row = res.summary(posterior=False) | sample_quality(np.asarray(res.positions), grid)
        rows.append(row)
    plot_results(cfg, data_np, results, out)
    (out / "summary.json").write_text(json.dumps({"config": cfg._asdict(), "runs": rows}, indent=2))
    table = format_table(rows)
    (out / "summary.txt").write_text(table + "\n")
    return table
