"""Korattikara et al. Section 4.2.2 reproduced: ICA with a random walk on the Stiefel manifold.

Four synthetic sources (Laplace "music", Student-t "traffic noise", two Gaussians; the paper's recordings
are not available) are mixed at random and whitened. The posterior over the orthonormal unmixing matrix
``W`` (uniform prior, 4 cosh^2 likelihood) is sampled by ``W' = W expm(S)`` under exact MH
(``epsilon = 0``) and AustereMH at several ``epsilon``; Figure 6 is the risk of the estimate of
``E[d_A(W, W0)]`` (Amari distance to the true unmixing matrix) against wall time, with the reference
from a longer exact run. The paper's 1.95 million points are ``--full``; the default uses fewer so the
run takes minutes.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.diagnostics.risk import posterior_risk, risk_curve
from minibatch_mcmc.models.ica import amari_distance, ica, make_ica_data
from minibatch_mcmc.proposals.stiefel import stiefel_random_walk
from reproductions import risk_vs_time
from reproductions.options import positive_float, positive_int, risk_vs_time_config, risk_vs_time_parser, run_dir
from reproductions.plots import risk_vs_time_figure
from reproductions.timed import epsilon_tests


class ICAConfig(NamedTuple):
    """Settings; the defaults run in minutes, ``--full`` restores the paper's 1.95M points and 10 chains."""

    n_data: int = 200_000
    step_scale: float = 2.5
    """Random-walk step ``step_scale / sqrt(N)`` (acceptance about 0.5 under exact MH)."""
    epsilons: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1, 0.2)
    batch_size: int = 500
    mhminibatch: bool = False
    time_budget: float = 15.0
    """Wall-clock seconds per chain for each test (the paper ran each for about 6400 s)."""
    max_samples: int = 500_000
    reference_samples: int = 8000
    chains: int = 4
    burn_in: float = 0.1
    seed: int = 0


QUICK = dict(n_data=20_000, time_budget=2.0, reference_samples=3000, batch_size=200)
FULL = dict(n_data=1_950_000, time_budget=6400.0, max_samples=5_000_000, reference_samples=100_000, chains=10)


def polar(w: np.ndarray) -> np.ndarray:
    """The orthonormal factor ``U V^T`` of ``W`` (the nearest orthonormal matrix)."""
    u, _, vt = np.linalg.svd(w)
    return u @ vt


def tests_for(cfg: ICAConfig) -> dict:
    """Exact MH for epsilon = 0, AustereMH(c) otherwise, optionally MHminibatch."""
    return epsilon_tests(cfg.epsilons, cfg.batch_size, cfg.mhminibatch)


def run(cfg: ICAConfig, out: Path) -> risk_vs_time.Report:
    """Reference run, then every test; writes ``figure6_risk.png``, ``summary.json`` and ``tables.md``; returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    d = make_ica_data(cfg.seed, cfg.n_data)
    data = {"x": jnp.asarray(d.data["x"])}
    step = cfg.step_scale / math.sqrt(cfg.n_data)
    model, proposal = ica(), stiefel_random_walk(step)
    start = jnp.asarray(polar(d.w_true), jnp.float32)

    def amari(run_positions: np.ndarray) -> np.ndarray:
        return amari_distance(np.asarray(run_positions, np.float64), d.w_true)

    print(
        f"reference: exact MH, {cfg.chains} chains x {cfg.reference_samples} steps, N={cfg.n_data:,}, step={step:.2e}",
        flush=True,
    )
    ref = risk_vs_time.exact_reference(model, data, start, proposal, cfg)
    ref_vals = amari(ref.positions)[:, int(cfg.burn_in * cfg.reference_samples) :]
    reference = float(ref_vals.mean())
    rows, curves = {}, {}
    for label, res in risk_vs_time.timed_runs(model, data, start, proposal, tests_for(cfg), cfg):
        keep = int(cfg.burn_in * res.times.shape[1])
        vals = amari(res.positions)[:, keep:]
        times = risk_vs_time.since_burn_in(res.times, keep)
        curves[label] = risk_curve(vals, times, np.array([reference]), num_points=15)
        final = posterior_risk(vals.mean(axis=1), np.array([reference]))
        w = np.asarray(res.positions, np.float64)
        rows[label] = {
            **risk_vs_time.data_use(res, cfg.n_data),
            "accept": float(np.mean(res.records["accepted"])),
            "mean_amari": float(vals.mean()),
            "risk": final.risk,
            "bias2": final.bias2,
            "variance": final.variance,
            "max_orthonormality_error": float(np.max(np.abs(np.swapaxes(w, -1, -2) @ w - np.eye(4)))),
        }
    table = format_table(rows, cfg, reference, step)
    fig = plot(curves, out)
    (out / "tables.md").write_text(table)
    (out / "summary.json").write_text(
        json.dumps(
            {
                "config": cfg._asdict(),
                "step": step,
                "reference_amari": reference,
                "reference_wall_s": ref.wall_time,
                "rows": rows,
                "risk_curves": risk_vs_time.risk_curves_json(curves),
            },
            indent=1,
        )
    )
    values = {
        **risk_vs_time.row_values("ica", rows, ROW_FORMATS),
        "ica.reference_amari": f"{reference:.4f}",
        "ica.reference_wall_min": f"{ref.wall_time / 60:.0f}",
        "ica.max_orthonormality_error": f"{max(r['max_orthonormality_error'] for r in rows.values()):.1e}",
    }
    exact = rows.get("eps=0")
    if exact is not None:
        values.update(
            {
                f"ica.{risk_vs_time.label_key(k)}.steps_vs_exact": f"{r['steps'] / exact['steps']:.0f}"
                for k, r in rows.items()
            }
        )
    tables = {
        "ica_setup": setup_table(cfg, step),
        "ica_table": risk_vs_time.result_table(COLUMNS, rows, ROW_FORMATS, cfg.time_budget),
    }
    return risk_vs_time.Report(table + f"\nfigure: {fig.name}", tables, values, [fig.name])


COLUMNS = (
    "test",
    "steps per chain",
    "mean batch",
    "data fraction",
    "accept",
    "mean d_A",
    "risk",
    "bias^2",
    "max abs(W^T W - I)",
)
ROW_FORMATS = {
    "steps": "d",
    "mean_batch": ".0f",
    "data_fraction": ".3f",
    "accept": ".3f",
    "mean_amari": ".4f",
    "risk": ".2e",
    "bias2": ".2e",
    "max_orthonormality_error": ".1e",
}
"""Format of each figure of a test's row (table cells and values ``ica.LABEL.FIELD``)."""


