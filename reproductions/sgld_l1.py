"""Korattikara et al. Section 4.2.4 reproduced: SGLD on L1-regularised linear regression, with and without MH tests.

The SGLD proposal of Equation 21 (a Langevin step on the minibatch estimate of the log posterior)
is run with no test (plain SGLD), with the exact full-data Metropolis test, with AustereMH at
``epsilon = 0.1`` and ``0.5`` (Equation 22: the log proposal ratio enters ``mu_0``) and with
MHminibatch (the log proposal ratio enters the data-independent term). Each histogram is drawn over
the exact posterior density (quadrature), with the total-variation distance between the binned
draws and the exact bin probabilities, the data each test touches and the acceptance rate.

``minibatch-mcmc reproduce sgld-l1 [--quick]`` writes ``histograms.png``, ``summary.json`` and
``table.md`` to ``runs/sgld-l1``; ``--probe`` instead measures each minibatch test's acceptance
probability at fixed moves against the exact test's (``probe.md``; :mod:`.sgld_l1_probe`).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest, austere_mh, mh_minibatch, no_test
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.models.l1_regression import (
    L1DataSettings,
    L1Posterior,
    L1RegressionSettings,
    density_window,
    exact_posterior_l1,
    l1_regression,
    make_l1_data,
)
from minibatch_mcmc.proposals import langevin
from minibatch_mcmc.samplers import SampleResult, sample
from reproductions.options import experiment_parser, run_dir, with_given, written
from reproductions.results import command_line, results_payload, write_results
from reproductions.sgld_l1_report import format_table, plot, results_table, run_values
from reproductions.timed import wall_clock

PAPER_DATA_FRACTION = {"AustereMH eps=0.1": 0.142, "AustereMH eps=0.5": 0.05}
"""Average fraction of the data per test reported in Section 4.2.4."""


class SGLDL1Config(NamedTuple):
    """Settings; defaults are the paper's (Section 4.2.4) where it gives them."""

    n_data: int = 10_000
    lam: float = 3.0
    lam0: float = 4950.0
    step_size: float = 5e-6
    """SGLD step ``alpha``."""
    grad_batch: int = 500
    """Gradient minibatch of the SGLD proposal: 5% of N (the paper: AustereMH at eps=0.5 uses 5%, "no more than" it)."""
    austere_batch: int = 500
    """AustereMH minibatch (and growth increment): 5% of N, so eps=0.5 always decides on the first one."""
    epsilons: tuple[float, ...] = (0.1, 0.5)
    mhminibatch_batch: int = 100
    """MHminibatch's initial minibatch and growth increment (not in the paper)."""
    num_samples: int = 100_000
    burn_in: int = 1000
    num_chains: int = 1
    seed: int = 0
    """Sampler seed."""
    data_seed: int = 2
    """Data seed: its ``lam S_xy = 4994`` is the closest, among seeds 0-5, to the design value 5000 (see the docs)."""


def check_config(cfg: SGLDL1Config) -> None:
    """Raise a clear error for settings the experiment cannot run."""
    for field in ("num_samples", "num_chains", "n_data"):
        check_int(getattr(cfg, field), field, 1)
    check_int(cfg.burn_in, "burn_in", 0)
    if not cfg.epsilons:
        raise ValueError("epsilons must name at least one AustereMH threshold")


def method_tests(cfg: SGLDL1Config) -> dict:
    """Acceptance test per method name (plain SGLD has none)."""
    tests = {"SGLD (no test)": no_test(), "SGLD + exact MH": MetropolisTest()}
    for eps in cfg.epsilons:
        tests[f"AustereMH eps={eps:g}"] = austere_mh(batch_size=cfg.austere_batch, epsilon=eps)
    tests["MHminibatch"] = mh_minibatch(batch_size=cfg.mhminibatch_batch)
    return tests


def bin_edges(post: L1Posterior, draws: list[np.ndarray], per_sd: int = 4) -> np.ndarray:
    """Bins of width ``sd / per_sd`` aligned on the kink at 0, covering the exact posterior's support and every draw."""
    _, var = post.moments()
    w = math.sqrt(var) / per_sd
    lo, hi = density_window(post, 25.0)
    lo = min(lo, *(float(d.min()) for d in draws))
    hi = max(hi, *(float(d.max()) for d in draws))
    return w * np.arange(math.floor(lo / w), math.ceil(hi / w) + 1)


def total_variation(draws: np.ndarray, edges: np.ndarray, masses: np.ndarray) -> float:
    """Total-variation distance between the binned draws and the exact bin probabilities (mass outside counted)."""
    x = np.asarray(draws, np.float64).ravel()
    freq = np.histogram(x, edges)[0] / x.size
    outside_draws = 1.0 - freq.sum()
    outside_exact = max(1.0 - masses.sum(), 0.0)
    return 0.5 * (float(np.abs(freq - masses).sum()) + abs(outside_draws - outside_exact))


