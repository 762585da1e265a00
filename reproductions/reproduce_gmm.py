"""Seita et al. Section 6.1 reproduced: Table 1 (data per test), Table 4 (sample quality), Figures 1-2.

MHminibatch, AustereMH(c) and MHSubLhd on the 10^6-point mixture at K = 10^4, each for
``trials`` independent chains of 3000 samples (run as vmapped chains), with the paper's settings:
m = 50 for all, AustereMH(c) epsilon = 0.005, MHSubLhd gamma = 1.5, p = 2, delta = 0.01.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.acceptance.austere import austere_mh
from minibatch_mcmc.models import gaussian_mixture
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import SampleResult, sample
from reproductions.gmm import GMMConfig, exact_grid, make_data, plot_results, sample_quality
from reproductions.options import experiment_parser, run_dir, written
from reproductions.results import command_line, results_payload, table, write_results
from reproductions.tables import markdown_head, mean_sd, plus_minus
from reproductions.timed import wall_clock

PAPER_TABLE1 = {"MHminibatch": (182.3, 11.4), "AustereMH(c)": (13540.5, 1521.4), "MHSubLhd": (65758.9, 3222.6)}
"""Mean minibatch size +- s.d. over 10 trials (Seita et al. Table 1)."""
PAPER_TABLE4 = {
    "MHminibatch": ((-1306.2, 20.7), (5706.8, 2271.5)),
    "AustereMH(c)": ((-1619.6, 25.3), (10501.3, 2076.5)),
    "MHSubLhd": ((-1301.5, 44.4), (3711.7, 1182.4)),
}
"""(Equation 40, chi-squared) means +- s.d. (Seita et al. Table 4)."""


class ReproduceGMMConfig(NamedTuple):
    """Settings of the reproduction (defaults: the paper's)."""

    base: GMMConfig = GMMConfig()
    trials: int = 10
    austere_epsilon: float = 0.005
    sublhd_gamma: float = 1.5
    sublhd_p: float = 2.0
    sublhd_delta: float = 0.01


def tests_for(cfg: ReproduceGMMConfig, methods: tuple[str, ...] | None = None) -> dict:
    """The acceptance tests with the paper's parameters (all three, or those named in ``methods``)."""
    m = cfg.base.batch_size

    def sublhd():
        from minibatch_mcmc.acceptance.mhsublhd import mh_sublhd

        return mh_sublhd(batch_size=m, gamma=cfg.sublhd_gamma, p=cfg.sublhd_p, delta=cfg.sublhd_delta)

    makers = {
        "MHminibatch": lambda: mh_minibatch(batch_size=m, sigma=cfg.base.sigma),
        "AustereMH(c)": lambda: austere_mh(batch_size=m, epsilon=cfg.austere_epsilon),
        "MHSubLhd": sublhd,
    }
    unknown = set(methods or ()) - set(makers)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; expected some of {list(makers)}")
    return {k: f() for k, f in makers.items() if not methods or k in methods}


def run(
    cfg: ReproduceGMMConfig,
    out: Path,
    progress: bool = True,
    methods: tuple[str, ...] | None = None,
    command: str = "minibatch-mcmc reproduce gmm",
    results_copy: str | Path | None = None,
) -> str:
    """Run all methods; write tables, figures, InferenceData and ``results.json`` (and ``results_copy``) to ``out``; return the tables as text."""
    tests = tests_for(cfg, methods)
    out.mkdir(parents=True, exist_ok=True)
    base = cfg.base
    data = make_data(base)
    data_np = np.asarray(data)
    grid = exact_grid(base, data_np)
    results: dict[str, SampleResult] = {}
    rows = {}
    for name, test in tests.items():
        res, wall = wall_clock(
            sample,
            gaussian_mixture(),
            data,
            jnp.asarray(base.initial, jnp.float32),
            proposal=random_walk(scale=base.proposal_sd),
            test=test,
            num_samples=base.num_samples,
            num_chains=cfg.trials,
            key=base.seed + 1,
            temperature=base.temperature,
            progress=progress,
        )
        results[name] = res
        res.to_inference_data().to_netcdf(str(out / f"{name.replace('(', '_').replace(')', '')}.nc"))
        bs = res.records["batch_size"].astype(float).mean(axis=1)
        hidden = res.records["hidden_data"].astype(float).mean(axis=1)
        q = [sample_quality(np.asarray(res.positions)[c], grid) for c in range(cfg.trials)]
        rows[name] = {
            "mean_batch": mean_sd(list(bs)),
            "hidden_per_test": mean_sd(list(hidden)),
            "acceptance": float(res.records["accepted"].mean()),
            "max_batch": int(res.records["batch_size"].max()),
            "eq40": mean_sd([x["poisson_loglik_eq40"] for x in q]),
            "chi2": mean_sd([x["chi_squared"] for x in q]),
            "dof": q[0]["chi_squared_dof"],
            "wall_s": wall,
        }
    plot_results(base, data_np, {k: _first_chain(v) for k, v in results.items()}, out)
    text = format_tables(rows, cfg)
    (out / "tables.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps({"config": _jsonable(cfg), "rows": rows}, indent=2))
    tables, values = results_tables(rows, cfg)
    figures = ["docs/figures/gmm_figure1_samples.png", "docs/figures/gmm_figure2_minibatch_sizes.png"]
    payload = results_payload("gmm", command, config=_jsonable(cfg), tables=tables, values=values, figures=figures)
    write_results(out, payload, copy_to=results_copy)
    return text


def _first_chain(res: SampleResult) -> SampleResult:
    """A result holding only the first trial (for the figures)."""
    import jax

    return res._replace(
        positions=jax.tree_util.tree_map(lambda a: a[:1], res.positions),
        records={k: v[:1] for k, v in res.records.items()},
    )


def _jsonable(cfg: ReproduceGMMConfig) -> dict:
    """The config as plain JSON values."""
    d = cfg._asdict()
    d["base"] = cfg.base._asdict()
    return d


def format_tables(rows: dict, cfg: ReproduceGMMConfig) -> str:
    """Markdown Tables 1 and 4, ours beside the paper's."""
    lines = [
        f"Table 1: mean minibatch size +- s.d. over {cfg.trials} trials ({cfg.base.num_samples} samples each)",
        "",
        *markdown_head("method", "ours", "paper", "hidden data per test (ours)", "acceptance", "wall s"),
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {plus_minus(r['mean_batch'])} | {plus_minus(PAPER_TABLE1.get(name))} | "
            f"{r['hidden_per_test'][0]:.0f} | {r['acceptance']:.3f} | {r['wall_s']:.1f} |"
        )
    lines += [
        "",
        "Table 4: sample quality against the exact posterior (mean +- s.d. over trials; Eq. 40: higher is better, chi-squared: lower is better)",
        "",
        *markdown_head("method", "Eq. 40 (ours)", "Eq. 40 (paper)", "chi-squared (ours, dof)", "chi-squared (paper)"),
    ]
    for name, r in rows.items():
        eq40_paper, chi2_paper = PAPER_TABLE4.get(name, (None, None))
        lines.append(
            f"| {name} | {plus_minus(r['eq40'])} | {plus_minus(eq40_paper)} | "
            f"{plus_minus(r['chi2'])} ({r['dof']}) | {plus_minus(chi2_paper)} |"
        )
    return "\n".join(lines)


def results_tables(rows: dict, cfg: ReproduceGMMConfig) -> tuple[dict, dict]:
    """Tables 1 and 4 (ours beside the paper's) and the figures the docs' prose quotes, as strings."""
    t1 = table(
        ["method", "ours", "paper", "hidden data per test (ours)", "acceptance", "largest minibatch (ours)", "wall s"],
        [
            [
                name,
                plus_minus(r["mean_batch"]),
                plus_minus(PAPER_TABLE1.get(name)),
                f"{r['hidden_per_test'][0]:.0f}",
                f"{r['acceptance']:.3f}",
                f"{r['max_batch']:,}",
                f"{r['wall_s']:.1f}",
            ]
            for name, r in rows.items()
        ],
    )
    dof = next(iter(rows.values()))["dof"] if rows else 0
    t4 = table(
        ["method", "Eq. 40 (ours)", "Eq. 40 (paper)", f"chi-squared (ours, {dof} dof)", "chi-squared (paper)"],
        [
            [
                name,
                plus_minus(r["eq40"]),
                plus_minus(PAPER_TABLE4.get(name, (None, None))[0]),
                plus_minus(r["chi2"]),
                plus_minus(PAPER_TABLE4.get(name, (None, None))[1]),
            ]
            for name, r in rows.items()
        ],
    )
    keys = {"MHminibatch": "mhminibatch", "AustereMH(c)": "austere", "MHSubLhd": "sublhd"}
    values = {"gmm.trials": str(cfg.trials), "gmm.chi2_dof": str(dof)}
    for name, r in rows.items():
        k = keys[name]
        values[f"gmm.{k}_mean_batch"] = f"{r['mean_batch'][0]:.1f}"
        values[f"gmm.{k}_acceptance"] = f"{r['acceptance']:.2f}"
        values[f"gmm.{k}_max_batch"] = f"{r['max_batch']:,}"
        values[f"gmm.{k}_chi2"] = plus_minus(r["chi2"], ".0f")
    if "MHminibatch" in rows:
        base, paper = rows["MHminibatch"]["mean_batch"][0], PAPER_TABLE1["MHminibatch"][0]
        for name in ("AustereMH(c)", "MHSubLhd"):
            if name in rows:
                values[f"gmm.{keys[name]}_ratio"] = f"{rows[name]['mean_batch'][0] / base:.0f}"
                values[f"gmm.paper_{keys[name]}_ratio"] = f"{PAPER_TABLE1[name][0] / paper:.0f}"
    return {"gmm_table1": t1, "gmm_table4": t4}, values


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce gmm [--quick] [--trials N] [--num-samples T]``."""
    p = experiment_parser(
        "gmm",
        __doc__,
        quick="10^5 points (K scaled to 10^3), 500 samples, 3 trials",
        trials="independent trials (default 10; 3 with --quick)",
        num_samples="samples per trial (default 3000)",
    )
    opts = p.parse_args(argv)
    base = GMMConfig(seed=opts.seed)
    trials = opts.trials or 10
    if opts.quick:
        base = base._replace(n_data=100_000, temperature=1000.0, num_samples=500)
        trials = opts.trials or 3
    if opts.num_samples:
        base = base._replace(num_samples=opts.num_samples)
    cfg = ReproduceGMMConfig(base=base, trials=trials)
    out = run_dir(opts, "reproduce-gmm")
    print(
        f"Seita et al. 6.1: N={base.n_data:,}, K={base.temperature:g}, {base.num_samples} samples x {trials} trials; "
        "MHminibatch, AustereMH(c), MHSubLhd",
        flush=True,
    )
    command = command_line("gmm", sys.argv[1:] if argv is None else argv)
    print(run(cfg, out, progress=not opts.no_progress, command=command, results_copy=opts.results))
    print(written(out))
    return 0
