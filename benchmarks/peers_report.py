"""Figures, printed tables and the JSON results file of ``benchmarks/peers.py``.

Every figure printed is also written to the results file, as a raw number (``null`` where a run did not
reach the error threshold or a method was skipped) and in the formatted tables the docs render
(``benchmarks/render_results.py``: a ``tables`` entry named ``NAME`` fills the block between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` in ``docs/*.md``).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path

import numpy as np

BASELINE = "NumPyro HMCECS"
OURS = ("MHminibatch+CV MALA", "MHminibatch+CV RW")
EXACT = ("SMH-2 indep.", "MH-SS-2 indep.")
COLUMNS = [
    "N",
    "method",
    "warm-up s",
    "warm-up data (x N)",
    "draws/s",
    "accept",
    "min ESS",
    "ESS/s",
    "ESS/s incl. warm-up",
    "t(mean) s",
    "t(sd) s",
    "data/step (% of N)",
    "step / SGD step (best, median)",
]
RATIO_COLUMNS = ["N", "ratio", "ESS/s", "ESS/s incl. warm-up"]


def finite_or_none(x: float) -> float | None:
    """``x`` as a JSON number, or None when it is not finite."""
    return float(x) if x is not None and math.isfinite(x) else None


def row_figures(name: str, n: int, tr, ess: float, t_mean: float, t_sd: float, e_mean: float, e_sd: float) -> dict:
    """The raw figures of one method's run at one N."""
    total = float(tr.block_end[-1])
    wall = tr.warmup_s + total
    sgd = tr.sgd or {}
    return {
        "method": name,
        "n": n,
        "draws": int(len(tr.draws)),
        "sampling_s": total,
        "draws_per_s": len(tr.draws) / total,
        "accept": tr.accept,
        "compile_s": tr.compile_s,
        "warmup_s": tr.warmup_s,
        "warmup_data_over_n": finite_or_none(tr.warmup_data / n),
        "min_ess": ess,
        "ess_per_s": ess / total,
        "ess_per_s_with_warmup": ess / wall,
        "t_mean_s": finite_or_none(t_mean),
        "t_sd_s": finite_or_none(t_sd),
        "end_err_mean": float(e_mean),
        "end_err_sd": float(e_sd),
        "data_per_step_over_n": finite_or_none(tr.data_per_step / n),
        "data_per_step": finite_or_none(tr.data_per_step),
        "step_us": finite_or_none(1e6 * tr.step_s),
        "sgd_step_us": sgd.get("sgd_us"),
        "step_over_sgd_best": sgd.get("ratio_of_best"),
        "step_over_sgd_median": sgd.get("median_ratio"),
        "sgd_m": sgd.get("m"),
        "details": tr.extra,
        "skipped": None,
    }


def skipped_figures(name: str, n: int, reason: str, warmup_lower_bound: float | None = None) -> dict:
    """A method that did not run (or failed) at this N, with the reason."""
    return {"method": name, "n": n, "skipped": reason, "warmup_s_lower_bound": warmup_lower_bound}


def fmt(x, spec: str, none: str = "-") -> str:
    """``format(x, spec)``, or ``none`` for a missing value."""
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def table_row(r: dict) -> list[str]:
    """One formatted row of the main table (a time not reached shows as '> the seconds sampled')."""
    n = f"{r['n']:.0e}".replace("e+0", "e")
    if r.get("skipped"):
        lb = r.get("warmup_s_lower_bound")
        warm = f"> {lb:.0f} (not run)" if lb else "-"
        return [n, r["method"], warm] + ["-"] * (len(COLUMNS) - 3)
    t = lambda v: fmt(v, ".1f", none=f"> {math.floor(r['sampling_s']):.0f}")  # noqa: E731 -- not reached within the run
    return [
        n,
        r["method"],
        fmt(r["warmup_s"], ".1f"),
        fmt(r["warmup_data_over_n"], ".2f"),
        fmt(r["draws_per_s"], ",.0f"),
        fmt(r["accept"], ".2f"),
        fmt(r["min_ess"], ",.0f"),
        fmt(r["ess_per_s"], ".2f"),
        fmt(r["ess_per_s_with_warmup"], ".2f"),
        t(r["t_mean_s"]),
        t(r["t_sd_s"]),
        fmt(None if r["data_per_step_over_n"] is None else 100 * r["data_per_step_over_n"], ".3g"),
        "-" if r["step_over_sgd_best"] is None else f"{r['step_over_sgd_best']:.2f}, {r['step_over_sgd_median']:.2f}",
    ]


