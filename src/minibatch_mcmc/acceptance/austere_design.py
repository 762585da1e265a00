"""Choosing AustereMH's ``(m, epsilon)``: the test's decision error and data use under the CLT, by simulation.

``epsilon`` is a level *per stage* of the sequential t-test, not an error per decision: with
``N / m`` stages a decision near the exact test's boundary (``mu_std -> 0``) has ``N / m`` chances to
stop on noise, so its error grows with the number of stages (roughly like ``log(N / m)``). This
module measures that error and picks settings from it:

* :func:`simulate_design` / :func:`design_table` / :func:`design_conservative` / :func:`design_adaptive`:
  the grid searches of AustereMH(c) and AustereMH(nc) (Seita et al. Appendix B.2.1).
* :func:`worst_case_error`: the worst-case per-decision error of one ``(m, epsilon)`` at ``N``
  (cached; what a sampler checks when it starts).
* :func:`design_for_error`: the ``(m, epsilon)`` with the least expected data whose worst-case error,
  certified by a one-sided 97.5% Clopper-Pearson bound on the simulation, is at most the error asked.
"""

from __future__ import annotations

import math
from functools import lru_cache, reduce
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from minibatch_mcmc.checks import check_int, check_real

EPSILON_GRID = (0.001, 0.005, 0.01, 0.05, 0.1, 0.2)
"""Per-test thresholds searched by the design (Seita et al. Appendix B.2.1)."""
BATCH_GRID = (50, 100, 150, 200, 250, 300, 350, 400, 450, 500)
"""Minibatch sizes searched by the design."""


# --------------------------------------------------------------------------------------------
# Design: error and data use of the sequential test as functions of mu_std
# --------------------------------------------------------------------------------------------


class DesignTable(NamedTuple):
    """Simulated error and expected data fraction of the test for each ``(m, epsilon, mu_std)``."""

    n_data: int
    batch_sizes: np.ndarray
    epsilons: np.ndarray
    mu_std: np.ndarray
    error: np.ndarray
    """Probability of a decision other than the exact test's, shape ``(len(m), len(eps), len(mu_std))``."""
    data_fraction: np.ndarray
    """Expected fraction of the ``N`` points used, same shape."""