def iid_tv_floor(masses: np.ndarray, size: int, reps: int = 200, seed: int = 0) -> float:
    """Expected total-variation distance of ``size`` independent exact draws (the binning noise floor)."""
    rng = np.random.default_rng(seed)
    p = np.append(masses, max(1.0 - masses.sum(), 0.0))
    p = p / p.sum()
    counts = rng.multinomial(max(int(size), 1), p, size=reps) / max(int(size), 1)
    return float(0.5 * np.abs(counts - p).sum(axis=1).mean())


def effective_sample_size(draws: np.ndarray) -> float:
    """ArviZ bulk ESS of draws shaped ``(chain, draw)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az

        return float(az.ess(np.asarray(draws, np.float64), method="bulk"))


def run_method(cfg: SGLDL1Config, data: dict, post: L1Posterior, test, progress: bool = True) -> SampleResult:
    """One SGLD chain (``num_chains`` vmapped) with the given acceptance test, started at the posterior mode."""
    model = l1_regression(L1RegressionSettings(cfg.lam, cfg.lam0))
    res = sample(
        model,
        data,
        jnp.asarray([post.mode], jnp.float32),
        proposal=langevin(cfg.step_size, batch_size=cfg.grad_batch),
        test=test,
        num_samples=cfg.num_samples + cfg.burn_in,
        num_chains=cfg.num_chains,
        key=cfg.seed,
        block_size=min(5000, cfg.num_samples + cfg.burn_in),
        progress=progress,
    )
    return res


def summarize_run(name: str, res: SampleResult, cfg: SGLDL1Config, edges: np.ndarray, masses: np.ndarray) -> dict:
    """Total variation, its iid floor at the run's ESS, data per test, acceptance rate and tail statistics."""
    th = np.asarray(res.positions)[:, cfg.burn_in :, 0]
    rec_bs = np.asarray(res.records["batch_size"])[:, cfg.burn_in :]
    acc = np.asarray(res.records["accepted"])[:, cfg.burn_in :]
    ess = effective_sample_size(th)
    return {
        "method": name,
        "draws": int(th.size),
        "tv": total_variation(th, edges, masses),
        "ess": ess,
        "tv_iid_floor_at_ess": iid_tv_floor(masses, int(round(ess))),
        "acceptance_rate": float(acc.mean()),
        "data_fraction_per_test": float(rec_bs.mean()) / cfg.n_data,
        "gradient_fraction_per_step": min(cfg.grad_batch, cfg.n_data) / cfg.n_data if cfg.grad_batch else 1.0,
        "mean": float(th.mean()),
        "sd": float(th.std()),
        "p_negative": float(np.mean(th < 0)),
        "q999": float(np.quantile(th, 0.999)),
        "max": float(th.max()),
        "wall_time_s": float(res.wall_time),
        "paper_data_fraction": PAPER_DATA_FRACTION.get(name),
    }