def format_table(rows: dict, cfg: ICAConfig, reference: float, step: float) -> str:
    """Markdown table of data use, acceptance and risk per test."""
    header = (
        f"ICA on the Stiefel manifold (Korattikara et al. 4.2.2): N={cfg.n_data:,}, D=4, step={step:.2e}, "
        f"{cfg.chains} chains x {cfg.time_budget:g} s each, m={cfg.batch_size}; reference E[d_A] = {reference:.4f}"
    )
    return risk_vs_time.markdown_table(header, COLUMNS, rows, ROW_FORMATS)


PAPER_SETUP = (
    ("data", "1.95M samples mixing a music recording, street noise and 2 Gaussian sources"),
    ("model", "uniform prior on the Stiefel manifold, `p(x|W) = |det W| prod_j [4 cosh^2(w_j^T x / 2)]^-1`"),
    ("proposal", "random walk on the Stiefel manifold (Ouyang 2008), acceptance about 0.5"),
    ("reference", "exact MH, 100K samples"),
    ("runs", "eps = 0, 0.01, 0.05, 0.1, 0.2; 10 chains x about 6400 s"),
    (
        "Fig. 6",
        "risk in the mean Amari distance vs time: still decreasing at 6400 s except for eps = 0.2; lowest with eps = 0.1",
    ),
)
"""Section 4.2.2's set-up, item by item."""


def setup_table(cfg: ICAConfig, step: float) -> dict:
    """Results table ``ica_setup``: the paper's set-up beside this run's."""
    eps = ", ".join(f"{e:g}" for e in cfg.epsilons if e > 0)
    mhmb = f" and MHminibatch (m = {cfg.batch_size})" if cfg.mhminibatch else ""
    ours = [
        f'{cfg.n_data:,} samples mixing a Laplace ("music"), a Student-t(5) ("noise") and 2 Gaussian sources by a random matrix, whitened',
        "the same (`models.ica`)",
        f"`W' = W expm(S)`, S skew-symmetric Gaussian with entry s.d. `{cfg.step_scale:g} / sqrt(N)` = {step:.2e}, "
        "one Newton-Schulz re-orthonormalisation",
        f"exact MH, {cfg.chains} chains x {cfg.reference_samples:,} steps ({100 * cfg.burn_in:.0f}% burn-in)",
        f"eps = 0 (exact MH) and AustereMH(c) with m = {cfg.batch_size} at eps = {eps}{mhmb}; {cfg.chains} chains x {cfg.time_budget:g} s each",
        "`figure6_risk.png`",
    ]
    return risk_vs_time.setup_table(PAPER_SETUP, ours)


def plot(curves: dict, out: Path) -> Path:
    """Figure 6: risk in the mean Amari distance against wall time."""
    return risk_vs_time_figure(
        curves,
        out / "figure6_risk.png",
        "risk in mean Amari distance",
        "ICA, random walk on the Stiefel manifold (cf. Fig. 6)",
    )


def parse_config(argv: Sequence[str] | None = None) -> tuple[ICAConfig, argparse.Namespace]:
    """The settings for a ``reproduce ica`` command line (presets, then the options given), and the parsed options."""
    p = risk_vs_time_parser(
        "ica",
        __doc__.splitlines()[0],
        ICAConfig(),
        quick="N = 20,000, 2 s per chain and test",
        full="the paper's size: 1.95M points, 10 chains, 100K reference steps, 6400 s per chain",
    )
    p.add_argument("--n-data", type=positive_int, help="number of mixed samples (default 200,000)")
    p.add_argument("--step-scale", type=positive_float, help="random-walk step is STEP_SCALE / sqrt(N)")
    p.add_argument("--mhminibatch", action="store_true", help="also run MHminibatch")
    opts = p.parse_args(argv)
    cfg = risk_vs_time_config(ICAConfig(), opts, QUICK, FULL, n_data=opts.n_data, step_scale=opts.step_scale)
    if opts.mhminibatch:
        cfg = cfg._replace(mhminibatch=True)
    if cfg.batch_size > cfg.n_data:
        raise ValueError(f"--batch-size {cfg.batch_size} exceeds --n-data {cfg.n_data}")
    return cfg, opts


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce ica [--quick | --full] [options]``."""
    cfg, opts = parse_config(argv)
    return risk_vs_time.run_timed_and_print(run, "ica", list(argv or []), opts.results, cfg, run_dir(opts, "ica"))
