"""What ``reproduce sgld-l1`` reports (Korattikara et al. 4.2.4): Figure 9 (the exact density, the gradient of the log
posterior and one histogram per method), the table of the runs beside the paper's data fractions, and the figures the
docs quote."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from minibatch_mcmc.models.l1_regression import L1Posterior
from reproductions.plots import pyplot, save_figure
from reproductions.results import table


def plot(post: L1Posterior, results: dict[str, np.ndarray], rows: list[dict], edges: np.ndarray, path: Path) -> Path:
    """Figure 9 of the paper: (a) density, (b) gradient of the log posterior, then one histogram per method."""
    t = np.linspace(edges[0], edges[-1], 2000)
    dens = post.density(t)
    n_panels = 2 + len(results)
    cols = 4
    fig, axes = pyplot().subplots(
        math.ceil(n_panels / cols), cols, figsize=(4.2 * cols, 3.3 * math.ceil(n_panels / cols))
    )
    axes = axes.ravel()
    axes[0].plot(t, dens, color="k")
    axes[0].set_title("(a) exact posterior density")
    axes[1].plot(t, post.grad_log_density(t), color="k")
    axes[1].set_title("(b) gradient of the log posterior")
    by_name = {r["method"]: r for r in rows}
    for i, (ax, (name, th)) in enumerate(zip(axes[2:], results.items())):
        ax.hist(th.ravel(), bins=edges, density=True, color="C3", alpha=0.7, label="draws")
        ax.plot(t, dens, color="k", lw=1.2, label="exact")
        r = by_name[name]
        extra = "" if name.startswith("SGLD (") else f", data/test {100 * r['data_fraction_per_test']:.1f}%"
        ax.set_title(
            f"({chr(ord('c') + i)}) {name}\nTV {r['tv']:.3f}, accept {r['acceptance_rate']:.2f}{extra}", fontsize=9
        )
    for ax in axes[:n_panels]:
        ax.set_xlabel("theta")
        ax.set_xlim(edges[0], edges[-1])
    for ax in axes[n_panels:]:
        ax.axis("off")
    return save_figure(fig, path)


TABLE_COLUMNS = (
    "method",
    "TV to exact",
    "iid TV floor at ESS",
    "ESS",
    "acceptance",
    "data per test (% of N)",
    "paper",
    "P(theta<0)",
    "99.9% quantile",
    "max",
)


def markdown(tab: dict) -> str:
    """A results table as Markdown text."""
    lines = ["| " + " | ".join(tab["columns"]) + " |", "|" + "---|" * len(tab["columns"])]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in tab["rows"]])


def results_table(rows: list[dict], exact: dict | None = None) -> dict:
    """The runs beside the paper's data fractions (and the exact posterior's tail, if given), as a results table."""
    cells = []
    for r in rows:
        paper = "" if r["paper_data_fraction"] is None else f"{100 * r['paper_data_fraction']:.1f}"
        cells.append(
            [
                r["method"],
                f"{r['tv']:.3f}",
                f"{r['tv_iid_floor_at_ess']:.3f}",
                f"{r['ess']:.0f}",
                f"{r['acceptance_rate']:.3f}",
                f"{100 * r['data_fraction_per_test']:.1f}",
                paper,
                f"{r['p_negative']:.4f}",
                f"{r['q999']:.4f}",
                f"{r['max']:.4f}",
            ]
        )
    if exact is not None:
        cells.append(
            ["exact (quadrature)", "0", "", "", "", "", "", f"{exact['p_negative']:.4f}", f"{exact['q999']:.4f}", ""]
        )
    return table(TABLE_COLUMNS, cells)


def format_table(rows: list[dict], exact: dict | None = None) -> str:
    """Markdown table of the runs beside the paper's data fractions (and the exact posterior's tail, if given)."""
    return markdown(results_table(rows, exact))


def method_key(name: str) -> str:
    """A method's name as a value-key part: ``sgld``, ``exact_mh``, ``austere_0.1``, ``mhminibatch``."""
    if name.startswith("AustereMH eps="):
        return "austere_" + name.split("=", 1)[1]
    return {"SGLD (no test)": "sgld", "SGLD + exact MH": "exact_mh"}.get(name, name.lower().replace(" ", "_"))


def run_values(rows: list[dict], exact: dict) -> dict[str, str]:
    """The figures the docs quote: the exact posterior's summaries and each method's TV, mean, tail and data use."""
    values = {
        "sgld_l1.exact.mode": f"{exact['mode']:.5f}",
        "sgld_l1.exact.mean": f"{exact['mean']:.5f}",
        "sgld_l1.exact.sd": f"{exact['sd']:.5f}",
        "sgld_l1.exact.p_negative": f"{exact['p_negative']:.4f}",
        "sgld_l1.exact.p_negative_pct": f"{100 * exact['p_negative']:.2f}",
        "sgld_l1.exact.q999": f"{exact['q999']:.4f}",
        "sgld_l1.exact.lam_s_xy": f"{exact['lam_s_xy']:.1f}",
    }
    for r in rows:
        k = f"sgld_l1.{method_key(r['method'])}"
        values.update(
            {
                f"{k}.tv": f"{r['tv']:.3f}",
                f"{k}.mean": f"{r['mean']:.4f}",
                f"{k}.p_negative_pct": f"{100 * r['p_negative']:.2f}",
                f"{k}.data_pct": f"{100 * r['data_fraction_per_test']:.1f}",
                f"{k}.acceptance": f"{r['acceptance_rate']:.3f}",
                f"{k}.wall_s": f"{r['wall_time_s']:.0f}",
            }
        )
    corrected = [r["tv"] for r in rows if r["method"] != "SGLD (no test)"]
    if corrected:
        values["sgld_l1.corrected_tv_min"] = f"{min(corrected):.2f}"
        values["sgld_l1.corrected_tv_max"] = f"{max(corrected):.2f}"
    return values