def simulate_design(
    n_data: int,
    batch_size: int,
    epsilons: Sequence[float],
    mu_std: Sequence[float],
    n_paths: int = 2000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo error and data fraction of the sequential t-test, shape ``(len(epsilons), len(mu_std))``.

    Under the CLT the standardised deviation ``Y_j`` of the running mean of ``n_j`` points drawn
    without replacement is Gaussian with variance ``tau_j = 1/n_j - 1/N`` and Markov in ``j``
    (a Brownian motion run backwards in ``tau``), so the stage-``j`` statistic is
    ``t_j = (mu_std / sqrt(N) + Y_j) / sqrt(tau_j)``. The paths are simulated exactly at the test's
    stages and stopped when ``|t_j|`` exceeds the Student-t quantile; ``mu_std -> 0`` is taken as
    ``+0``, so an early stop on the wrong side (``t < 0``) counts as an error.
    """
    n = int(n_data)
    m = int(batch_size)
    if m < 2 or m > n:
        raise ValueError(f"batch_size m={m} must be in [2, N={n}]")
    eps = np.asarray(epsilons, float)
    mus = np.asarray(mu_std, float)
    if np.any((eps <= 0) | (eps >= 1)):
        raise ValueError(f"epsilons {eps.tolist()} must lie in (0, 1)")
    sizes = np.minimum(np.arange(1, math.ceil(n / m) + 1) * m, n)
    tau = 1.0 / sizes - 1.0 / n
    crit = sps.t.ppf(1.0 - eps[:, None], np.maximum(sizes - 1, 1)[None, :])  # (E, J)
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(n_paths) * math.sqrt(tau[0])
    shift = mus[:, None] / math.sqrt(n)  # (K, 1)
    sign = np.where(mus >= 0, 1.0, -1.0)[None, :, None]
    alive = np.ones((eps.size, mus.size, n_paths), bool)
    wrong = np.zeros((eps.size, mus.size))
    used = np.zeros((eps.size, mus.size))
    for j in range(sizes.size):
        if j > 0:
            r = tau[j] / tau[j - 1]
            y = r * y + math.sqrt(max(tau[j] * (1.0 - r), 0.0)) * rng.standard_normal(n_paths)
        if tau[j] <= 0:
            # all data used: the exact decision, never wrong
            used += alive.sum(-1) * sizes[j]
            alive[:] = False
            break
        t = (shift + y[None, :]) / math.sqrt(tau[j])  # (K, P)
        stop = alive & (np.abs(t)[None] > crit[:, j][:, None, None])
        if stop.any():
            wrong += (stop & (np.sign(t)[None] != sign)).sum(-1)
            used += stop.sum(-1) * sizes[j]
            alive &= ~stop
        if not alive.any():
            break
    return wrong / n_paths, used / (n_paths * n)


def design_table(
    n_data: int,
    mu_std: Sequence[float],
    batch_sizes: Sequence[int] = BATCH_GRID,
    epsilons: Sequence[float] = EPSILON_GRID,
    n_paths: int = 2000,
    seed: int = 0,
) -> DesignTable:
    """:func:`simulate_design` over the ``(m, epsilon)`` grid (sizes larger than ``N`` dropped)."""
    ms = np.asarray([m for m in batch_sizes if 2 <= m <= n_data], int)
    if ms.size == 0:
        raise ValueError(f"no batch size in {list(batch_sizes)} fits N={n_data}")
    err = np.empty((ms.size, len(epsilons), len(mu_std)))
    frac = np.empty_like(err)
    for i, m in enumerate(ms):
        err[i], frac[i] = simulate_design(n_data, int(m), epsilons, mu_std, n_paths, seed + i)
    return DesignTable(int(n_data), ms, np.asarray(epsilons, float), np.asarray(mu_std, float), err, frac)


class DesignChoice(NamedTuple):
    """The chosen ``(m, epsilon)`` with its worst-case error and expected data fraction."""

    batch_size: int
    epsilon: float
    worst_error: float
    data_fraction: float


def _check_error_bound(error_bound: float) -> float:
    """The design's bound on the probability of a wrong decision, in ``(0, 0.5)``."""
    return check_real(
        error_bound, "error_bound", 0.0, 0.5, low_open=True, high_open=True, why="a coin flip errs with 0.5"
    )


def design_conservative(
    n_data: int,
    error_bound: float,
    pilot_mu_std: Sequence[float] = (1.0,),
    batch_sizes: Sequence[int] = BATCH_GRID,
    epsilons: Sequence[float] = EPSILON_GRID,
    n_paths: int = 2000,
    seed: int = 0,
) -> DesignChoice:
    """AustereMH(c)'s grid search: least expected data use (averaged over ``pilot_mu_std``) s.t. worst error <= bound.

    The worst-case error of the test is at ``mu_std -> 0`` (the exact decision is a coin flip away),
    so the constraint is evaluated there; the data use is averaged over the ``|mu_std|`` values of a
    pilot run (full-data statistics of a few MH steps), as the expected cost of the run.
    """
    _check_error_bound(error_bound)
    pilot = np.abs(np.asarray(pilot_mu_std, float))
    if pilot.size == 0 or not np.all(np.isfinite(pilot)):
        raise ValueError("pilot_mu_std must be a non-empty list of finite values")
    grid = np.r_[0.0, pilot]
    table = design_table(n_data, grid, batch_sizes, epsilons, n_paths, seed)
    worst = table.error[:, :, 0]
    cost = table.data_fraction[:, :, 1:].mean(-1)
    ok = worst <= error_bound
    if not ok.any():
        i, e = np.unravel_index(np.argmin(worst), worst.shape)
    else:
        masked = np.where(ok, cost, np.inf)
        i, e = np.unravel_index(np.argmin(masked), masked.shape)
    return DesignChoice(int(table.batch_sizes[i]), float(table.epsilons[e]), float(worst[i, e]), float(cost[i, e]))


class AustereDesign(NamedTuple):
    """Per-``mu_std`` choice of ``(m, epsilon)`` for AustereMH(nc), as device arrays for lookup in ``jit``."""

    mu_std_grid: jax.Array
    batch_size: jax.Array
    epsilon: jax.Array
    base_chunk: int


def design_adaptive(table: DesignTable, error_bound: float) -> AustereDesign:
    """For each ``|mu_std|`` on the table's grid, the feasible ``(m, epsilon)`` with the least data use."""
    _check_error_bound(error_bound)
    k = table.mu_std.size
    ms, es = np.empty(k, np.int32), np.empty(k, np.float32)
    for j in range(k):
        err, frac = table.error[:, :, j], table.data_fraction[:, :, j]
        masked = np.where(err <= error_bound, frac, np.inf)
        if not np.isfinite(masked).any():
            masked = err  # nothing meets the bound: least error
        i, e = np.unravel_index(np.argmin(masked), masked.shape)
        ms[j], es[j] = table.batch_sizes[i], table.epsilons[e]
    order = np.argsort(table.mu_std)
    base = int(reduce(math.gcd, [int(m) for m in table.batch_sizes]))
    return AustereDesign(
        jnp.asarray(np.abs(table.mu_std)[order], jnp.float32), jnp.asarray(ms[order]), jnp.asarray(es[order]), base
    )


# ---- worst-case error per decision, and the design that meets an error asked for ----


CHECK_PATHS = 1000
"""Simulated paths behind the start-of-run check (Monte Carlo s.e. about 0.002 at an error of 0.01)."""
CHECK_STAGES = 20_000
"""Most stages the start-of-run check simulates; beyond, a subset gives a lower bound on the error."""
ERROR_EPSILON_GRID = tuple(float(f"{c}e{k}") for k in range(-7, -1) for c in (1, 2, 5)) + (0.1,)
"""Per-stage thresholds searched by :func:`design_for_error` (down to where ``N / m`` stages still err little)."""
ERROR_BATCH_GRID = (50, 100, 200, 500, 1000, 2000, 5000)
"""Minibatch sizes searched by :func:`design_for_error` (larger ``m``: fewer stages, so less error per ``epsilon``)."""
MAX_DESIGN_PATHS = 50_000
"""Most simulated paths :func:`design_for_error` uses per minibatch size (cost ~ paths x N / m)."""


def simulate_stops(
    n_data: int,
    batch_size: int,
    epsilons: Sequence[float],
    mu_std: Sequence[float],
    n_paths: int,
    seed: int = 0,
    max_stages: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Paths that stop before the data run out at ``mu_std = 0`` (per epsilon) and the data fraction at each ``mu_std``.

    Same model as :func:`simulate_design` (the running mean's deviation is a Brownian motion in
    ``tau_j = 1/n_j - 1/N``), vectorised over the stages: ``W(tau)`` is built by a cumulative sum from
    ``tau = 0`` (all data) upwards. At ``mu_std = 0`` an early stop is on the wrong side with
    probability 1/2 by symmetry, so the worst-case error is half the stop fraction (less Monte Carlo
    noise than counting wrong signs). Returns the stop counts, shape ``(len(epsilons),)``, and the
    expected fraction of the ``N`` points used, shape ``(len(epsilons), len(mu_std))``. With more than
    ``max_stages`` early stages only the first and last ``max_stages / 2`` are looked at: fewer looks,
    so the stop count is then a lower bound (and the data fraction an upper one).
    """
    n, m = int(n_data), int(batch_size)
    if m < 2 or m > n:
        raise ValueError(f"batch_size m={m} must be in [2, N={n}]")
    eps, mus = np.asarray(epsilons, float), np.abs(np.asarray(mu_std, float))
    if np.any((eps <= 0) | (eps >= 1)):
        raise ValueError(f"epsilons {eps.tolist()} must lie in (0, 1)")
    sizes = np.minimum(np.arange(1, math.ceil(n / m) + 1) * m, n)
    early = sizes[sizes < n]  # stages that can stop before the exact decision
    if max_stages is not None and early.size > max_stages:
        early = np.r_[early[: max_stages // 2], early[-(max_stages - max_stages // 2) :]]
    stops, used = np.zeros(eps.size), np.zeros((eps.size, mus.size))
    if early.size == 0:
        return stops, np.ones_like(used)
    tau = 1.0 / early - 1.0 / n
    crit = sps.t.ppf(1.0 - eps[:, None], np.maximum(early - 1, 1)[None, :]).astype(np.float32)[:, None, :]
    inv = (1.0 / np.sqrt(tau)).astype(np.float32)
    step_sd = np.sqrt(np.diff(np.r_[0.0, tau[::-1]])).astype(np.float32)  # increments in increasing tau
    drift = (mus / math.sqrt(n)).astype(np.float32)
    data = np.r_[early, n].astype(float)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_paths, 2**20 // early.size))
    for start in range(0, n_paths, chunk):
        p = min(chunk, n_paths - start)
        z = np.cumsum(rng.standard_normal((p, early.size), dtype=np.float32) * step_sd, axis=1)[:, ::-1] * inv
        stops += (np.abs(z)[None] > crit).any(-1).sum(-1)
        for k, d in enumerate(drift):
            hit = np.abs(z + d * inv)[None] > crit
            first = np.where(hit.any(-1), hit.argmax(-1), early.size)
            used[:, k] += data[first].sum(-1)
    return stops, used / (n_paths * n)


class ErrorEstimate(NamedTuple):
    """Simulated worst-case per-decision error with its Monte Carlo s.e. and one-sided 97.5% upper bound."""

    error: float
    std_error: float
    upper: float
    n_paths: int


def error_estimate(stops: float, n_paths: int) -> ErrorEstimate:
    """Half the stop fraction at ``mu_std = 0``, its s.e. and a Clopper-Pearson upper bound (halved)."""
    k = int(round(stops))
    frac = k / n_paths
    upper = 1.0 if k >= n_paths else float(sps.beta.ppf(0.975, k + 1, n_paths - k))
    return ErrorEstimate(0.5 * frac, 0.5 * math.sqrt(frac * (1.0 - frac) / n_paths), 0.5 * upper, int(n_paths))


@lru_cache(maxsize=256)
def worst_case_error(
    n_data: int, batch_size: int, epsilon: float, n_paths: int = CHECK_PATHS, seed: int = 0
) -> ErrorEstimate:
    """Worst-case (``mu_std -> 0``) probability that AustereMH(c)'s decision differs from the exact test's (cached).

    Above :data:`CHECK_STAGES` stages it looks at the first and last ``CHECK_STAGES / 2`` only: a lower bound.
    """
    stops, _ = simulate_stops(n_data, batch_size, [epsilon], [], n_paths, seed, max_stages=CHECK_STAGES)
    return error_estimate(float(stops[0]), n_paths)


class ErrorDesign(NamedTuple):
    """``(m, epsilon)`` chosen at ``N``: simulated worst-case error, its 97.5% upper bound (compared with the
    error asked), the expected data fraction per decision (mean over the pilot ``mu_std``) and the paths used."""

    n_data: int
    batch_size: int
    epsilon: float
    worst_error: float
    error_upper: float
    data_fraction: float
    n_paths: int


def per_decision_error(error: float | None = None, budget: float | None = None, num_steps: int | None = None) -> float:
    """The per-decision error asked: ``error``, or ``budget / num_steps`` (expected wrong decisions in a run <= budget)."""
    if (error is None) == (budget is None):
        raise ValueError(f"give exactly one of error={error!r} or budget={budget!r} (with num_steps)")
    if error is not None:
        return check_real(error, "error", 0.0, 0.5, low_open=True, high_open=True, why="a coin flip errs with 0.5")
    budget = check_real(budget, "budget", 0.0, low_open=True, why="the expected number of wrong decisions in the run")
    steps = check_int(num_steps, "num_steps", low=1, why="the budget is spread over the run's steps")
    return per_decision_error(error=min(budget / steps, 0.499))


def design_paths(error: float) -> int:
    """Paths enough to certify ``error`` (about 10 / error, between 4000 and :data:`MAX_DESIGN_PATHS`)."""
    return int(min(MAX_DESIGN_PATHS, max(4000, math.ceil(10.0 / error))))


def design_for_error(
    n_data: int,
    error: float,
    pilot_mu_std: Sequence[float] = (1.0,),
    batch_sizes: Sequence[int] = ERROR_BATCH_GRID,
    epsilons: Sequence[float] = ERROR_EPSILON_GRID,
    n_paths: int | None = None,
    seed: int = 0,
) -> ErrorDesign:
    """Least expected data (averaged over ``pilot_mu_std``) s.t. the certified worst-case per-decision error <= ``error``.

    Per ``m`` the error rises with ``epsilon`` (the same simulated paths stop at a nested set of
    stages), so the largest feasible ``epsilon`` uses the least data; the ``m`` with the least data
    wins. Raises if no grid point is certified below ``error``.
    """
    error = per_decision_error(error=error)
    n = check_int(n_data, "n_data N", low=2, why="the t statistic needs two points")
    pilot = np.abs(np.asarray(pilot_mu_std, float))
    if pilot.size == 0 or not np.all(np.isfinite(pilot)):
        raise ValueError(f"pilot_mu_std={list(pilot_mu_std)!r} must be a non-empty list of finite values")
    paths = design_paths(error) if n_paths is None else check_int(n_paths, "n_paths", low=100)
    eps = np.sort(np.asarray(epsilons, float))
    best: ErrorDesign | None = None
    reachable = ErrorEstimate(1.0, 0.0, 1.0, paths)
    for i, m in enumerate(int(m) for m in batch_sizes if 2 <= m <= n):
        stops, _ = simulate_stops(n, m, eps, [], paths, seed + i)
        est = [error_estimate(s, paths) for s in stops]
        ok = [e for e, x in enumerate(est) if x.upper <= error]
        reachable = min([reachable, *est], key=lambda x: x.upper)
        if not ok:
            continue
        e = ok[-1]
        _, frac = simulate_stops(n, m, [eps[e]], pilot, paths, seed + i)
        cand = ErrorDesign(n, m, float(eps[e]), est[e].error, est[e].upper, float(frac.mean()), paths)
        if best is None or cand.data_fraction < best.data_fraction:
            best = cand
    if best is None:
        raise ValueError(
            f"no (m, epsilon) in m={list(batch_sizes)}, epsilon={eps.tolist()} has a worst-case per-decision error "
            f"certified <= error={error:g} at N={n} (best reachable: {reachable.upper:.3g} upper bound, "
            f"{reachable.error:.3g} estimated, with {paths} paths); use larger m (fewer stages), smaller epsilons, "
            f"more n_paths, or the exact test (MetropolisTest)"
        )
    return best
