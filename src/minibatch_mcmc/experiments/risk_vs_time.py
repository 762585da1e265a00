"""Shared pieces of the risk-vs-wall-clock experiments (``rj-selection``, ``ica``): the exact reference run,
the timed run of every test, their data use and JSON, and the closing report."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.experiments.timed import TimedRun, timed_sample, wall_clock
from minibatch_mcmc.samplers import SampleResult, sample


def exact_reference(model, data, start, proposal, cfg: Any) -> SampleResult:
    """The exact-MH reference: ``cfg.chains`` chains of ``cfg.reference_samples`` steps (key ``cfg.seed + 100``)."""
    return sample(model, data, start, proposal=proposal, test=MetropolisTest(), num_samples=cfg.reference_samples,
                  num_chains=cfg.chains, key=cfg.seed + 100, progress=False, block_size=500)


def timed_runs(model, data, start, proposal, tests: dict, cfg: Any) -> Iterator[tuple[str, TimedRun]]:
    """Each test by label, run for ``cfg.chains`` chains of at most ``cfg.time_budget`` s (the ``i``-th with key ``cfg.seed + i``)."""
    for i, (label, test) in enumerate(tests.items()):
        print(f"{label}: {cfg.chains} chains x {cfg.time_budget:g} s", flush=True)
        yield label, timed_sample(model, data, start, proposal, test, cfg.max_samples, cfg.chains, cfg.seed + i, cfg.time_budget)


def data_use(run: TimedRun, n_data: int) -> dict:
    """Wall seconds and steps per chain, mean minibatch size and its fraction of the ``n_data`` points."""
    mean_batch = float(np.mean(run.records["batch_size"]))
    return {
        "wall_s": float(run.times[:, -1].mean()),
        "steps": int(run.times.shape[1]),
        "mean_batch": mean_batch,
        "data_fraction": mean_batch / n_data,
    }


def since_burn_in(times: np.ndarray, keep: int) -> np.ndarray:
    """``(R, T)`` clock readings from draw ``keep`` on, counted from the end of the burn-in."""
    return times[:, keep:] - (times[:, keep - 1 : keep] if keep else 0.0)


def risk_curves_json(curves: dict) -> dict:
    """Risk curves by label as plain lists, for ``summary.json``."""
    return {k: {f: getattr(c, f).tolist() for f in c._fields} for k, c in curves.items()}


def run_timed_and_print(run: Callable[..., str], *args) -> int:
    """Print ``run(*args)``'s table and the run time; ``args[-1]`` is the output folder."""
    table, seconds = wall_clock(run, *args)
    print(table)
    print(f"wrote {args[-1]}/ in {seconds:.0f} s")
    return 0
