"""Figures and results tables of the Section 6.2 reproduction (``reproduce logistic``): Figures 3-6, Table 2."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

import numpy as np

from reproductions.plots import minibatch_size_histogram, pyplot, save_figure
from reproductions.results import table
from reproductions.tables import plus_minus

PAPER_TABLE2 = {
    "MHminibatch": ((125.4, 9.2), (216.5, 7.9)),
    "AustereMH(nc)": ((973.8, 49.8), (1098.3, 44.9)),
    "AustereMH(c)": ((1924.3, 52.4), (2795.6, 364.0)),
    "MHSubLhd": ((10783.4, 78.9), (14977.3, 582.0)),
}
"""Mean minibatch size +- s.d. on MNIST-13k and MNIST-100k (Seita et al. Table 2)."""

PAPER_FIGURE6 = {0.005: 116.1, 0.01: 216.5, 0.05: 2215.6}
"""MHminibatch's mean minibatch size on MNIST-100k by random-walk s.d. (Seita et al. Figure 6; 0.01 is Table 2's)."""


def results_prefix(dataset: str) -> str:
    """The results file's name for a data set, e.g. ``logistic_fashion13k`` (also the prefix of its tables and values)."""
    return "logistic_" + re.sub(r"[^a-z0-9]", "", dataset.lower())


def method_key(name: str) -> str:
    """A method's name as a value key: ``AustereMH(nc)`` -> ``austeremh_nc``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def paper_column(dataset: str) -> int | None:
    """Which column of the paper's Table 2 a data set stands in for (0: 13k, 1: 100k, None: neither)."""
    if dataset.startswith("fashion"):
        return 1 if "100k" in dataset else 0
    return None


def plot_figure3(curves: Mapping[str, tuple], temp_curve: np.ndarray, cfg, out: Path) -> Path:
    """Test accuracy vs cumulative data consumed (mean +- s.d. over trials), and the temperature switch."""
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(11, 4))
    for name, (cum, acc) in curves.items():
        x = cum.mean(0)
        mu, sd = acc.mean(0), acc.std(0)
        a1.plot(x, mu, label=name)
        a1.fill_between(x, mu - sd, mu + sd, alpha=0.2)
    a1.set_xscale("log")
    a1.set_xlabel("cumulative data points consumed (visible)")
    a1.set_ylabel("test accuracy")
    a1.set_title(f"{cfg.dataset}, K={cfg.temperature:g}")
    a1.legend(fontsize=8)
    t = np.arange(1, temp_curve.shape[1] + 1)
    mu, sd = temp_curve.mean(0), temp_curve.std(0)
    a2.plot(t, mu, color="C0")
    a2.fill_between(t, mu - sd, mu + sd, alpha=0.2, color="C0")
    a2.axvline(cfg.switch_after, ls="--", color="0.4")
    a2.set_xlabel("sample")
    a2.set_ylabel("test accuracy")
    a2.set_title(f"MHminibatch, K={cfg.temperature:g} then K=1 after {cfg.switch_after}")
    return save_figure(fig, out / "figure3_accuracy.png")


def plot_minibatch_sizes(sizes: Mapping[str, np.ndarray], n_data: int, dataset: str, out: Path) -> Path:
    """Log-log histograms of one trial's minibatch sizes per method, on shared axes (Seita et al. Figures 4 and 5)."""
    names = [k for k, v in sizes.items() if np.min(v) < n_data]  # full-data runs have nothing to show
    fig, axes = pyplot().subplots(
        1, len(names), figsize=(3.6 * len(names), 3.4), sharex=True, sharey=True, squeeze=False
    )
    lo = max(min(float(np.min(sizes[k])) for k in names), 1.0) if names else 1.0
    bins = np.logspace(np.log10(lo), np.log10(n_data), 40)
    for ax, name in zip(axes[0], names):
        bs = np.asarray(sizes[name]).ravel()
        minibatch_size_histogram(ax, bs, bins, f"{name}: mean {bs.mean():.1f}", color="C0")
    axes[0][0].set_ylabel(f"count ({dataset}, trial 1)")
    return save_figure(fig, out / "minibatch_sizes.png")


