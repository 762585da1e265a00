"""Matplotlib pieces the experiments share: the file-only backend, saving, risk-vs-time and minibatch-size panels."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np


def pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> Path:
    """Tight layout, write ``path`` and close ``fig``; return ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def risk_lines(ax, curves: Mapping[str, Any], **style: Any) -> None:
    """One log-log line of risk against wall-clock seconds per labelled ``RiskCurve``."""
    for label, c in curves.items():
        ax.loglog(c.times, c.risk, label=label, **style)


def risk_vs_time_figure(curves: Mapping[str, Any], path: Path, ylabel: str, title: str) -> Path:
    """A figure of :func:`risk_lines` (markers on the evaluation times) with axis labels, title and legend."""
    fig, ax = pyplot().subplots(figsize=(5.5, 4))
    risk_lines(ax, curves, marker="o", ms=3)
    ax.set_xlabel("wall-clock time (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=120)


def minibatch_size_histogram(ax, sizes: np.ndarray, bins: np.ndarray, title: str, **style: Any) -> None:
    """A log-log histogram of minibatch sizes."""
    ax.hist(sizes, bins=bins, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("minibatch size")
    ax.set_title(title)
