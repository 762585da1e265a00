"""Li and Wong Section 5.3 / Appendix D.2: MINTEE on the 50-component tied-mean mixture.

``10^5`` points from ``theta* = 2 e_1``; the flat-prior posterior has 50 modes near ``2 e_j``.
MINTEE runs ``K = 7`` chains with ``m_{K-1} = 1000``, ``gamma = 1.4``, ``alpha = 0.995`` (the
``lambda / tau`` that reproduces Table 3's temperatures), ``H_0 = h(theta*)``, ``c = 10``,
``p_ee = 0.1``, Langevin steps from ``epsilon_k = 5e-4 sqrt(T_k)``, all chains started at the origin.
Outputs: the histogram of ``theta_1`` of the lowest chain (mode heights about 49:1), the modes
visited, the k-means elbow, Table 3 (energy-ring occupancy per chain) and a plain full-data MCMC
chain (no EE jumps) for contrast.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.models.tied_mixture import make_tied_mixture_data, nearest_mode, tied_mixture, tied_mixture_truth
from minibatch_mcmc.proposals import langevin
from minibatch_mcmc.samplers import sample
from minibatch_mcmc.samplers.mintee import MINTEEConfig, full_data_energy, mintee
from reproductions.mintee_report import results_table3, results_values, ring_table
from reproductions.options import experiment_parser, positive_int, run_dir, with_given
from reproductions.plots import pyplot, save_figure
from reproductions.results import command_line, results_payload, write_results
from reproductions.timed import wall_clock

DEFAULT_NAME = "mintee"


class ExperimentConfig(NamedTuple):
    """The Section 5.3 settings (paper values unless noted)."""

    n_data: int = 100_000
    num_components: int = 50
    spike: float = 2.0
    num_samples: int = 10_000
    """Draws of the lowest chain after burn-in (paper: 300,000)."""
    burn_in: int = 2_000
    """Sweeps of burn-in (paper: 10,000)."""
    num_chains: int = 7
    smallest_batch: int = 1000
    gamma: float = 1.4
    alpha: float = 0.995
    lowest_full_data: bool = False
    """Paper (Table 3): chain 0 on all data at T=1; off by default so a run takes minutes."""
    p_ee: float = 0.1
    energy_gap: float = 10.0
    initial_step: float = 5e-4
    ring_capacity: int = 1024
    plain_samples: int = 2_000
    """Steps of the plain full-data MCMC chain at chain 0's temperature."""
    plain_start: str = "mode"
    """Start of the plain chain: ``"mode"`` (``theta*``, a posterior mode, as in the paper's remark) or ``"origin"``."""
    layout: str = "loop"
    ee_energy: str = "paired"
    """EE-ratio energies: ``"paired"`` (same minibatches for both states) or ``"cached"`` (Algorithm 2 as written)."""
    seed: int = 0


def quick(cfg: ExperimentConfig) -> ExperimentConfig:
    """A CI-sized run: 10^4 points, 10 components, 4 chains, short chains."""
    return cfg._replace(
        n_data=10_000,
        num_components=10,
        num_samples=2_000,
        burn_in=600,
        num_chains=4,
        smallest_batch=200,
        gamma=2.0,
        plain_samples=500,
        ring_capacity=256,
    )


def mintee_config(cfg: ExperimentConfig, h0: float) -> MINTEEConfig:
    """The sampler settings of an experiment."""
    return MINTEEConfig(
        num_chains=cfg.num_chains,
        smallest_batch=cfg.smallest_batch,
        gamma=cfg.gamma,
        alpha=cfg.alpha,
        lowest_full_data=cfg.lowest_full_data,
        p_ee=cfg.p_ee,
        energy_gap=cfg.energy_gap,
        h0=h0,
        initial_step=cfg.initial_step,
        burn_in=cfg.burn_in,
        ring_capacity=cfg.ring_capacity,
        layout=cfg.layout,
        ee_energy=cfg.ee_energy,
    )


def kmeans_objective(draws: np.ndarray, clusters: list[int], seed: int = 0, max_points: int = 4000) -> np.ndarray:
    """Within-cluster sum of squares of k-means (scipy ``kmeans2``, k-means++ start, best of 3) per cluster count."""
    from scipy.cluster.vq import kmeans2

    rng = np.random.default_rng(seed)
    x = np.asarray(draws, np.float64)
    if x.shape[0] > max_points:
        x = x[rng.choice(x.shape[0], max_points, replace=False)]
    out = []
    for c in clusters:
        best = np.inf
        for _ in range(3):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cent, lab = kmeans2(x, c, minit="++", seed=int(rng.integers(1 << 31)), iter=30)
            best = min(best, float(((x - cent[lab]) ** 2).sum()))
        out.append(best)
    return np.asarray(out)


def elbow(clusters: list[int], objective: np.ndarray) -> int:
    """The cluster count where the objective's decrease drops the most (largest second difference of log objective)."""
    y = np.log(np.maximum(objective, 1e-300))
    gain = -np.diff(y)  # gain of adding one more cluster
    drop = gain[:-1] - gain[1:]
    return int(clusters[1 + int(np.argmax(drop))])


