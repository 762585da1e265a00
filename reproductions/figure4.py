"""Korattikara et al. Section 4.2.1, Figure 4: random-walk MH on a logistic-regression posterior with AustereMH.

(a) Percentage of data used and of wrong accept/reject decisions as functions of epsilon: every step of an
AustereMH chain is audited by the exact Metropolis test with the same uniform ``u`` (AustereMH with ``m = N``
reads all data in its first chunk and decides exactly with the uniform the minibatch test used).
(b) Risk (bias^2 + variance over repeated chains) of the posterior mean prediction on the test points against
wall-clock time, for each epsilon (epsilon = 0 is the exact Metropolis test); the reference is a long exact
random-walk MH run (the paper used Hybrid Monte Carlo).

The paper's data are MNIST 7 vs 9 (12,214 training points, 2,037 test points) reduced to 50 dimensions by PCA.
With ``--mnist-dir`` pointing at the MNIST IDX files those are used; otherwise a synthetic stand-in of the same
shape (labelled as such in every output).  Prior: zero-mean spherical Gaussian with precision 10; random-walk
s.d. 0.01; AustereMH minibatch size m = 500 (the paper does not state m for this figure).
"""

from __future__ import annotations

import csv
import functools
import json
import time
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

from minibatch_mcmc.acceptance.austere import AustereMH, austere_mh
from minibatch_mcmc.acceptance.base import Statistics, check_batch_fits
from minibatch_mcmc.acceptance.exact import MetropolisTest
from minibatch_mcmc.diagnostics.risk import RiskCurve, risk_curve
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers.kernel import build_kernel
from reproductions.figure4_results import (
    FIGURE5_EPSILONS,
    figure4_tables,
    figure5_table,
    plot_figure5,
    risk_grid,
    snapshot_times,
)
from reproductions.options import experiment_parser, run_dir, written
from reproductions.plots import pyplot, risk_lines, save_figure
from reproductions.results import command_line, results_payload, write_results

EPSILONS = (0.0, 0.01, 0.05, 0.1, 0.2)


class Figure4Config(NamedTuple):
    """Settings (defaults: the paper's where it states them)."""

    n_train: int = 12_214
    n_test: int = 2_037
    dim: int = 50
    prior_precision: float = 10.0
    step_sd: float = 0.01
    batch_size: int = 500
    epsilons: tuple[float, ...] = EPSILONS
    audit_steps: int = 3000
    chains: int = 4
    chain_steps: int = 20_000
    thin: int = 20
    reference_steps: int = 100_000
    block: int = 500
    seed: int = 0


QUICK = Figure4Config(audit_steps=400, chains=3, chain_steps=2000, thin=10, reference_steps=8000, block=250)


def synthetic_standin(seed: int, n_train: int, n_test: int, dim: int) -> tuple[dict, dict]:
    """MNIST-7-vs-9-shaped stand-in: PCA-like features (variance ``5 / j``) and labels from a logistic model
    (feature scale chosen so the random walk with s.d. 0.01 accepts about half its proposals, as in the paper)."""
    rng = np.random.default_rng(seed)
    scale = np.sqrt(5.0 / np.arange(1, dim + 1))
    theta = rng.standard_normal(dim) * 0.6 / scale

    def draw(n: int) -> dict:
        x = rng.standard_normal((n, dim)) * scale
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(x @ theta)))).astype(np.int32)
        return {"x": x.astype(np.float32), "y": y}

    return draw(n_train), draw(n_test)


