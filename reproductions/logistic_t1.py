"""Temperature 1 on tall data: MHminibatch with a Taylor-proxy control variate beside full-data Metropolis-Hastings.

A synthetic logistic regression (``make_logistic_data``, 10^6 rows, ``d = 10``) sampled at ``K = 1``.
``auto_sample`` warms up (mode, Laplace covariance, second-order Taylor proxy, proxy-gradient MALA
tuned with MHminibatch), then samples with the proxy as the estimator, so each test reads one
minibatch of ``b`` residuals. The reference is the exact ``MetropolisTest`` with the same tuned
proposal, reading all ``N`` rows per step. Both start from the same over-dispersed Laplace draws; each
row of the table gives data per test, acceptance, the smallest bulk ESS over the coordinates, ESS per
second of sampling (compilation included), the warm-up's cost (shared: the reference uses the proposal
it tuned) and the wall time. A figure overlays the two posteriors' marginals and one pair.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.samplers import SampleResult, sample
from minibatch_mcmc.warmup import Warmup, auto_sample, dispersed_starts
from reproductions.options import experiment_parser, positive_int, run_dir, with_given, with_presets, written
from reproductions.plots import pyplot, save_figure
from reproductions.results import command_line, results_payload, save_results
from reproductions.results import table as results_table

PREFIX = "t1_"
"""Prefix of every file this experiment writes (it shares ``runs/demo/`` with the mixture demo)."""
METHODS = ("mhminibatch+cv", "metropolis")
"""The control-variate run and the full-data reference."""


class T1Config(NamedTuple):
    """Settings of the temperature-1 logistic-regression run."""

    n_data: int = 1_000_000
    dim: int = 10
    prior_scale: float = 10.0
    batch_size: int = 50
    """MHminibatch's minibatch size ``b`` (with the proxy the test stops after the first one)."""
    num_samples: int = 2000
    num_chains: int = 4
    reference_samples: int = 200
    """Steps per chain of the full-data Metropolis run (each reads all ``N`` rows)."""
    reference_chains: int = 2
    burn_in: float = 0.1
    """Fraction of each chain's draws dropped before ESS, means and the figure."""
    seed: int = 0


QUICK = {"n_data": 100_000, "num_samples": 500, "reference_samples": 100}
"""The CI-sized preset (``--quick``)."""


def make_data(cfg: T1Config) -> tuple[dict, np.ndarray]:
    """``{"x": (N, d), "y": (N,)}`` drawn from the model at random true weights, and those weights."""
    data, theta_true = make_logistic_data(jax.random.key(cfg.seed), cfg.n_data, cfg.dim)
    return data, np.asarray(theta_true)


def run_control_variate(cfg: T1Config, data: dict, progress: bool = True) -> tuple[SampleResult, Warmup]:
    """Warm up and sample with MHminibatch and the second-order Taylor proxy (proxy-gradient MALA)."""
    return auto_sample(
        logistic_regression(cfg.prior_scale),
        data,
        jnp.zeros(cfg.dim, jnp.float32),
        num_samples=cfg.num_samples,
        num_chains=cfg.num_chains,
        key=cfg.seed + 1,
        test=mh_minibatch(batch_size=cfg.batch_size),
        proposal="langevin",
        progress=progress,
    )


def run_full_data(cfg: T1Config, data: dict, w: Warmup, progress: bool = True) -> SampleResult:
    """Exact Metropolis-Hastings (all ``N`` rows per test) with the warm-up's tuned proposal, from dispersed starts."""
    starts = dispersed_starts(w, cfg.reference_chains, jax.random.key(cfg.seed + 2))
    return sample(
        logistic_regression(cfg.prior_scale),
        data,
        starts,
        proposal=w.proposal,
        test=MetropolisTest(),
        num_samples=cfg.reference_samples,
        num_chains=cfg.reference_chains,
        key=cfg.seed + 3,
        batched_init=True,
        progress=progress,
    )