def ratio_rows(rows: list[dict]) -> list[list[str]]:
    """ESS/s (sampling only and warm-up included) of each of ours over HMCECS's, per N."""
    out = []
    by = {(r["n"], r["method"]): r for r in rows}
    for n in sorted({r["n"] for r in rows}):
        base = by.get((n, BASELINE))
        for name in OURS:
            ours = by.get((n, name))
            if ours is None or ours.get("skipped") or base is None or base.get("skipped"):
                continue
            out.append(
                [
                    f"{n:.0e}".replace("e+0", "e"),
                    f"{name} / HMCECS",
                    f"{ours['ess_per_s'] / base['ess_per_s']:.2f}",
                    f"{ours['ess_per_s_with_warmup'] / base['ess_per_s_with_warmup']:.2f}",
                ]
            )
    return out


def print_table(columns: list[str], rows: list[list[str]]) -> None:
    """Print a fixed-width table."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    print("  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for r in rows:
        print("  " + "  ".join(v.rjust(w) for v, w in zip(r, widths)))


def environment() -> dict:
    """Machine, command line, library versions, date and load average."""
    import jax

    versions = {"jax": jax.__version__, "python": platform.python_version()}
    for lib in ("numpyro", "blackjax", "arviz"):
        try:
            versions[lib] = __import__(lib).__version__
        except ImportError:
            versions[lib] = None
    dev = jax.devices()[0]
    return {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {jax.device_count()} x {dev.platform}:{dev.device_kind}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "versions": versions,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "load_average_start": list(os.getloadavg()),
    }


def previous_results(path: str, env: dict, sizes: list[int]) -> tuple[dict, list[dict], dict]:
    """``(env, rows, references)`` of an earlier run in ``path`` minus the sizes about to be rerun; ``env`` lists every run."""
    if not Path(path).exists():
        return {**env, "runs": [env]}, [], {}
    old = json.loads(Path(path).read_text())
    runs = old.get(
        "runs",
        [
            {
                k: old[k]
                for k in ("machine", "command", "versions", "date", "load_average_start", "load_average_end")
                if k in old
            }
        ],
    )
    rows = [r for r in old["rows"] if r["n"] not in sizes]
    refs = {k: v for k, v in old["references"].items() if int(k) not in sizes}
    return {**env, "runs": runs + [env]}, rows, refs


def tables(rows: list[dict]) -> dict:
    """The formatted tables the docs render, from the rows' raw figures."""
    return {
        "peers_t1": {"columns": COLUMNS, "rows": [table_row(r) for r in rows]},
        "peers_t1_ratios": {"columns": RATIO_COLUMNS, "rows": ratio_rows(rows)},
        "peers_t1_notes": {
            "columns": ["N", "method", "details"],
            "rows": [
                [f"{r['n']:,}", r["method"], (f"skipped: {r['skipped']}" if r.get("skipped") else r["details"])]
                for r in rows
            ],
        },
    }


RUN_COLUMNS = ["N", "method", "draws", "compile s", "end err mean", "end err sd", "details"]
PAIR_COLUMNS = ["N", "ratio", "draws/s", "ESS/s", "ESS/s incl. warm-up"]
REF_COLUMNS = [
    "N",
    "reference",
    "max abs mean diff / sd",
    "its MC error",
    "max abs sd ratio - 1",
    "its MC error",
    "reference min ESS",
]


def pair_ratio_rows(
    rows: list[dict], ours=("MHminibatch", *OURS, *EXACT), bases=("BlackJAX RWMH", BASELINE)
) -> list[list[str]]:
    """Draws/s and ESS/s (sampling only, warm-up included) of each of ``ours`` over each of ``bases``, and of each exact
    test over each MHminibatch+CV method, per N."""
    by = {(r["n"], r["method"]): r for r in rows if not r.get("skipped")}
    pairs = [(a, b) for a in ours for b in bases] + [(a, b) for a in EXACT for b in OURS]
    out = []
    for n in sorted({r["n"] for r in rows}):
        for a, b in pairs:
            ra, rb = by.get((n, a)), by.get((n, b))
            if ra is None or rb is None:
                continue
            q = [ra[k] / rb[k] for k in ("draws_per_s", "ess_per_s", "ess_per_s_with_warmup")]
            out.append([f"{n:.0e}".replace("e+0", "e"), f"{a} / {b}", *(f"{x:.2g}" for x in q)])
    return out


