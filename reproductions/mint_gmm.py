"""Li and Wong, Section 4.1: MINT on the tied-means Gaussian mixture with 10^6 points (m = 1000, lambda = tau / 2).

MINT samples the tempered posterior ``pi_T`` with ``T = n^(1 - lambda)``; the two modes near ``(0, 1)``
and ``(1, -1)`` are both visited, and the ratio of the probabilities of small balls around them,
estimated from the draws pooled over independent runs, approaches the exact ratio under ``pi_T``
(computed by quadrature). SGLD at temperature 1, started from the prior, stays in one mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import mint, no_test
from minibatch_mcmc.diagnostics import chi_squared, grid_posterior
from minibatch_mcmc.models import MixtureSettings, gaussian_mixture, log_posterior_grid, make_mixture_data
from minibatch_mcmc.proposals import langevin, random_walk
from minibatch_mcmc.samplers import sample
from reproductions.options import experiment_parser, positive_float, positive_int, run_dir, with_given, with_presets
from reproductions.plots import pyplot, save_figure
from reproductions.results import command_line, results_payload, table, write_results

MODES = ((0.0, 1.0), (1.0, -1.0))
"""The two modes of the paper: the data-generating ``theta`` and its mirror image."""


class MintGMMConfig(NamedTuple):
    """Settings of the experiment (defaults: the paper's, except 10^5 iterations instead of 10^6)."""

    n_data: int = 1_000_000
    batch_size: int = 1000
    alpha: float = 0.5
    """``lambda = alpha tau``."""
    num_samples: int = 100_000
    runs: int = 20
    proposal_sd: float = 0.5
    """Random-walk s.d. per coordinate, tuned for an acceptance rate near 0.3-0.45."""
    radius: float = 0.01
    """Radius of the balls around the modes whose probabilities are compared (the paper's 1e-2)."""
    sgld_steps: int = 20_000
    sgld_step_size: float = 2e-7
    """SGLD step ``alpha`` at temperature 1 (about a tenth of the posterior variance per coordinate)."""
    seed: int = 0


class ModeRatio(NamedTuple):
    """Pooled ratio of ball probabilities (mode 1 / mode 2) after a number of iterations, with a bootstrap band."""

    iterations: np.ndarray
    ratio: np.ndarray
    low: np.ndarray
    high: np.ndarray


def ball_mass(
    data: np.ndarray, centre: tuple[float, float], radius: float, temperature: float, log_norm: float, points: int = 121
) -> float:
    """Probability of the disc of ``radius`` around ``centre`` under the tempered posterior, by quadrature."""
    t1 = np.linspace(centre[0] - radius, centre[0] + radius, points)
    t2 = np.linspace(centre[1] - radius, centre[1] + radius, points)
    logp = log_posterior_grid(data, t1, t2, temperature) - log_norm
    a, b = np.meshgrid(t1, t2, indexing="ij")
    inside = (a - centre[0]) ** 2 + (b - centre[1]) ** 2 <= radius**2
    cell = (t1[1] - t1[0]) * (t2[1] - t2[0])
    return float(np.sum(np.exp(logp) * inside) * cell)


def exact_mode_ratio(data: np.ndarray, radius: float, temperature: float) -> float:
    """Exact ``P(ball around mode 1) / P(ball around mode 2)`` under ``pi_T`` (the normaliser cancels)."""
    shift = float(np.max(log_posterior_grid(data, np.array([MODES[0][0]]), np.array([MODES[0][1]]), temperature)))
    m1, m2 = (ball_mass(data, c, radius, temperature, shift) for c in MODES)
    return m1 / m2


def mode_hits(draws: np.ndarray, radius: float) -> np.ndarray:
    """Indicator arrays ``(2, runs, steps)``: draw inside the ball around each mode."""
    return np.stack([np.sum((draws - np.asarray(c)) ** 2, axis=-1) <= radius**2 for c in MODES])


def mode_ratio_curve(hits: np.ndarray, num_points: int = 12, boot: int = 400, seed: int = 0) -> ModeRatio:
    """Pooled-over-runs ratio of hit counts at log-spaced iteration counts; 90% bootstrap band over runs."""
    steps = hits.shape[2]
    its = np.unique(np.geomspace(min(1000, steps), steps, num_points).astype(int))
    cum = np.cumsum(hits, axis=2)[:, :, its - 1].astype(np.float64)  # (2, runs, points)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, hits.shape[1], size=(boot, hits.shape[1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = cum[0].sum(0) / cum[1].sum(0)
        bs = cum[0][pick].sum(1) / cum[1][pick].sum(1)
    low, high = np.nanpercentile(np.where(np.isfinite(bs), bs, np.nan), [5, 95], axis=0)
    return ModeRatio(its, ratio, low, high)


def nearest_mode_fraction(draws: np.ndarray) -> np.ndarray:
    """Per run, the fraction of draws nearer to mode 1 than to mode 2."""
    d1 = np.sum((draws - np.asarray(MODES[0])) ** 2, axis=-1)
    d2 = np.sum((draws - np.asarray(MODES[1])) ** 2, axis=-1)
    return np.mean(d1 < d2, axis=1)


def run_mint(cfg: MintGMMConfig, data: jax.Array, progress: bool):
    """``cfg.runs`` independent MINT chains from the origin."""
    test = mint(batch_size=cfg.batch_size, alpha=cfg.alpha)
    return test, sample(
        gaussian_mixture(),
        data,
        jnp.zeros(2, jnp.float32),
        proposal=random_walk(scale=cfg.proposal_sd),
        test=test,
        num_samples=cfg.num_samples,
        num_chains=cfg.runs,
        key=cfg.seed + 1,
        block_size=5000,
        progress=progress,
    )


def run_sgld(cfg: MintGMMConfig, data: jax.Array, progress: bool):
    """Plain SGLD (gradient minibatch ``m``, no MH test) at temperature 1, chains started from the prior."""
    s = MixtureSettings()
    start = jax.random.normal(jax.random.key(cfg.seed + 2), (cfg.runs, 2)) * jnp.sqrt(
        jnp.array([s.sigma1_sq, s.sigma2_sq])
    )
    return sample(
        gaussian_mixture(),
        data,
        start,
        proposal=langevin(cfg.sgld_step_size, batch_size=cfg.batch_size),
        test=no_test(),
        num_samples=cfg.sgld_steps,
        num_chains=cfg.runs,
        batched_init=True,
        key=cfg.seed + 3,
        block_size=5000,
        progress=progress,
    )


def plot(
    cfg: MintGMMConfig,
    draws: np.ndarray,
    data: np.ndarray,
    temperature: float,
    curve: ModeRatio,
    exact: float,
    sgld: np.ndarray,
    out: Path,
) -> Path:
    """Figure 1 of the paper: MINT draws, the exact pi_T, and the mode ratio against iterations (SGLD beside)."""
    flat = draws.reshape(-1, 2)
    lo = np.percentile(flat, 0.5, axis=0) - 0.3
    hi = np.percentile(flat, 99.5, axis=0) + 0.3
    t1, t2 = np.linspace(lo[0], hi[0], 160), np.linspace(lo[1], hi[1], 160)
    logp = log_posterior_grid(data, t1, t2, temperature)
    fig, ax = pyplot().subplots(1, 3, figsize=(15, 4.4))
    ax[0].hist2d(flat[:, 0], flat[:, 1], bins=120, range=[[lo[0], hi[0]], [lo[1], hi[1]]], cmap="viridis")
    ax[0].set_title(f"MINT draws ({draws.shape[0]} runs x {draws.shape[1]:,})")
    ax[1].contourf(t1, t2, np.exp(logp - logp.max()).T, levels=30, cmap="viridis")
    ax[1].set_title(f"exact tempered posterior, T = n^(1-lambda) = {temperature:,.0f}")
    sg = sgld[:, sgld.shape[1] // 2 :].reshape(-1, 2)
    ax[1].plot(sg[:, 0], sg[:, 1], ".", ms=2, color="red", alpha=0.5)
    ax[1].text(0.02, 0.02, "red: SGLD (T = 1), second half of each run", transform=ax[1].transAxes, color="red")
    ax[1].set_xlim(lo[0], hi[0])
    ax[1].set_ylim(lo[1], hi[1])
    for a in ax[:2]:
        a.set_xlabel("theta_1")
        a.set_ylabel("theta_2")
        for c in MODES:
            a.plot(*c, "w+", ms=10)
    ax[2].semilogx(curve.iterations, curve.ratio, "o-", label="MINT (pooled over runs)")
    ax[2].fill_between(curve.iterations, curve.low, curve.high, alpha=0.3, label="90% bootstrap over runs")
    ax[2].axhline(exact, color="k", ls="--", label=f"exact under pi_T: {exact:.3f}")
    ax[2].axhline(1.0, color="grey", ls=":", label="paper: 1.00")
    ax[2].set_xlabel("iterations per run")
    ax[2].set_ylabel(f"P(ball r={cfg.radius:g} at mode 1) / P(at mode 2)")
    ax[2].legend(fontsize=8)
    return save_figure(fig, out / "mint_gmm_figure1.png")


def results_tables(summary: dict) -> tuple[dict, dict]:
    """The results file's table ``mint_gmm_figure1`` (paper against ours) and the values the docs' prose quotes."""
    s = summary
    mint_frac, sgld_frac = (
        np.asarray(s["mint_nearest_mode1_fraction_per_run"]),
        np.asarray(s["sgld_nearest_mode1_fraction_per_run"]),
    )
    sgld_one_mode = int(np.sum((sgld_frac == 0.0) | (sgld_frac == 1.0)))
    low, high = s["mint_ratio_90"]
    rows = [
        [
            "both modes visited",
            "yes",
            f"{s['mint_runs_visiting_both']} of {s['runs']} runs hit both balls; per run, {mint_frac.min():.2f}-{mint_frac.max():.2f} "
            "of the draws are nearer to mode 1",
        ],
        [
            "ratio of ball probabilities",
            '"1.00", estimated "quite accurately"',
            f"{s['mint_ratio']:.2f}, 90% bootstrap band over runs [{low:.2f}, {high:.2f}], pooled over {s['runs']} runs x {s['iterations']:,} "
            f"({s['hits_mode1']} vs {s['hits_mode2']} hits); exact under pi_T by quadrature: {s['exact_ratio']:.3f}",
        ],
        [
            "SGLD",
            "visits one mode only",
            f"{s['runs']} SGLD chains at T = 1, {s['sgld_steps']:,} steps: {sgld_one_mode} of {s['runs']} spend all of their second half in one mode "
            f"({int(np.sum(sgld_frac == 1.0))} in mode 1, {int(np.sum(sgld_frac == 0.0))} in mode 2)",
        ],
    ]
    values = {
        "mint_gmm.acceptance": f"{s['acceptance_rate']:.3f}",
        "mint_gmm.ratio": f"{s['mint_ratio']:.2f}",
        "mint_gmm.ratio_band": f"[{low:.2f}, {high:.2f}]",
        "mint_gmm.exact_ratio": f"{s['exact_ratio']:.3f}",
        "mint_gmm.chi_squared": f"{s['chi_squared_thinned']:.0f}",
        "mint_gmm.chi_squared_dof": f"{s['chi_squared_dof']}",
        "mint_gmm.sgld_one_mode": f"{sgld_one_mode} of {s['runs']}",
        "mint_gmm.wall_mint_s": f"{s['wall_time_mint_s']:.0f}",
        "mint_gmm.wall_sgld_s": f"{s['wall_time_sgld_s']:.0f}",
    }
    return {"mint_gmm_figure1": table(["quantity", "paper", "ours"], rows)}, values


def run(
    cfg: MintGMMConfig, out: Path, progress: bool = True, command: str | None = None, results: str | None = None
) -> str:
    """Run MINT and SGLD, write the figure, table, summary and results file; return the table."""
    out.mkdir(parents=True, exist_ok=True)
    data = make_mixture_data(jax.random.key(cfg.seed), cfg.n_data)
    data_np = np.asarray(data, np.float64)
    test, res = run_mint(cfg, data, progress)
    settings = test.settings(cfg.n_data)
    temperature = settings.temperature
    draws = np.asarray(res.positions, np.float64)
    hits = mode_hits(draws, cfg.radius)
    curve = mode_ratio_curve(hits, seed=cfg.seed)
    exact = exact_mode_ratio(data_np, cfg.radius, temperature)
    sg = run_sgld(cfg, data, progress)
    sg_draws = np.asarray(sg.positions, np.float64)
    sg_frac = nearest_mode_fraction(sg_draws[:, sg_draws.shape[1] // 2 :])
    mint_frac = nearest_mode_fraction(draws)
    edges1 = np.linspace(np.percentile(draws[..., 0], 0.5), np.percentile(draws[..., 0], 99.5), 31)
    edges2 = np.linspace(np.percentile(draws[..., 1], 0.5), np.percentile(draws[..., 1], 99.5), 31)
    grid = grid_posterior(lambda a, b: log_posterior_grid(data_np, a, b, temperature), edges1, edges2, refine=3)
    thin = draws[:, :: max(1, draws.shape[1] // 2000)].reshape(-1, 2)
    chi = chi_squared(thin, grid)
    fig = plot(cfg, draws, data_np, temperature, curve, exact, sg_draws, out)
    summary = {
        "n_data": cfg.n_data,
        "batch_size": settings.batch_size,
        "tau": settings.tau,
        "lambda": settings.lam,
        "temperature": temperature,
        "runs": cfg.runs,
        "iterations": cfg.num_samples,
        "acceptance_rate": res.summary(posterior=False)["acceptance_rate"],
        "exact_ratio": exact,
        "mint_ratio": float(curve.ratio[-1]),
        "mint_ratio_90": [float(curve.low[-1]), float(curve.high[-1])],
        "hits_mode1": int(hits[0].sum()),
        "hits_mode2": int(hits[1].sum()),
        "mint_runs_visiting_both": int(np.sum((hits[0].sum(1) > 0) & (hits[1].sum(1) > 0))),
        "mint_nearest_mode1_fraction_per_run": mint_frac.round(3).tolist(),
        "sgld_nearest_mode1_fraction_per_run": sg_frac.round(3).tolist(),
        "sgld_steps": cfg.sgld_steps,
        "chi_squared_thinned": chi.statistic,
        "chi_squared_dof": chi.dof,
        "wall_time_mint_s": res.wall_time,
        "wall_time_sgld_s": sg.wall_time,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    tables, values = results_tables(summary)
    payload = results_payload(
        "mint-gmm",
        command or command_line("mint-gmm", []),
        config=cfg,
        tables=tables,
        values=values,
        figures=[str(fig)],
    )
    write_results(out, payload, copy_to=results)
    lines = [
        f"MINT on the tied-means mixture: n={cfg.n_data:,}, m={settings.batch_size}, tau={settings.tau:.3f}, "
        f"lambda={settings.lam:.3f}, T = n^(1-lambda) = {temperature:,.0f}",
        f"{cfg.runs} runs x {cfg.num_samples:,} iterations, acceptance {summary['acceptance_rate']:.3f}",
        "",
        f"{'iterations':>12} {'ratio':>8} {'90% band':>18}",
    ]
    for it, r, lo, hi in zip(curve.iterations, curve.ratio, curve.low, curve.high):
        lines.append(f"{it:>12,} {r:>8.3f} {f'[{lo:.3f}, {hi:.3f}]':>18}")
    lines += [
        f"exact ratio under pi_T (quadrature, r={cfg.radius:g}): {exact:.3f}   (paper: 1.00)",
        f"runs visiting both balls: {summary['mint_runs_visiting_both']}/{cfg.runs}; "
        f"chi-squared of thinned draws vs pi_T: {chi.statistic:.1f} on {chi.dof} dof",
        f"fraction of draws nearer mode 1, per run: MINT {np.round(mint_frac, 2).tolist()}",
        f"                                          SGLD {np.round(sg_frac, 2).tolist()} (T=1, {cfg.sgld_steps:,} steps)",
        f"figure: {fig}",
    ]
    table = "\n".join(lines)
    (out / "table.txt").write_text(table + "\n")
    return table


QUICK = dict(n_data=100_000, batch_size=300, num_samples=5000, runs=8, radius=0.1, sgld_steps=2000)
"""``--quick``: 10^5 points, m = 300, 8 runs x 5000 iterations, balls of radius 0.1."""
FULL = dict(num_samples=1_000_000)
"""``--full``: the paper's 10^6 iterations per run."""


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce mint-gmm [--quick | --full] [--radius R] [--runs R] [--proposal-sd S]``."""
    p = experiment_parser(
        "mint-gmm",
        __doc__,
        quick="10^5 points, m=300, 8 runs x 5000 iterations, radius 0.1",
        full="the paper's 10^6 iterations per run (about 30 minutes on 2 cores)",
        trials="independent runs (as --runs)",
        num_samples="iterations per run (default 10^5)",
    )
    p.add_argument(
        "--radius", type=positive_float, default=None, help="radius of the mode balls (default 0.01, the paper's)"
    )
    p.add_argument("--runs", type=positive_int, default=None, help="independent runs (default 20)")
    p.add_argument(
        "--proposal-sd",
        type=positive_float,
        default=None,
        help="random-walk s.d. (default 0.5; smaller steps shrink MINT's bias)",
    )
    opts = p.parse_args(argv)
    cfg = with_presets(MintGMMConfig(seed=opts.seed), opts, QUICK, FULL)
    cfg = with_given(
        cfg,
        num_samples=opts.num_samples,
        radius=opts.radius,
        runs=opts.runs or opts.trials,
        proposal_sd=opts.proposal_sd,
    )
    out = run_dir(opts, "mint-gmm")
    print(
        f"Li and Wong 4.1: MINT, n={cfg.n_data:,}, m={cfg.batch_size}, {cfg.runs} runs x {cfg.num_samples:,}",
        flush=True,
    )
    command = command_line("mint-gmm", list(argv) if argv is not None else [])
    print(run(cfg, out, progress=not opts.no_progress, command=command, results=opts.results))
    return 0