def run(
    cfg: SGLDL1Config, out: Path, progress: bool = True, methods: tuple[str, ...] | None = None
) -> tuple[str, dict, dict]:
    """Run every method (or those named in ``methods``), write the figure, ``summary.json`` and ``table.md``; return the
    printed text, the results table and the values."""
    check_config(cfg)
    tests = method_tests(cfg)  # bad settings fail before any work
    if methods is not None:
        unknown = [m for m in methods if m not in tests]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; choose from {list(tests)}")
        tests = {m: tests[m] for m in methods}
    langevin(cfg.step_size, batch_size=cfg.grad_batch)
    out.mkdir(parents=True, exist_ok=True)
    data = make_l1_data(jax.random.key(cfg.data_seed), L1DataSettings(n_data=cfg.n_data))
    settings = L1RegressionSettings(cfg.lam, cfg.lam0)
    post = exact_posterior_l1(data, 1.0, settings)
    mean, var = post.moments()
    draws: dict[str, np.ndarray] = {}
    results: dict[str, SampleResult] = {}
    for name, test in tests.items():
        res, seconds = wall_clock(run_method, cfg, data, post, test, progress)
        results[name] = res
        draws[name] = np.asarray(res.positions)[:, cfg.burn_in :, 0]
        print(f"  {name}: {seconds:.1f} s", flush=True)
    edges = bin_edges(post, list(draws.values()))
    masses = post.bin_masses(edges)
    rows = [summarize_run(name, results[name], cfg, edges, masses) for name in tests]
    plot(post, draws, rows, edges, out / "histograms.png")
    from scipy.optimize import brentq

    exact = {
        "q999": float(brentq(lambda t: float(post.cdf(t)) - 0.999, post.mode, post.upper)),
        "mode": post.mode,
        "mean": mean,
        "sd": math.sqrt(var),
        "p_negative": float(post.cdf(0.0)),
        "lam_s_xy": cfg.lam * post.s_xy,
        "lam_s_xx": cfg.lam * post.s_xx,
        "bin_width": float(edges[1] - edges[0]),
        "bins": int(edges.size - 1),
    }
    (out / "summary.json").write_text(json.dumps({"config": cfg._asdict(), "exact": exact, "rows": rows}, indent=2))
    table = format_table(rows, exact)
    header = (
        f"Korattikara et al. 4.2.4: N={cfg.n_data:,}, lambda={cfg.lam:g}, lambda_0={cfg.lam0:g}, alpha={cfg.step_size:g}, "
        f"gradient minibatch {cfg.grad_batch}, {cfg.num_samples:,} samples after {cfg.burn_in} burn-in, {cfg.num_chains} chain(s).\n"
        f"Exact posterior (quadrature): mode {post.mode:.5f}, mean {mean:.5f}, sd {math.sqrt(var):.5f}, "
        f"P(theta<0) {exact['p_negative']:.4f}; lambda S_xy = {exact['lam_s_xy']:.1f}; bins of width {exact['bin_width']:.5f}.\n"
    )
    (out / "table.md").write_text(header + "\n" + table + "\n")
    return header + "\n" + table, {"sgld_l1_table": results_table(rows, exact)}, run_values(rows, exact)


def write_run_results(
    name: str, argv, opts, cfg: SGLDL1Config, out: Path, tables: dict, values: dict, figures: list
) -> None:
    """Write the run's results file (``--results FILE``: a copy)."""
    payload = results_payload(
        name, command_line(name, list(argv or [])), config=cfg, tables=tables, values=values, figures=figures
    )
    write_results(out, payload, copy_to=opts.results)


def main(argv: Sequence[str] | None = None) -> int:
    """``minibatch-mcmc reproduce sgld-l1 [--quick] [--probe] [--data-seed S] [--step-size A] [--grad-batch B]``."""
    p = experiment_parser(
        "sgld-l1",
        __doc__,
        quick="10,000 samples after 500 burn-in",
        trials="vmapped chains per method (default 1)",
        num_samples="samples per chain after burn-in (default 100,000)",
    )
    p.add_argument(
        "--data-seed", type=int, default=None, help="seed of the synthetic data set (default 2; see the docs)"
    )
    p.add_argument("--step-size", type=float, default=None, help="SGLD step alpha (default 5e-6, the paper's)")
    p.add_argument("--grad-batch", type=int, default=None, help="gradient minibatch of the SGLD proposal (default 500)")
    p.add_argument("--austere-batch", type=int, default=None, help="AustereMH minibatch and increment (default 500)")
    p.add_argument(
        "--probe", action="store_true", help="only measure each minibatch test's acceptance at fixed moves (probe.md)"
    )
    opts = p.parse_args(argv)
    cfg = SGLDL1Config(seed=opts.seed)
    if opts.quick:
        cfg = cfg._replace(num_samples=10_000, burn_in=500)
    cfg = with_given(
        cfg,
        num_samples=opts.num_samples,
        num_chains=opts.trials,
        data_seed=opts.data_seed,
        step_size=opts.step_size,
        grad_batch=opts.grad_batch,
        austere_batch=opts.austere_batch,
    )
    out = run_dir(opts, "sgld-l1")
    if opts.probe:
        check_config(cfg)
        out.mkdir(parents=True, exist_ok=True)
        from reproductions.sgld_l1_probe import run_probe

        tables, values = run_probe(cfg, out, n_keys=2000 if opts.quick else 20_000)
        write_run_results("sgld-l1", argv, opts, cfg, out, tables, values, [])
        return 0
    print(
        f"Korattikara et al. 4.2.4: SGLD on 1-D L1-regularised regression, N={cfg.n_data:,}, alpha={cfg.step_size:g}, "
        f"{cfg.num_samples:,} samples x {cfg.num_chains} chain(s); tests: {', '.join(method_tests(cfg))}",
        flush=True,
    )
    (text, tables, values), seconds = wall_clock(run, cfg, out, progress=not opts.no_progress)
    print(text)
    values["sgld_l1.wall_min"] = f"{seconds / 60:.1f}"
    write_run_results("sgld-l1", argv, opts, cfg, out, tables, values, ["histograms.png"])
    print(written(out))
    return 0