def mnist_7_vs_9(directory: str, dim: int) -> tuple[dict, dict]:
    """MNIST 7 (label 0) vs 9 (label 1) from IDX files: constant pixels dropped, standardised, PCA to ``dim``."""
    from reproductions.mnist import load_mnist_dir

    train = load_mnist_dir(directory, classes=(7, 9), split="train")
    test = load_mnist_dir(directory, classes=(7, 9), split="test")
    x = np.asarray(train["x"], np.float64)
    keep = x.std(axis=0) > 0
    mean, sd = x[:, keep].mean(axis=0), x[:, keep].std(axis=0)
    z = (x[:, keep] - mean) / sd
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    basis = vt[:dim].T

    def project(d: dict) -> dict:
        zz = (np.asarray(d["x"], np.float64)[:, keep] - mean) / sd
        return {"x": (zz @ basis).astype(np.float32), "y": np.asarray(d["y"], np.int32)}

    return project(train), project(test)


def map_estimate(train: dict, prior_precision: float) -> np.ndarray:
    """Posterior mode by L-BFGS (scipy), the chains' starting point."""
    x, y = np.asarray(train["x"], np.float64), np.asarray(train["y"], np.float64)

    def f(theta):
        z = x @ theta
        nll = np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * prior_precision * theta @ theta
        grad = x.T @ (1.0 / (1.0 + np.exp(-z)) - y) + prior_precision * theta
        return nll, grad

    res = minimize(f, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B")
    return res.x.astype(np.float32)


class AuditRow(NamedTuple):
    """Figure 4(a) for one epsilon: mean fraction of data used, fraction of wrong decisions, acceptance rate."""

    epsilon: float
    data_fraction: float
    wrong_fraction: float
    wrong_se: float
    acceptance: float


def audit(cfg: Figure4Config, train: dict, theta0: np.ndarray, epsilon: float, key: jax.Array) -> AuditRow:
    """Run ``cfg.audit_steps`` AustereMH steps, comparing each decision with the exact test on the same uniform."""
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon={epsilon!r} must be in (0, 1) for AustereMH")
    runner = _audit_runner(cfg.n_train, float(cfg.prior_precision), float(cfg.step_sd), int(cfg.batch_size))
    data = jax.tree_util.tree_map(jnp.asarray, train)
    keys = jax.random.split(key, cfg.audit_steps)
    sizes, acc, wrong = (np.asarray(a) for a in runner(jnp.asarray(theta0), data, keys, jnp.float32(epsilon)))
    p = float(wrong.mean())
    se = float(np.sqrt(max(p * (1 - p), 1.0 / cfg.audit_steps) / cfg.audit_steps))
    return AuditRow(epsilon, float(sizes.mean()) / cfg.n_train, p, se, float(acc.mean()))


@functools.lru_cache(maxsize=8)
def _audit_runner(n: int, prior_precision: float, step_sd: float, batch_size: int):
    """Jitted ``(theta0, data, keys, epsilon) -> (batch sizes, accepted, wrong)`` (epsilon traced: one compile)."""
    model = logistic_regression(prior_scale=float(1.0 / np.sqrt(prior_precision)))
    proposal = random_walk(step_sd)
    check_batch_fits(batch_size, n)

    def run(theta0, data, keys, epsilon):
        test = AustereMH(batch_size=batch_size, epsilon=epsilon, name="austere_mh_c")
        exact = AustereMH(batch_size=n, epsilon=epsilon, name="exact_same_uniform")

        def step(theta, key):
            k_prop, k_test = jax.random.split(key)
            cand, log_q = proposal.sample(k_prop, theta)
            psi = model.log_prior(cand) - model.log_prior(theta) + log_q

            def log_ratio(rows):
                return model.log_lik(cand, rows) - model.log_lik(theta, rows)

            stats = Statistics(log_ratio=log_ratio, data=data, n_data=n, psi=psi, temperature=jnp.float32(1.0))
            out, ref = test.decide(k_test, stats), exact.decide(k_test, stats)
            return jnp.where(out.accepted, cand, theta), (out.batch_size, out.accepted, out.accepted != ref.accepted)

        return jax.lax.scan(step, theta0, keys)[1]

    return jax.jit(run)


class TimedChains(NamedTuple):
    """Test-set predictions of thinned draws ``(R, T, Q)``, cumulative seconds per draw ``(R, T)``, data fraction, the draws."""

    predictions: np.ndarray
    wall_times: np.ndarray
    data_fraction: float
    acceptance: float
    positions: np.ndarray
    """The thinned draws ``(R, T, D)`` (Figure 5 plots their first two coordinates)."""
    steps: int
    """Steps per chain (``T`` times the thinning)."""


def timed_chains(
    cfg: Figure4Config,
    train: dict,
    test_x: np.ndarray,
    theta0: np.ndarray,
    epsilon: float,
    key: jax.Array,
    num_chains: int,
    num_steps: int,
) -> TimedChains:
    """``num_chains`` chains run one after the other in jitted blocks of ``cfg.block`` steps, timed per block
    (draws within a block get linearly interpolated times); every ``cfg.thin``-th draw's test predictions kept."""
    n = cfg.n_train
    model = logistic_regression(prior_scale=float(1.0 / np.sqrt(cfg.prior_precision)))
    test = MetropolisTest() if epsilon == 0 else austere_mh(cfg.batch_size, epsilon)
    kernel = build_kernel(model, random_walk(cfg.step_sd), test, n)
    data = jax.tree_util.tree_map(jnp.asarray, train)
    xt = jnp.asarray(test_x)
    temp = jnp.float32(1.0)
    block = min(cfg.block, num_steps)

    @jax.jit
    def run_block(state, keys, data):
        def one(st, k):
            st, out = kernel.step(k, st, data, temp)
            return st, (st.position, out.batch_size, out.accepted)

        return jax.lax.scan(one, state, keys)

    @jax.jit
    def predict(thetas):
        return jax.nn.sigmoid(thetas @ xt.T)

    jax.block_until_ready(run_block(kernel.init(jnp.asarray(theta0)), jax.random.split(key, block), data))  # compile
    preds, times, positions, used, accepted = [], [], [], 0.0, 0.0
    num_blocks = -(-num_steps // block)
    for c in range(num_chains):
        state = kernel.init(jnp.asarray(theta0))
        ck = jax.random.fold_in(key, c)
        elapsed, chain_preds, chain_times, chain_pos = 0.0, [], [], []
        for b in range(num_blocks):
            start = time.perf_counter()
            keys = jax.random.split(jax.random.fold_in(ck, b), block)
            state, (pos, sizes, acc) = jax.block_until_ready(run_block(state, keys, data))
            dt = time.perf_counter() - start
            step_times = elapsed + dt * np.arange(1, block + 1) / block
            elapsed += dt
            keep = np.arange(cfg.thin - 1, block, cfg.thin)
            chain_preds.append(np.asarray(predict(pos[keep])))
            chain_times.append(step_times[keep])
            chain_pos.append(np.asarray(pos[keep]))
            used += float(np.sum(sizes))
            accepted += float(np.sum(acc))
        preds.append(np.concatenate(chain_preds))
        times.append(np.concatenate(chain_times))
        positions.append(np.concatenate(chain_pos))
    total = num_chains * num_blocks * block
    return TimedChains(
        np.stack(preds), np.stack(times), used / (total * n), accepted / total, np.stack(positions), num_blocks * block
    )


def run(cfg: Figure4Config, out: Path, mnist_dir: str | None = None, progress: bool = True) -> tuple[str, dict, dict]:
    """Both panels of Figure 4 and Figure 5; writes CSV/JSON/PNG files to ``out``; returns a printable table and
    the results tables and values."""
    out.mkdir(parents=True, exist_ok=True)
    if mnist_dir:
        train, test = mnist_7_vs_9(mnist_dir, cfg.dim)
        cfg = cfg._replace(n_train=int(train["y"].shape[0]), n_test=int(test["y"].shape[0]))
        source = f"MNIST 7 vs 9 from {mnist_dir}, PCA to {cfg.dim}"
    else:
        train, test = synthetic_standin(cfg.seed, cfg.n_train, cfg.n_test, cfg.dim)
        source = f"SYNTHETIC stand-in for MNIST 7 vs 9 ({cfg.n_train} x {cfg.dim}, {cfg.n_test} test points)"
    theta0 = map_estimate(train, cfg.prior_precision)
    key = jax.random.PRNGKey(cfg.seed)

    def say(msg: str) -> None:
        if progress:
            print(msg, flush=True)

    rows = []
    for i, eps in enumerate(e for e in cfg.epsilons if e > 0):
        rows.append(audit(cfg, train, theta0, eps, jax.random.fold_in(key, 100 + i)))
        say(f"  audit eps={eps:g}: data {rows[-1].data_fraction:.3f}, wrong {rows[-1].wrong_fraction:.4f}")
    say("  reference: long exact-MH run ...")
    ref = timed_chains(cfg, train, test["x"], theta0, 0.0, jax.random.fold_in(key, 7), 2, cfg.reference_steps // 2)
    ref_pred = ref.predictions.reshape(-1, ref.predictions.shape[-1]).mean(axis=0)
    ref_se2 = float(np.mean(ref.predictions.mean(axis=1).var(axis=0, ddof=1) / 2))
    curves: dict[float, tuple[RiskCurve, TimedChains]] = {}
    for j, eps in enumerate(cfg.epsilons):
        k = jax.random.fold_in(key, 200 + j)
        ch = timed_chains(cfg, train, test["x"], theta0, eps, k, cfg.chains, cfg.chain_steps)
        curves[eps] = (risk_curve(ch.predictions, ch.wall_times, ref_pred, num_points=15), ch)
        secs, risk_end = ch.wall_times[:, -1].mean(), curves[eps][0].risk[-1]
        say(f"  chains eps={eps:g}: {secs:.1f} s per chain, risk at end {risk_end:.2e}")
    table = format_table(source, rows, curves, ref_se2)
    write_outputs(out, source, rows, curves, ref_se2)
    tables, values = figure4_tables(rows, curves, ref_se2)
    runs = {e: (curves[e][1].positions[..., :2], curves[e][1].wall_times) for e in FIGURE5_EPSILONS if e in curves}
    if runs:
        times = snapshot_times([w for _, w in runs.values()])
        reference = ref.positions[..., :2].reshape(-1, 2)
        tables.update(figure5_table(runs, reference, times))
        plot_figure5(runs, reference, times, out / "figure5.png", f"Figure 5 on {source}")
    return table, tables, values


def format_table(source: str, rows: list[AuditRow], curves: dict, ref_se2: float) -> str:
    """Figure 4(a) rows and, per epsilon, risk at the common times of Figure 4(b)."""
    lines = [f"Figure 4 on {source}", "(a) epsilon  data used %  wrong decisions % (+- s.e.)  acceptance"]
    lines.append(f"    {0.0:<8g}{100.0:>12.1f}{0.0:>14.2f}{'(exact)':>17}")
    for r in rows:
        lines.append(
            f"    {r.epsilon:<8g}{100 * r.data_fraction:>12.1f}{100 * r.wrong_fraction:>14.2f}"
            f"  +- {100 * r.wrong_se:<9.2f}{r.acceptance:>8.3f}"
        )
    grid = risk_grid(curves)
    lines.append(f"(b) risk of the mean test prediction (reference's own s.e.^2 {ref_se2:.1e}); draws T per chain")
    lines.append("    epsilon  " + "".join(f"{f't={t:.2g}s':>11}" for t in grid) + f"{'T':>9}{'data %':>8}")
    for eps, (c, ch) in curves.items():
        at = np.interp(np.log(grid), np.log(c.times), c.risk)
        lines.append(
            f"    {eps:<9g}"
            + "".join(f"{v:>11.2e}" for v in at)
            + f"{ch.predictions.shape[1]:>9d}{100 * ch.data_fraction:>8.1f}"
        )
    return "\n".join(lines)


def write_outputs(out: Path, source: str, rows: list[AuditRow], curves: dict, ref_se2: float) -> None:
    """``figure4a.csv``, ``figure4b.csv``, ``figure4.json`` and ``figure4.png``."""
    with open(out / "figure4a.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(AuditRow._fields)
        w.writerows(rows)
    with open(out / "figure4b.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epsilon", "seconds", "bias2", "variance", "risk"])
        for eps, (c, _) in curves.items():
            for row in zip(c.times, c.bias2, c.variance, c.risk):
                w.writerow([eps, *(f"{v:.6g}" for v in row)])
    (out / "figure4.json").write_text(
        json.dumps({"data": source, "reference_se2": ref_se2, "audit": [r._asdict() for r in rows]}, indent=2)
    )
    fig, (ax1, ax2) = pyplot().subplots(1, 2, figsize=(10, 3.8))
    eps = [0.0] + [r.epsilon for r in rows]
    ax1.plot(eps, [100.0] + [100 * r.data_fraction for r in rows], "b-o", label="% data used")
    ax1b = ax1.twinx()
    ax1b.plot(eps, [0.0] + [100 * r.wrong_fraction for r in rows], "r--s", label="% wrong decisions")
    ax1.set_xlabel("epsilon")
    ax1.set_ylabel("% data used", color="b")
    ax1b.set_ylabel("% wrong accept/reject decisions", color="r")
    ax1.set_title("(a)")
    risk_lines(ax2, {f"eps={e:g}": c for e, (c, _) in curves.items()})
    ax2.set_xlabel("wall-clock seconds")
    ax2.set_ylabel("risk of mean test prediction")
    ax2.set_title("(b)")
    ax2.legend(fontsize=7)
    fig.suptitle(source, fontsize=8)
    save_figure(fig, out / "figure4.png", dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce figure4 [--quick] [--mnist-dir DIR] [--batch-size 500] [--chain-steps T] [--audit-steps S]``."""
    p = experiment_parser(
        "figure4",
        __doc__,
        quick="400 audited steps, 3 chains x 2000 steps, 8000 reference steps",
        trials="chains per epsilon for panel (b) (default 4)",
        num_samples="steps per chain for panel (b) (as --chain-steps)",
    )
    p.add_argument("--mnist-dir", default=None, help="directory with the MNIST IDX files (else a synthetic stand-in)")
    p.add_argument("--batch-size", type=int, default=None, help="AustereMH minibatch size m (default 500)")
    p.add_argument("--chain-steps", type=int, default=None, help="steps per chain for panel (b)")
    p.add_argument("--audit-steps", type=int, default=None, help="audited steps per epsilon for panel (a)")
    opts = p.parse_args(argv)
    cfg = (QUICK if opts.quick else Figure4Config())._replace(seed=opts.seed)
    if opts.trials:
        cfg = cfg._replace(chains=opts.trials)
    if opts.num_samples:
        cfg = cfg._replace(chain_steps=opts.num_samples)
    for name in ("batch_size", "chain_steps", "audit_steps"):
        v = vars(opts)[name]
        if v is not None:
            if v < 2:
                raise ValueError(f"--{name.replace('_', '-')} {v} must be at least 2")
            cfg = cfg._replace(**{name: v})
    if cfg.chain_steps < cfg.thin * 2:
        raise ValueError(f"chain steps {cfg.chain_steps} must be at least {2 * cfg.thin} (two thinned draws)")
    out = run_dir(opts, "reproduce-figure4")
    text, tables, values = run(cfg, out, mnist_dir=opts.mnist_dir, progress=not opts.no_progress)
    print(text)
    payload = results_payload(
        "figure4",
        command_line("figure4", list(argv or [])),
        config=cfg,
        tables=tables,
        values=values,
        figures=["figure4.png", "figure5.png"],
        extra={"data": "MNIST 7 vs 9" if opts.mnist_dir else "synthetic stand-in"},
    )
    write_results(out, payload, copy_to=opts.results)
    print(written(out))
    return 0
