"""Korattikara et al. Section 4.2.3 reproduced: reversible-jump variable selection in logistic regression.

The MiniBooNE data (130,065 x 50) is not available offline, so a synthetic set of the same shape with a
known sparse truth stands in (:func:`~minibatch_mcmc.models.variable_selection.make_selection_data`),
split 80/20 into training and test data. A long exact reversible-jump run gives the reference; then the
exact sampler (``epsilon = 0``), AustereMH at several ``epsilon`` and MHminibatch run for the same
number of steps from a one-variable start (the intercept), and we report

* Figure 7: risk of the mean prediction ``E[sigmoid(x^T beta)]`` on test points against wall time;
* Figure 8: marginal inclusion probabilities ``p(gamma_j = 1 | data)``;
* a table of data use per test and acceptance rates of update and birth/death moves.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.diagnostics.risk import posterior_risk, risk_curve
from minibatch_mcmc.models.variable_selection import make_selection_data, selection_state, variable_selection
from minibatch_mcmc.proposals.reversible_jump import BIRTH, DEATH, UPDATE, move_of, reversible_jump
from reproductions import risk_vs_time
from reproductions.options import positive_float, positive_int, risk_vs_time_config, risk_vs_time_parser, run_dir
from reproductions.plots import pyplot, risk_vs_time_figure, save_figure
from reproductions.timed import TimedRun, epsilon_tests


class RJConfig(NamedTuple):
    """Settings; the defaults run in minutes, ``--full`` restores the paper's sizes."""

    n_data: int = 130_065
    n_features: int = 50
    n_active: int = 8
    lam: float = 5.0
    """Rate of the truncated Poisson size prior (the paper's lambda is lam / 2)."""
    update_sd: float = 0.01
    birth_sd: float = 0.5
    epsilons: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1)
    batch_size: int = 500
    """AustereMH minibatch size ``m`` (also MHminibatch's initial ``m``)."""
    mhminibatch: bool = True
    time_budget: float = 20.0
    """Wall-clock seconds per chain for each test (the paper ran each for about 3500 s)."""
    max_samples: int = 200_000
    reference_samples: int = 6000
    chains: int = 4
    burn_in: float = 0.2
    """Fraction of each run discarded before averaging."""
    test_points: int = 1000
    seed: int = 0


QUICK = dict(
    n_data=10_000,
    n_features=10,
    n_active=3,
    time_budget=3.0,
    reference_samples=3000,
    update_sd=0.05,
    birth_sd=0.5,
    batch_size=200,
)
FULL = dict(time_budget=3500.0, max_samples=2_000_000, reference_samples=400_000, chains=10)


def split(data: dict, test_fraction: float, seed: int) -> tuple[dict, dict]:
    """Random training/test split of the rows."""
    n = data["y"].shape[0]
    perm = np.random.default_rng(seed + 1).permutation(n)
    n_test = int(round(test_fraction * n))
    te, tr = perm[:n_test], perm[n_test:]
    return {k: v[tr] for k, v in data.items()}, {k: v[te] for k, v in data.items()}


def initial_state(train: dict, d: int) -> dict:
    """The paper's start: only the intercept, at the logit of the positive rate."""
    p = float(np.mean(train["y"]))
    beta = np.zeros(d)
    beta[0] = np.log(p / (1 - p))
    gamma = np.zeros(d)
    gamma[0] = 1
    return selection_state(beta, gamma)


def tests_for(cfg: RJConfig) -> dict:
    """Acceptance tests by label: exact MH for epsilon = 0, AustereMH otherwise, plus MHminibatch."""
    return epsilon_tests(cfg.epsilons, cfg.batch_size, cfg.mhminibatch)


