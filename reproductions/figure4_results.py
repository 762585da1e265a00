"""Results of ``reproduce figure4`` (Korattikara et al. 4.2.1): the tables of Figure 4 (a) and (b), and Figure 5.

Figure 5 of the paper shows the marginal of ``(theta_1, theta_2)`` for epsilon = 0 (exact MH) and epsilon = 0.01
at several wall-clock times, each run's against the true one. Here every chain of panel (b) keeps its thinned
draws with the time each was made, so the figure needs no extra sampling: per chain, the draws made by time
``t`` are summarised by their mean and covariance (drawn as a 2-s.d. ellipse) beside the long exact reference's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from reproductions.plots import pyplot, save_figure
from reproductions.results import table

FIGURE5_EPSILONS = (0.0, 0.01)
"""The two settings the paper's Figure 5 compares."""
FIGURE5_FRACTIONS = (0.05, 0.25, 1.0)
"""Figure 5's times as fractions of the end of the shorter of its runs."""


def eps_key(epsilon: float) -> str:
    """``eps_0.01``: an epsilon in a value key."""
    return f"eps_{epsilon:g}"


def risk_grid(curves: Mapping[float, tuple[Any, Any]], count: int = 4) -> np.ndarray:
    """``count`` log-spaced times from the latest first time to the earliest last time of the risk curves."""
    t_end = min(c.times[-1] for c, _ in curves.values())
    return np.geomspace(max(c.times[0] for c, _ in curves.values()), t_end, count)


def figure4_tables(
    rows: Sequence[Any], curves: Mapping[float, tuple[Any, Any]], ref_se2: float
) -> tuple[dict, dict[str, str]]:
    """Tables ``figure4_a`` (data use and wrong decisions per epsilon) and ``figure4_b`` (risk at common times, draws,
    data, seconds per chain), and the values ``figure4.*`` the docs quote."""
    a_rows = [["0 (exact)", "100.0", "0.00", "-", "-"]]
    a_rows += [
        [
            f"{r.epsilon:g}",
            f"{100 * r.data_fraction:.1f}",
            f"{100 * r.wrong_fraction:.2f}",
            f"{100 * r.wrong_se:.2f}",
            f"{r.acceptance:.3f}",
        ]
        for r in rows
    ]
    tab_a = table(["epsilon", "data used %", "wrong decisions %", "s.e. %", "acceptance"], a_rows)
    grid = risk_grid(curves)
    b_rows, values = [], {"figure4.ref_se2": f"{ref_se2:.1e}"}
    per_step = {}
    for eps, (c, ch) in curves.items():
        at = np.interp(np.log(grid), np.log(c.times), c.risk)
        secs = float(ch.wall_times[:, -1].mean())
        steps = ch.steps
        per_step[eps] = secs / steps
        b_rows.append(
            [
                f"{eps:g}",
                *(f"{v:.2e}" for v in at),
                str(ch.predictions.shape[1]),
                f"{100 * ch.data_fraction:.1f}",
                f"{secs:.1f}",
            ]
        )
        values[f"figure4.seconds_per_chain.{eps_key(eps)}"] = f"{secs:.1f}"
        values[f"figure4.steps_per_chain.{eps_key(eps)}"] = f"{steps:,}"
        values[f"figure4.data_pct.{eps_key(eps)}"] = f"{100 * ch.data_fraction:.1f}"
        values[f"figure4.risk_end.{eps_key(eps)}"] = f"{c.risk[-1]:.2e}"
    for r in rows:
        values[f"figure4.wrong_pct.{eps_key(r.epsilon)}"] = f"{100 * r.wrong_fraction:.2f}"
        values[f"figure4.audit_data_pct.{eps_key(r.epsilon)}"] = f"{100 * r.data_fraction:.1f}"
    tab_b = table(
        ["epsilon", *(f"risk at t={t:.2g} s" for t in grid), "draws T per chain", "data %", "s per chain"], b_rows
    )
    if 0.0 in per_step and len(per_step) > 1:
        ratios = [v / per_step[0.0] for e, v in per_step.items() if e > 0]
        values["figure4.time_per_step_ratio_min"] = f"{min(ratios):.1f}"
        values["figure4.time_per_step_ratio_max"] = f"{max(ratios):.1f}"
        fractions = [100 * ch.data_fraction for e, (_, ch) in curves.items() if e > 0]
        values["figure4.data_pct_min"] = f"{min(fractions):.0f}"
        values["figure4.data_pct_max"] = f"{max(fractions):.0f}"
    return {"figure4_a": tab_a, "figure4_b": tab_b}, values