def reference_rows(references: dict) -> list[list[str]]:
    """Distance between the Laplace approximation and the full-data NUTS reference, where NUTS was run."""
    out = []
    for n, ref in sorted(references.items(), key=lambda kv: int(kv[0])):
        c = ref.get("check")
        if c:
            out.append(
                [
                    f"{int(n):.0e}".replace("e+0", "e"),
                    ref["name"],
                    f"{c['mean_diff']:.3f}",
                    f"{c['mc_mean']:.3f}",
                    f"{c['sd_diff']:.3f}",
                    f"{c['mc_sd']:.3f}",
                    f"{c['ess']:,.0f}",
                ]
            )
    return out


def value_key(label: str) -> str:
    """A method or ratio label as a value name: ``"SMH-2 indep. / MHminibatch+CV MALA"`` -> ``SMH-2_indep_over_MHminibatch_CV_MALA``."""
    return label.replace(" / ", "_over_").replace(" ", "_").replace("+", "_").replace(".", "")


def prefixed_results(prefix: str, rows: list[dict], references: dict) -> tuple[dict, dict]:
    """Tables ``PREFIX``, ``PREFIX_runs``, ``PREFIX_ratios``, ``PREFIX_reference`` and the prose values ``PREFIX.*``."""
    tabs = {
        prefix: {"columns": COLUMNS, "rows": [table_row(r) for r in rows]},
        f"{prefix}_runs": {
            "columns": RUN_COLUMNS,
            "rows": [
                [
                    f"{r['n']:.0e}".replace("e+0", "e"),
                    r["method"],
                    f"{r['draws']:,}",
                    f"{r['compile_s']:.1f}",
                    f"{r['end_err_mean']:.3f}",
                    f"{r['end_err_sd']:.3f}",
                    r["details"],
                ]
                if not r.get("skipped")
                else [f"{r['n']:.0e}".replace("e+0", "e"), r["method"], "-", "-", "-", "-", f"skipped: {r['skipped']}"]
                for r in rows
            ],
        },
        f"{prefix}_ratios": {"columns": PAIR_COLUMNS, "rows": pair_ratio_rows(rows)},
    }
    refs = reference_rows(references)
    if refs:
        tabs[f"{prefix}_reference"] = {"columns": REF_COLUMNS, "rows": refs}
    values = {}
    for r in rows:
        if r["method"] == "MHminibatch" and not r.get("skipped"):
            values[f"{prefix}.batch_fraction_{r['n']}"] = f"{r['data_per_step_over_n']:.2f}"
        if r["method"] in EXACT and not r.get("skipped"):
            values[f"{prefix}.{value_key(r['method'])}.rows_per_step_{r['n']}"] = f"{r['data_per_step']:.3g}"
    for row in tabs[f"{prefix}_ratios"]["rows"]:
        key = value_key(row[1])
        values[f"{prefix}.{key}.draws_per_s_{row[0]}"] = row[2]
        values[f"{prefix}.{key}.ess_per_s_{row[0]}"] = row[3]
    return tabs, values


def write_results(path: str, env: dict, args, rows: list[dict], references: dict) -> None:
    """Write every figure and the rendered tables to ``path`` (JSON)."""
    out = {
        **env,
        "load_average_end": list(os.getloadavg()),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "references": references,
        "rows": rows,
        "tables": tables(rows),
    }
    if "runs" in out:
        out["runs"][-1] = {**out["runs"][-1], "load_average_end": out["load_average_end"]}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1, default=_json_default) + "\n")


def rebuild_tables(path: str) -> None:
    """Re-format the tables of a results file from its raw rows (after a change of layout here; no rerun)."""
    out = json.loads(Path(path).read_text())
    out["tables"] = tables(out["rows"])
    Path(path).write_text(json.dumps(out, indent=1, default=_json_default) + "\n")


def _json_default(x):
    """numpy scalars and arrays as plain JSON."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    rebuild_tables(sys.argv[1] if len(sys.argv) > 1 else "docs/results/peers_t1.json")