def kept_draws(res: SampleResult, burn_in: float) -> np.ndarray:
    """The draws after burn-in, shaped ``(chain, draw, d)`` in float64."""
    x = np.asarray(res.positions, np.float64)
    return x[:, int(burn_in * x.shape[1]) :]


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """ArviZ's bulk ESS of each coordinate of ``(chain, draw, d)`` draws."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

    return np.array([float(az.ess(draws[..., j], method="bulk")) for j in range(draws.shape[-1])])


def run_row(res: SampleResult, w: Warmup, draws: np.ndarray, ess: np.ndarray) -> dict:
    """One table row: the run's summary plus ESS, ESS/s, data per effective draw and the warm-up's cost."""
    s = res.summary(posterior=False)
    total_data = s["total_data_consumed"] + s["total_hidden_data"]
    return s | {
        "kept_draws": int(draws.shape[0] * draws.shape[1]),
        "min_ess": float(ess.min()),
        "ess_per_s": float(ess.min() / res.wall_time),
        "data_per_ess": float(total_data / ess.min()),
        "warmup_data": int(w.total_data),
        "warmup_s": float(w.total_seconds),
        "warmup_phases": {k: {"data": int(c.data), "seconds": float(c.seconds)} for k, c in w.cost.items()},
    }


def mean_z(a: np.ndarray, ess_a: np.ndarray, b: np.ndarray, ess_b: np.ndarray) -> np.ndarray:
    """Per coordinate, the difference of two runs' posterior means over its Monte Carlo standard error."""
    se2 = a.reshape(-1, a.shape[-1]).var(0) / ess_a + b.reshape(-1, b.shape[-1]).var(0) / ess_b
    return (a.mean((0, 1)) - b.mean((0, 1))) / np.sqrt(se2)


def plot_posteriors(
    draws: dict[str, np.ndarray], w: Warmup, theta_true: np.ndarray, path: Path, coords: int = 4
) -> Path:
    """Marginal densities of the first ``coords`` coordinates overlaid (Laplace curve dashed), and one pair."""
    plt = pyplot()
    k = min(coords, theta_true.size)
    fig, axes = plt.subplots(1, k + (k > 1), figsize=(3.2 * (k + (k > 1)), 3.2))
    axes = np.atleast_1d(axes)
    centre = np.asarray(jax.device_get(w.centre), np.float64).reshape(-1)
    sd = np.sqrt(np.diag(w.covariance))
    for j, ax in enumerate(axes[:k]):
        grid = centre[j] + sd[j] * np.linspace(-4, 4, 200)
        for (name, x), color in zip(draws.items(), ("C0", "C3")):
            ax.hist(
                x[..., j].ravel(),
                bins=30,
                range=(grid[0], grid[-1]),
                density=True,
                histtype="step",
                color=color,
                label=name,
            )
        laplace = np.exp(-0.5 * ((grid - centre[j]) / sd[j]) ** 2) / (sd[j] * np.sqrt(2 * np.pi))
        ax.plot(grid, laplace, "k--", lw=0.8, label="Laplace")
        ax.axvline(theta_true[j], color="0.5", lw=0.8)
        ax.set_xlabel(f"theta_{j}")
        ax.set_yticks([])
    axes[0].legend(fontsize=7)
    if k > 1:
        ax = axes[-1]
        for (name, x), color in zip(draws.items(), ("C0", "C3")):
            ax.scatter(x[..., 0].ravel(), x[..., 1].ravel(), s=2, alpha=0.25, color=color, label=name)
        ax.set_xlabel("theta_0")
        ax.set_ylabel("theta_1")
    fig.suptitle("posterior at temperature 1 (grey: true weights)", fontsize=9)
    return save_figure(fig, path)


TABLE_COLUMNS = [
    ("method", "{}", "method"),
    ("chains x draws", "{}", "shape"),
    ("data/test", "{:,.0f}", "data_per_test"),
    ("acceptance", "{:.3f}", "acceptance_rate"),
    ("min ESS", "{:.0f}", "min_ess"),
    ("ESS/s", "{:.1f}", "ess_per_s"),
    ("data/ESS", "{:,.0f}", "data_per_ess"),
    ("warm-up data", "{:,d}", "warmup_data"),
    ("warm-up s", "{:.1f}", "warmup_s"),
    ("wall s", "{:.1f}", "wall_time_s"),
]
"""The table's columns: heading, format, summary key."""


def table_cells(rows: list[dict]) -> list[list[str]]:
    """The formatted cells of the table, one list per run."""
    return [
        [fmt.format((r | {"shape": f"{r['chains']} x {r['draws']}"})[key]) for _, fmt, key in TABLE_COLUMNS]
        for r in rows
    ]


def format_table(rows: list[dict]) -> str:
    """A plain-text table of the runs."""
    header = " | ".join(f"{c[0]:>14}" for c in TABLE_COLUMNS)
    lines = [header, "-" * len(header)]
    lines += [" | ".join(f"{cell:>14}" for cell in cells) for cells in table_cells(rows)]
    return "\n".join(lines)