def snapshot_times(wall_times: Sequence[np.ndarray], fractions: Sequence[float] = FIGURE5_FRACTIONS) -> np.ndarray:
    """Figure 5's times: ``fractions`` of the end of the shortest of the runs (each ``(R, T)`` cumulative seconds)."""
    t_end = min(float(np.min(w[:, -1])) for w in wall_times)
    return t_end * np.asarray(fractions, np.float64)


def moments2(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(2,)`` and covariance ``(2, 2)`` of ``(n, 2)`` points (zero covariance for a single point)."""
    mean = points.mean(axis=0)
    cov = np.cov(points.T) if len(points) > 1 else np.zeros((2, 2))
    return mean, cov


def ellipse(mean: np.ndarray, cov: np.ndarray, k: float = 2.0, n: int = 100) -> np.ndarray:
    """``(n, 2)`` points of the ``k``-s.d. ellipse of a 2-D Gaussian."""
    vals, vecs = np.linalg.eigh(cov)
    angle = np.linspace(0, 2 * np.pi, n)
    circle = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return mean + k * (circle * np.sqrt(np.maximum(vals, 0.0))) @ vecs.T


def marginal_rows(
    runs: Mapping[float, tuple[np.ndarray, np.ndarray]], reference: np.ndarray, times: np.ndarray
) -> list[list[str]]:
    """Rows of table ``figure5_marginals``: per epsilon and time, draws per chain and the pooled mean, s.d. and
    correlation of ``(theta_1, theta_2)`` over the draws made by then; the reference last.

    ``runs[eps] = (positions (R, T, 2), wall_times (R, T))``; ``reference``: ``(n, 2)`` draws of the exact run.
    """

    def row(label: str, t: str, draws: str, pts: np.ndarray) -> list[str]:
        mean, cov = moments2(pts)
        sd = np.sqrt(np.diag(cov))
        corr = cov[0, 1] / (sd[0] * sd[1]) if np.all(sd > 0) else float("nan")
        return [label, t, draws, f"{mean[0]:.4f}", f"{sd[0]:.4f}", f"{mean[1]:.4f}", f"{sd[1]:.4f}", f"{corr:.2f}"]

    out = []
    for eps, (pos, wall) in runs.items():
        for t in times:
            made = wall <= t
            pts = pos[made]
            out.append(
                row(
                    f"{eps:g}",
                    f"{t:.2g}",
                    f"{made.sum(axis=1).mean():.0f}",
                    pts if len(pts) else pos[:, :1].reshape(-1, 2),
                )
            )
    out.append(row("reference (exact, long)", "-", str(len(reference)), reference))
    return out


def figure5_table(
    runs: Mapping[float, tuple[np.ndarray, np.ndarray]], reference: np.ndarray, times: np.ndarray
) -> dict:
    """Table ``figure5_marginals`` from :func:`marginal_rows`."""
    cols = ["epsilon", "t s", "draws per chain", "mean theta_1", "sd theta_1", "mean theta_2", "sd theta_2", "corr"]
    return {"figure5_marginals": table(cols, marginal_rows(runs, reference, times))}


def plot_figure5(
    runs: Mapping[float, tuple[np.ndarray, np.ndarray]],
    reference: np.ndarray,
    times: np.ndarray,
    path: Path,
    title: str,
) -> Path:
    """Figure 5: one panel per epsilon (rows) and time (columns); each chain's draws so far and their 2-s.d. ellipse
    (red), the reference's 2-s.d. ellipse (blue)."""
    fig, axes = pyplot().subplots(len(runs), len(times), figsize=(3.2 * len(times), 3.0 * len(runs)), squeeze=False)
    ref_curve = ellipse(*moments2(reference))
    every = np.concatenate([ref_curve, *(p.reshape(-1, 2) for p, _ in runs.values())])
    lo, hi = every.min(axis=0), every.max(axis=0)
    pad = 0.05 * (hi - lo)
    for i, (eps, (pos, wall)) in enumerate(runs.items()):
        for j, t in enumerate(times):
            ax = axes[i, j]
            ax.plot(*ref_curve.T, color="b", lw=1.5, label="reference (exact, long)")
            for c in range(pos.shape[0]):
                pts = pos[c][wall[c] <= t]
                ax.plot(*pts.T, ".", color="r", ms=1.5, alpha=0.3)
                if len(pts) > 2:
                    ax.plot(*ellipse(*moments2(pts)).T, color="r", lw=1, label="each chain" if c == 0 else None)
            ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
            ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
            ax.set_title(f"eps={eps:g}, t={t:.2g} s ({int((wall <= t).sum(axis=1).mean())} draws/chain)", fontsize=8)
            ax.set_xlabel("theta_1")
            ax.set_ylabel("theta_2")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(title, fontsize=8)
    return save_figure(fig, path, dpi=120)