def predictions(beta: np.ndarray, gamma: np.ndarray, x_test: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """``sigmoid(x^T (beta * gamma))`` for draws ``(..., D)`` and test rows ``(Q, D)``: shape ``(..., Q)``."""
    flat = (beta * gamma).reshape(-1, beta.shape[-1])
    xt = jnp.asarray(x_test)
    out = [np.asarray(jax.nn.sigmoid(jnp.asarray(flat[i : i + chunk]) @ xt.T)) for i in range(0, len(flat), chunk)]
    return np.concatenate(out).reshape(beta.shape[:-1] + (x_test.shape[0],))


def move_rates(res: TimedRun, start: dict) -> dict:
    """Fractions of steps that were accepted, accepted jumps (birth or death) and accepted updates."""
    g = np.asarray(res.positions["gamma"])
    prev = np.concatenate([np.broadcast_to(np.asarray(start["gamma"]), (g.shape[0], 1, g.shape[2])), g[:, :-1]], 1)
    moved = np.asarray(move_of({"gamma": prev}, {"gamma": g}))
    acc = np.asarray(res.records["accepted"])
    jumps = (moved == BIRTH) | (moved == DEATH)
    return {
        "accept": float(acc.mean()),
        "accepted_jump_fraction": float(jumps.mean()),
        "accepted_update_fraction": float((acc & (moved == UPDATE)).mean()),
    }


def run(cfg: RJConfig, out: Path) -> risk_vs_time.Report:
    """Run the reference and every test; write figures, ``summary.json`` and ``tables.md`` to ``out``; return the report."""
    out.mkdir(parents=True, exist_ok=True)
    data, beta_true = make_selection_data(cfg.seed, cfg.n_data, cfg.n_features, cfg.n_active)
    train, test = split(data, 0.2, cfg.seed)
    d = cfg.n_features + 1
    n_train = int(train["y"].shape[0])
    x_test = test["x"][np.random.default_rng(cfg.seed + 2).permutation(test["x"].shape[0])[: cfg.test_points]]
    model = variable_selection(d, cfg.lam)
    proposal = reversible_jump(d, cfg.update_sd, cfg.birth_sd)
    start = initial_state(train, d)
    train_j = {"x": jnp.asarray(train["x"]), "y": jnp.asarray(train["y"])}

    def burned(a: np.ndarray, total: int) -> np.ndarray:
        return a[:, int(cfg.burn_in * total) :]

    print(
        f"reference: exact RJ-MH, {cfg.chains} chains x {cfg.reference_samples} steps, N={n_train:,}, D={d}", flush=True
    )
    ref = risk_vs_time.exact_reference(model, train_j, start, proposal, cfg)
    rb = burned(np.asarray(ref.positions["beta"]), cfg.reference_samples)
    rg = burned(np.asarray(ref.positions["gamma"]), cfg.reference_samples)
    ref_pred = predictions(rb, rg, x_test).mean(axis=(0, 1))
    ref_incl = rg.mean(axis=(0, 1))

    rows, curves, inclusions = {}, {}, {"reference (exact, long)": ref_incl}
    for label, res in risk_vs_time.timed_runs(model, train_j, start, proposal, tests_for(cfg), cfg):
        t = res.times.shape[1]
        keep = int(cfg.burn_in * t)
        b, g = np.asarray(res.positions["beta"]), np.asarray(res.positions["gamma"])
        thin = max(1, (t - keep) // 400)
        pred = predictions(b[:, keep::thin], g[:, keep::thin], x_test)  # (R, T', Q)
        wall = risk_vs_time.since_burn_in(res.times, keep)[:, ::thin]
        curves[label] = risk_curve(pred, wall, ref_pred, num_points=15)
        final = posterior_risk(pred.mean(axis=1), ref_pred)
        incl = g[:, keep:].mean(axis=(0, 1))
        inclusions[label] = incl
        rows[label] = {
            "epsilon": label,
            **risk_vs_time.data_use(res, n_train),
            **move_rates(res, start),
            "mean_model_size": float(g[:, keep:].sum(-1).mean()),
            "risk": final.risk,
            "bias2": final.bias2,
            "variance": final.variance,
            "inclusion_abs_error": float(np.abs(incl - ref_incl).mean()),
        }
    table = format_table(rows, cfg, n_train)
    figs = plot(curves, inclusions, beta_true, out)
    (out / "tables.md").write_text(table)
    values = {
        **risk_vs_time.row_values("rj_selection", rows, ROW_FORMATS),
        **reference_values(ref_incl, beta_true),
        "rj_selection.reference_wall_min": f"{ref.wall_time / 60:.0f}",
    }
    tables = {
        "rj_selection_setup": setup_table(cfg),
        "rj_selection_table": risk_vs_time.result_table(COLUMNS, rows, ROW_FORMATS, cfg.time_budget),
    }
    (out / "summary.json").write_text(
        json.dumps(
            {
                "config": cfg._asdict(),
                "rows": rows,
                "beta_true": beta_true.tolist(),
                "inclusion": {k: v.tolist() for k, v in inclusions.items()},
                "risk_curves": risk_vs_time.risk_curves_json(curves),
                "reference_wall_s": ref.wall_time,
            },
            indent=1,
        )
    )
    text = table + "\n" + "figures: " + ", ".join(p.name for p in figs)
    return risk_vs_time.Report(text, tables, values, [p.name for p in figs])


COLUMNS = (
    "test",
    "steps per chain",
    "mean batch",
    "data fraction",
    "accept",
    "accepted jumps",
    "model size",
    "risk (mean pred.)",
    "mean abs err incl. prob.",
)
ROW_FORMATS = {
    "steps": "d",
    "mean_batch": ".0f",
    "data_fraction": ".3f",
    "accept": ".3f",
    "accepted_jump_fraction": ".4f",
    "mean_model_size": ".1f",
    "risk": ".2e",
    "inclusion_abs_error": ".3f",
}
"""Format of each figure of a test's row (table cells and values ``rj_selection.LABEL.FIELD``)."""


def format_table(rows: dict, cfg: RJConfig, n_train: int) -> str:
    """Markdown table: data use, acceptance, model size and final risk per test."""
    header = (
        f"Reversible-jump variable selection (Korattikara et al. 4.2.3), synthetic MiniBooNE-shaped data: N={n_train:,} "
        f"training rows, D={cfg.n_features + 1}, {cfg.n_active} true features, {cfg.chains} chains x {cfg.time_budget:g} s each, m={cfg.batch_size}"
    )
    return risk_vs_time.markdown_table(header, COLUMNS, rows, ROW_FORMATS)


def setup_table(cfg: RJConfig) -> dict:
    """Results table ``rj_selection_setup``: the paper's set-up beside this run's."""
    eps = ", ".join(f"{e:g}" for e in cfg.epsilons if e > 0)
    mhmb = f", and MHminibatch (m = {cfg.batch_size}, sigma = 1)" if cfg.mhminibatch else ""
    ours = [
        f"synthetic, {cfg.n_data:,} x {cfg.n_features} + intercept: AR(1)-correlated (rho = 0.3) Gaussian features, "
        f"{cfg.n_active} true non-zero coefficients of size 0.5-1.5, intercept set for 28% positives, 80/20 split",
        f"the same (`models.variable_selection`), `lam = {cfg.lam:g}`",
        f"the same (`proposals.reversible_jump`), update s.d. {cfg.update_sd:g}, birth s.d. {cfg.birth_sd:g}, move probabilities 1/3 each",
        "the intercept only, at the logit of the positive rate",
        f"exact RJ, {cfg.chains} chains x {cfg.reference_samples:,} steps ({100 * cfg.burn_in:.0f}% burn-in)",
        f"eps = 0 (exact MH), AustereMH(c) with m = {cfg.batch_size} and eps = {eps}{mhmb}; {cfg.chains} chains x {cfg.time_budget:g} s each",
        f"`figure7_risk.png` (risk of the mean predicted probability on {cfg.test_points:,} test points)",
        "`figure8_inclusion.png` (with the true non-zero features marked)",
    ]
    return risk_vs_time.setup_table(PAPER_SETUP, ours)


PAPER_SETUP = (
    ("data", "MiniBooNE, 130,065 x 50 + intercept, 28% positive, 80/20 split"),
    ("model", "Laplace prior, psi integrated out, truncated Poisson size prior (Eq. 17)"),
    ("moves", "update / birth / death, mu_0 of Eqs. 18-20"),
    ("start", "one variable"),
    ("reference", "exact RJ, 400K samples"),
    ("runs", "eps = 0, 0.01, 0.05, 0.1, 10 chains x about 3500 s"),
    ("Fig. 7", "risk of the mean prediction on test data vs time: lowest for eps > 0"),
    ("Fig. 8", "marginal inclusion probabilities"),
)
"""Section 4.2.3's set-up, item by item."""


def reference_values(ref_incl: np.ndarray, beta_true: np.ndarray) -> dict[str, str]:
    """The true features and the reference's inclusion probabilities of them (with the intercept) and of the rest."""
    true = np.flatnonzero(beta_true[1:]) + 1
    others = np.setdiff1d(np.arange(1, len(beta_true)), true)
    return {
        "rj_selection.true_features": ", ".join(str(j) for j in true),
        "rj_selection.ref_incl_true_min": f"{min(ref_incl[true].min(), ref_incl[0]):.2f}",
        "rj_selection.ref_incl_other_max": f"{ref_incl[others].max():.2f}" if others.size else "-",
        "rj_selection.ref_incl_others_above_0.1": str(int((ref_incl[others] > 0.1).sum())),
    }


def plot(curves: dict, inclusions: dict, beta_true: np.ndarray, out: Path) -> list[Path]:
    """Figure 7 (log risk vs wall time) and Figure 8 (marginal inclusion probabilities)."""
    p1 = risk_vs_time_figure(
        curves, out / "figure7_risk.png", "risk in mean prediction", "RJ variable selection: risk vs time (cf. Fig. 7)"
    )
    fig, ax = pyplot().subplots(figsize=(8, 3.5))
    j = np.arange(len(beta_true))
    width = 0.8 / len(inclusions)
    for i, (label, incl) in enumerate(inclusions.items()):
        ax.bar(j + i * width - 0.4, incl, width, label=label)
    ax.plot(j[beta_true != 0], np.full((beta_true != 0).sum(), 1.04), "kv", ms=5, label="true non-zero")
    ax.set_xlabel("feature j (0 = intercept)")
    ax.set_ylabel("p(gamma_j = 1 | data)")
    ax.set_title("Marginal inclusion probabilities (cf. Fig. 8)")
    ax.legend(fontsize=7, ncol=3)
    return [p1, save_figure(fig, out / "figure8_inclusion.png", dpi=120)]


def parse_config(argv: Sequence[str] | None = None) -> tuple[RJConfig, argparse.Namespace]:
    """The settings for a ``reproduce rj-selection`` command line (presets, then the options given), and the parsed options."""
    p = risk_vs_time_parser(
        "rj-selection",
        __doc__.splitlines()[0],
        RJConfig(),
        quick="N = 10,000, 10 features, 3 s per chain",
        full="the paper's sizes: 10 chains, 400K reference steps, 3500 s per chain and test",
    )
    p.add_argument(
        "--n-data", type=positive_int, help="rows of synthetic data (80%% train); default 130,065 as MiniBooNE"
    )
    p.add_argument("--features", type=positive_int, help="number of features besides the intercept (default 50)")
    p.add_argument(
        "--lam", type=positive_float, help="rate of the truncated Poisson size prior (paper's lambda = lam/2)"
    )
    p.add_argument("--no-mhminibatch", action="store_true", help="skip MHminibatch")
    opts = p.parse_args(argv)
    cfg = risk_vs_time_config(RJConfig(), opts, QUICK, FULL, n_data=opts.n_data, n_features=opts.features, lam=opts.lam)
    if opts.no_mhminibatch:
        cfg = cfg._replace(mhminibatch=False)
    if cfg.n_features < 1 or cfg.n_active > cfg.n_features:
        raise ValueError(f"--features {cfg.n_features} must be >= the {cfg.n_active} true features")
    if cfg.batch_size > 0.8 * cfg.n_data:
        raise ValueError(f"--batch-size {cfg.batch_size} exceeds the {int(0.8 * cfg.n_data)} training rows")
    return cfg, opts


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce rj-selection [--quick | --full] [options]``."""
    cfg, opts = parse_config(argv)
    return risk_vs_time.run_timed_and_print(
        run, "rj-selection", list(argv or []), opts.results, cfg, run_dir(opts, "rj-selection")
    )