def table2_results(rows: Mapping[str, dict], cfg, design_info: dict, switch_accuracy: float) -> tuple[dict, dict]:
    """Table 2 (ours beside the paper's column for this data set) and the figures the docs' prose quotes."""
    prefix = results_prefix(cfg.dataset)
    col = paper_column(cfg.dataset)
    columns = ["method", "ours"]
    if col is not None:
        columns.append(f"paper (MNIST-{'100k' if col else '13k'})")
    columns += ["hidden data per test", "acceptance", "test accuracy (last 500)", "wall s"]
    body = []
    for name, r in rows.items():
        paper = [plus_minus(PAPER_TABLE2[name][col]) if name in PAPER_TABLE2 else ""] if col is not None else []
        body.append(
            [
                name,
                plus_minus(r["mean_batch"]),
                *paper,
                f"{r['hidden_per_test']:.0f}",
                f"{r['acceptance']:.3f}",
                plus_minus(r["final_accuracy"], ".4f"),
                f"{r['wall_s']:.1f}",
            ]
        )
    values = {
        f"{prefix}.trials": str(cfg.trials),
        f"{prefix}.num_samples": str(cfg.num_samples),
        f"{prefix}.switch_final_accuracy": f"{switch_accuracy:.3f}",
    }
    for name, r in rows.items():
        k = f"{prefix}.{method_key(name)}"
        values[f"{k}_mean_batch"] = f"{r['mean_batch'][0]:.1f}"
        values[f"{k}_acceptance"] = f"{r['acceptance']:.2f}"
        values[f"{k}_accuracy"] = f"{r['final_accuracy'][0]:.3f}"
    if "MHminibatch" in rows:
        mb = rows["MHminibatch"]
        for name in ("AustereMH(nc)", "AustereMH(c)", "MHSubLhd"):
            if name in rows:
                values[f"{prefix}.{method_key(name)}_over_mhminibatch"] = (
                    f"{rows[name]['mean_batch'][0] / mb['mean_batch'][0]:.1f}"
                )
                if col is not None:
                    values[f"{prefix}.paper_{method_key(name)}_over_mhminibatch"] = (
                        f"{PAPER_TABLE2[name][col][0] / PAPER_TABLE2['MHminibatch'][col][0]:.1f}"
                    )
        if "full-data MH" in rows:
            gap = 100 * (rows["full-data MH"]["final_accuracy"][0] - mb["final_accuracy"][0])
            values[f"{prefix}.accuracy_gap_points"] = f"{gap:.2f}"
            values[f"{prefix}.mhminibatch_accuracy_sd_points"] = f"{100 * mb['final_accuracy'][1]:.2f}"
    c = design_info["austere_c_choice"]
    values.update(
        {
            f"{prefix}.design_m": str(c["batch_size"]),
            f"{prefix}.design_epsilon": f"{c['epsilon']:g}",
            f"{prefix}.design_worst_error": f"{c['worst_error']:.3f}",
            f"{prefix}.design_data_fraction": f"{c['data_fraction']:.2f}",
            f"{prefix}.pilot_mu_std_median": f"{design_info['pilot_mu_std_median']:.2f}",
        }
    )
    return {f"{prefix}_table2": table(columns, body)}, values


def figure6_results(dataset: str, means: Mapping[float, float]) -> tuple[dict, dict]:
    """Figure 6's mean minibatch sizes by step s.d. (ours beside the paper's MNIST-100k figures)."""
    prefix = results_prefix(dataset) + "_figure6"
    rows = [[f"{s:g}", f"{m:.1f}", f"{PAPER_FIGURE6[s]:.1f}" if s in PAPER_FIGURE6 else ""] for s, m in means.items()]
    steps = sorted(means)
    values = {}
    if len(steps) > 1:
        values[f"{prefix}.growth"] = f"{means[steps[-1]] / means[steps[0]]:.0f}"
        values[f"{prefix}.step_ratio_squared"] = f"{(steps[-1] / steps[0]) ** 2:.0f}"
    tab = table(["step s.d.", f"mean minibatch size (ours, {dataset})", "paper (MNIST-100k; 0.01 from Table 2)"], rows)
    return {prefix: tab}, values