def run_t1(
    cfg: T1Config,
    out: Path,
    methods: Sequence[str] = METHODS,
    progress: bool = True,
    command: str = "minibatch-mcmc reproduce logistic-t1",
    results_file: str | None = None,
) -> str:
    """Run the control-variate sampler (and the full-data reference); write draws, figure, summary and results file to ``out``.

    The results file is ``out/t1_results.json`` (and ``results_file`` when given), with ``command`` as the command that made it.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown or METHODS[0] not in methods:
        raise ValueError(f"methods={tuple(methods)!r}; expected {METHODS[0]!r} and optionally {METHODS[1]!r}")
    mh_minibatch(batch_size=cfg.batch_size)  # fail on bad settings before any work
    out.mkdir(parents=True, exist_ok=True)
    data, theta_true = make_data(cfg)
    res, w = run_control_variate(cfg, data, progress)
    results = {METHODS[0]: res}
    if METHODS[1] in methods:
        results[METHODS[1]] = run_full_data(cfg, data, w, progress)
    draws, rows = {}, []
    for name, r in results.items():
        draws[name] = kept_draws(r, cfg.burn_in)
        ess = bulk_ess(draws[name])
        rows.append(run_row(r, w, draws[name], ess) | {"method": name, "ess": ess.tolist()})
        r.to_inference_data().to_netcdf(str(out / f"{PREFIX}{name.replace('+', '_')}.nc"))
    plot_posteriors(draws, w, theta_true, out / f"{PREFIX}posteriors.png")
    table = format_table(rows)
    values = {}
    if len(rows) == 2:
        z = mean_z(draws[METHODS[0]], np.asarray(rows[0]["ess"]), draws[METHODS[1]], np.asarray(rows[1]["ess"]))
        table += (
            f"\nposterior means, control variate vs full data: max |difference| / MC s.e. = {np.abs(z).max():.2f} "
            f"over d={z.size}"
        )
        values["logistic_t1.max_mean_z"] = f"{np.abs(z).max():.2f}"
    payload = results_payload(
        "logistic-t1",
        command,
        config=cfg,
        values=values,
        figures=[f"{PREFIX}posteriors.png"],
        tables={"logistic_t1": results_table([c[0] for c in TABLE_COLUMNS], table_cells(rows))},
    )
    for path in [out / f"{PREFIX}results.json"] + ([Path(results_file)] if results_file else []):
        save_results(path, payload)
    summary = {"config": cfg._asdict(), "theta_true": theta_true.tolist(), "runs": rows}
    (out / f"{PREFIX}summary.json").write_text(json.dumps(summary, indent=2))
    (out / f"{PREFIX}summary.txt").write_text(table + "\n")
    return table


def headline(cfg: T1Config, methods: Sequence[str]) -> str:
    """The line printed before the run."""
    return (
        f"Logistic regression at temperature 1: N={cfg.n_data:,}, d={cfg.dim}, MHminibatch b={cfg.batch_size} with a "
        f"Taylor-proxy control variate ({cfg.num_chains} x {cfg.num_samples})"
        + (
            f" beside full-data Metropolis ({cfg.reference_chains} x {cfg.reference_samples})"
            if METHODS[1] in methods
            else ""
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce logistic-t1 [--quick] [--n-data N] [--dim D] ...``."""
    p = experiment_parser(
        "logistic-t1",
        __doc__,
        quick="10^5 rows, 500 draws per chain, 100 full-data steps",
        num_samples=f"draws per chain of the control-variate run (default {T1Config().num_samples})",
    )
    p.add_argument("--n-data", type=positive_int, help=f"rows N (default {T1Config().n_data:,})")
    p.add_argument("--dim", type=positive_int, help=f"parameters d (default {T1Config().dim})")
    p.add_argument(
        "--batch-size", type=positive_int, help=f"MHminibatch minibatch size b (default {T1Config().batch_size})"
    )
    p.add_argument(
        "--chains", type=positive_int, help=f"chains of the control-variate run (default {T1Config().num_chains})"
    )
    p.add_argument(
        "--reference-samples",
        type=positive_int,
        help=f"steps per chain of full-data MH (default {T1Config().reference_samples})",
    )
    p.add_argument("--no-reference", action="store_true", help="skip the full-data Metropolis run")
    opts = p.parse_args(argv)
    cfg = with_presets(T1Config(seed=opts.seed), opts, QUICK)
    cfg = with_given(
        cfg,
        n_data=opts.n_data,
        dim=opts.dim,
        batch_size=opts.batch_size,
        num_chains=opts.chains,
        num_samples=opts.num_samples,
        reference_samples=opts.reference_samples,
    )
    methods = METHODS[:1] if opts.no_reference else METHODS
    out = run_dir(opts, "logistic-t1")
    print(headline(cfg, methods), flush=True)
    command = command_line("logistic-t1", list(argv or []))
    print(run_t1(cfg, out, methods, progress=not opts.no_progress, command=command, results_file=opts.results))
    print(written(out))
    return 0