def mode_summary(draws: np.ndarray, spike: float) -> dict:
    """Modes visited (nearest ``spike e_j`` within half the inter-mode distance) and their visit fractions.

    Also the basins: the nearest mode without a radius, which is ``argmax_j theta_j`` since
    ``|theta - s e_j|^2 = |theta|^2 - 2 s theta_j + s^2``.
    """
    idx = nearest_mode(draws, spike)
    c = draws.shape[1]
    counts = np.bincount(idx[idx >= 0], minlength=c)
    frac = counts / max(len(idx), 1)
    basin = np.argmax(draws, axis=1)
    bfrac = np.bincount(basin, minlength=c) / max(len(basin), 1)
    return {
        "basins_visited": int((bfrac > 0).sum()),
        "min_basin_fraction": float(bfrac.min()),
        "max_basin_fraction": float(bfrac.max()),
        "basin_switches": int(np.sum(np.diff(basin) != 0)),
        "median_max_coordinate": float(np.median(draws.max(axis=1))),
        "modes_visited": int((counts > 0).sum()),
        "fraction_in_a_mode": float((idx >= 0).mean()),
        "min_mode_fraction": float(frac.min()),
        "max_mode_fraction": float(frac.max()),
        "mode_switches": int(np.sum(np.diff(idx[idx >= 0]) != 0)),
    }


def theta1_heights(theta1: np.ndarray, spike: float, bins: int = 80) -> tuple[float, float, float]:
    """Histogram peak heights near ``theta_1 = 0`` and near ``spike``, and their ratio (paper: about 50:1)."""
    counts, edges = np.histogram(theta1, bins=bins, range=(-1.0, spike + 1.0))
    centres = 0.5 * (edges[1:] + edges[:-1])
    low = counts[np.abs(centres) < spike / 2].max(initial=0)
    high = counts[np.abs(centres - spike) < spike / 2].max(initial=0)
    return float(low), float(high), float(low / high) if high else float("inf")


