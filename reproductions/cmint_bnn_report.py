"""What ``reproduce cmint-bnn`` reports: the final test errors, the text table, the figure and the results file's tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reproductions.plots import pyplot, save_figure
from reproductions.results import table

Row = tuple[int, str, str, float]
"""``(epoch, method, estimator, test error)``: one line of ``test_error.csv``."""

REPORTED = {"sgd": "current", "sgd-m": "current", "sgld": "average", "mint": "average", "cmint": "ensemble"}
"""Each method's estimator as the paper reports it."""

PAPER = {
    ("sgd", "current"): 'figure only; "consistent with" Chen et al. (2014)',
    ("sgd-m", "current"): "figure only",
    ("sgld", "average"): "figure only",
    ("mint", "average"): '"competitive" with SGD, SGD-M, SGLD',
    ("cmint", "ensemble"): "below every other method (10 snapshots)",
}
"""What the paper's Figure 3 (MNIST, 50,000 images, 500 epochs) says of each method's reported estimator."""

ESTIMATORS = {"current": "current weights", "average": "average of the samples", "predictive": "posterior predictive"}
"""Names of the estimators in the results table."""


def final_errors(rows: list[Row]) -> dict[str, tuple[int, str, float]]:
    """Per method, the last recorded ``(epoch, estimator, error)`` of its reported estimator."""
    out = {}
    for epoch, method, est, err in rows:
        if est == REPORTED[method]:
            out[method] = (epoch, est, err)
    return out


def last_error(rows: list[Row], method: str, estimator: str) -> float | None:
    """The last recorded error of ``method``'s ``estimator`` (``None`` if it was not recorded)."""
    errs = [r[3] for r in rows if r[1] == method and r[2] == estimator]
    return errs[-1] if errs else None


def format_table(rows: list[Row], info: dict) -> str:
    """A plain-text table of final and best test errors, wall time and mean acceptance."""
    lines = [
        f"{'method':<7} {'estimator':<9} {'epochs':>6} {'final err':>9} {'best err':>9} {'wall s':>7} {'accept':>6}"
    ]
    for method, (epoch, est, err) in final_errors(rows).items():
        best = min(r[3] for r in rows if r[1] == method and r[2] == est)
        acc = info[method].get("acceptance_by_epoch")
        acc_s = f"{np.mean(acc):6.2f}" if acc else f"{'-':>6}"
        lines.append(f"{method:<7} {est:<9} {epoch:>6} {err:>9.4f} {best:>9.4f} {info[method]['wall_s']:>7.1f} {acc_s}")
    return "\n".join(lines)


def results_tables(rows: list[Row], info: dict, epochs: int, prefix: str) -> tuple[dict, dict]:
    """Table ``PREFIX_errors`` (final test error per method and estimator, beside the paper) and the prose values ``PREFIX.*``."""
    cells, values = [], {}
    cmint_label = f"ensemble of the {len(info.get('cmint', {}).get('snapshot_epochs', []))} snapshots"
    for method in REPORTED:
        if method not in info:
            continue
        acc = info[method].get("acceptance_by_epoch")
        for est in ("current", "average", "predictive", "ensemble"):
            err = last_error(rows, method, est)
            if err is None or (est == "current" and method in ("sgld",)):
                continue
            label = cmint_label if est == "ensemble" else ESTIMATORS[est]
            cells.append(
                [
                    method.upper() if method != "sgd-m" else "SGD-M",
                    label,
                    PAPER.get((method, est), "-"),
                    f"{err:.3f}",
                    f"{np.mean(acc):.2f}" if acc else "-",
                    f"{info[method]['wall_s']:.0f}",
                ]
            )
            values[f"{prefix}.{method.replace('-', '')}_{est}"] = f"{err:.3f}"
        if acc:
            values[f"{prefix}.{method}_acceptance"] = f"{np.mean(acc):.2f}"
        values[f"{prefix}.{method.replace('-', '')}_wall_s"] = f"{info[method]['wall_s']:.0f}"
    snaps = [r[3] for r in rows if r[1] == "cmint" and r[2] == "ensemble"]
    if snaps:
        values[f"{prefix}.cmint_snapshots"] = ", ".join(f"{e:.3f}" for e in snaps)
    if "mint" in info:
        values[f"{prefix}.mint_temperature"] = f"{info['mint']['temperature']:.0f}"
    if "mint" in info and "sgd" in info:
        values[f"{prefix}.mint_over_sgd_time"] = f"{info['mint']['wall_s'] / info['sgd']['wall_s']:.1f}"
    values[f"{prefix}.wall_min"] = f"{sum(v['wall_s'] for v in info.values()) / 60:.1f}"
    cols = [
        "method",
        "estimator",
        "paper (MNIST, 50,000 images, 500 epochs)",
        f"ours ({epochs} epochs)",
        "mean acceptance",
        "wall s",
    ]
    return {f"{prefix}_errors": table(cols, cells)}, values


def plot_test_error(rows: list[Row], path: Path, title: str) -> None:
    """Test error against epochs for each method (Figure 3's layout); CMINT's final ensemble as a dashed line.

    SGLD and MINT are drawn with the paper's estimator (the average of the samples, solid) and the
    posterior predictive (the mean softmax of epoch-end samples, dotted).
    """
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    finals = final_errors(rows)
    for method, (_, est, _) in finals.items():
        if method == "cmint":
            continue
        pts = [(r[0], r[3]) for r in rows if r[1] == method and r[2] == est]
        (line,) = ax.plot(*zip(*pts), label=f"{method.upper()} ({est})" if est != "current" else method.upper())
        pred = [(r[0], r[3]) for r in rows if r[1] == method and r[2] == "predictive"]
        if pred:
            ax.plot(*zip(*pred), ls=":", color=line.get_color(), label=f"{method.upper()} (predictive)")
    if "cmint" in finals:
        ax.axhline(finals["cmint"][2], color="k", ls="--", label=f"CMINT ensemble ({finals['cmint'][0]} epochs)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test error")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)