def run(
    cfg: ExperimentConfig, out: Path, progress: bool = True, command: str | None = None, results: str | None = None
) -> dict:
    """Run MINTEE and the plain-MCMC contrast; write figures, tables, InferenceData, ``summary.json`` and the results file.

    The results file's table (``PREFIX_table3``) and values (``PREFIX.*``) are named after ``results``'
    file name (``mintee`` without it), so several runs can sit side by side in ``docs/results/``.
    """
    out.mkdir(parents=True, exist_ok=True)
    model = tied_mixture(cfg.num_components)
    truth = tied_mixture_truth(cfg.num_components, cfg.spike)
    data = make_tied_mixture_data(jax.random.key(cfg.seed), cfg.n_data, truth)
    h0 = full_data_energy(model, data, jnp.asarray(truth))
    mcfg = mintee_config(cfg, h0)
    start = jnp.zeros(cfg.num_components, jnp.float32)
    result = mintee(model, data, start, mcfg, num_samples=cfg.num_samples, key=cfg.seed + 1, progress=progress)
    draws = np.asarray(result.lowest.positions)[0]
    modes = mode_summary(draws, cfg.spike)
    low, high, ratio = theta1_heights(draws[:, 0], cfg.spike)
    clusters = sorted(
        set(
            list(range(1, min(cfg.num_components + 21, 80), 1 if cfg.num_components <= 20 else 3))
            + [cfg.num_components - 1, cfg.num_components, cfg.num_components + 1]
        )
    )
    obj = kmeans_objective(draws, clusters, seed=cfg.seed)
    best_c = elbow(clusters, obj)

    step0 = float(result.records["step_size"][0, -1])
    if cfg.plain_start not in ("mode", "origin"):
        raise ValueError(f"plain_start={cfg.plain_start!r}; expected 'mode' or 'origin'")
    plain_init = jnp.asarray(truth) if cfg.plain_start == "mode" else start
    plain, plain_wall = wall_clock(
        sample,
        model,
        data,
        plain_init,
        proposal=langevin(step0),
        test=MetropolisTest(),
        num_samples=cfg.plain_samples,
        key=cfg.seed + 2,
        temperature=result.ladder.temperatures[0],
        progress=progress,
    )
    plain_draws = np.asarray(plain.positions)[0]
    plain_modes = mode_summary(plain_draws, cfg.spike)
    dist = np.linalg.norm(plain_draws - np.asarray(plain_init), axis=1)
    left = np.flatnonzero(dist >= cfg.spike / np.sqrt(2.0))  # half the inter-mode distance from the start
    plain_modes["steps_to_leave_start"] = int(left[0]) + 1 if left.size else None
    plain_modes["median_distance_from_start"] = float(np.median(dist[len(dist) // 2 :]))

    _figures(out, draws, plain_draws, clusters, obj, cfg)
    table = ring_table(result)
    (out / "table3_energy_rings.md").write_text(table + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result.lowest.to_inference_data().to_netcdf(str(out / "mintee_lowest.nc"))
    rates = result.move_rates()
    summary = {
        "config": cfg._asdict(),
        "ladder": result.ladder._asdict(),
        "h0": h0,
        "mintee": {
            **modes,
            "theta1_peak_low": low,
            "theta1_peak_high": high,
            "theta1_peak_ratio": ratio,
            "kmeans_elbow": best_c,
            "kmeans_clusters": clusters,
            "kmeans_objective": obj.tolist(),
            "move_rates": rates,
            "final_step_sizes": result.records["step_size"][:, -1].tolist(),
            "data_per_lowest_sample": result.data_per_lowest_sample(),
            "wall_time_s": result.wall_time,
        },
        "plain_mcmc": {
            **plain_modes,
            "temperature": result.ladder.temperatures[0],
            "start": cfg.plain_start,
            "steps": cfg.plain_samples,
            "step_size": step0,
            "acceptance_rate": float(np.mean(plain.records["accepted"])),
            "wall_time_s": plain_wall,
        },
        "table3": table,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    prefix = Path(results).stem if results else DEFAULT_NAME
    payload = results_payload(
        "mintee",
        command or command_line("mintee", []),
        config=cfg,
        tables=results_table3(result, f"{prefix}_table3"),
        values=results_values(summary, result, prefix),
        figures=[str(out / "mintee_figure4.png")],
    )
    write_results(out, payload, copy_to=results)
    return summary


def _figures(
    out: Path, draws: np.ndarray, plain: np.ndarray, clusters: list[int], obj: np.ndarray, cfg: ExperimentConfig
) -> None:
    """Figure 4 (left and right panels) plus the plain chain's histogram."""
    fig, ax = pyplot().subplots(1, 3, figsize=(14, 3.8))
    ax[0].hist(draws[:, 0], bins=80, range=(-1.0, cfg.spike + 1.0), color="C0")
    ax[0].set(title="MINTEE, lowest chain", xlabel="theta_1", ylabel="count")
    ax[1].hist(plain[:, 0], bins=80, range=(-1.0, cfg.spike + 1.0), color="C3")
    ax[1].set(title="plain MCMC (no EE)", xlabel="theta_1")
    ax[2].plot(clusters, obj, "o-", ms=3)
    ax[2].axvline(cfg.num_components, color="grey", ls=":")
    ax[2].set(title="k-means elbow", xlabel="clusters C", ylabel="within-cluster SS", yscale="log")
    save_figure(fig, out / "mintee_figure4.png")


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce mintee [--quick] [options]``: Section 5.3 (Figure 4, Table 3)."""
    p = experiment_parser(
        "mintee",
        __doc__.splitlines()[0],
        quick="10^4 points, 10 components, 4 chains, short chains",
        num_samples="draws of the lowest chain after burn-in (default 10,000)",
    )
    p.add_argument("--n-data", type=positive_int, default=None, help="data points (default 10^5)")
    p.add_argument("--burn-in", type=int, default=None, help="burn-in sweeps B (default 2000; paper 10,000)")
    p.add_argument(
        "--full-data-lowest", action="store_true", help="chain 0 on all data at T=1 (paper's Table 3; slower)"
    )
    p.add_argument("--p-ee", type=float, default=None, help="EE jump probability (default 0.1)")
    p.add_argument("--layout", choices=["loop", "padded"], default=None)
    p.add_argument("--ee-energy", choices=["paired", "cached"], default=None, help="EE-ratio energies (default paired)")
    p.add_argument(
        "--plain-samples", type=positive_int, default=None, help="steps of the plain MCMC contrast (default 2000)"
    )
    p.add_argument(
        "--plain-start", choices=["mode", "origin"], default=None, help="start of the plain chain (default: theta*)"
    )
    opts = p.parse_args(argv)
    cfg = ExperimentConfig(seed=opts.seed)
    if opts.quick:
        cfg = quick(cfg)
    cfg = with_given(
        cfg,
        num_samples=opts.num_samples,
        n_data=opts.n_data,
        burn_in=opts.burn_in,
        p_ee=opts.p_ee,
        layout=opts.layout,
        plain_samples=opts.plain_samples,
        plain_start=opts.plain_start,
        ee_energy=opts.ee_energy,
        lowest_full_data=opts.full_data_lowest or None,
    )
    out = run_dir(opts, DEFAULT_NAME + ("-quick" if opts.quick else ""))
    command = command_line("mintee", list(argv) if argv is not None else [])
    summary = run(cfg, out, progress=not opts.no_progress, command=command, results=opts.results)
    m, pl = summary["mintee"], summary["plain_mcmc"]
    print(summary["table3"])
    print(
        f"MINTEE lowest chain: {m['modes_visited']}/{cfg.num_components} modes visited ({m['basins_visited']} basins, "
        f"{m['basin_switches']} basin switches), theta_1 peak ratio "
        f"{m['theta1_peak_ratio']:.1f}:1, k-means elbow at C={m['kmeans_elbow']}, {m['wall_time_s']:.0f} s\n"
        f"plain MCMC ({pl['steps']} steps at T={pl['temperature']:.2f} from the {pl['start']}): {pl['modes_visited']} mode(s) visited, "
        f"{pl['basins_visited']} basin(s)\n"
        f"outputs in {out}"
    )
    return 0
