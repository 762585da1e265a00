"""The offline builder of the correction tables ``C_sigma`` (Seita et al. 2017, Section 4).

The masses solve a linear programme (minimise the largest CDF error of ``N(0, sigma^2) * C_sigma``
against the standard logistic, subject to non-negative masses summing to one); the error is then
measured on a grid much finer than the one the programme saw. :func:`build_shipped_tables` writes the
tables that :mod:`minibatch_mcmc.acceptance.correction` loads at run time; run this module to regenerate
them (``python -m minibatch_mcmc.acceptance.correction_lp``).

The noise that ``C`` is convolved with is a :class:`ConvolutionKernel` (its CDF): ``N(0, sigma^2)`` by
default, or any other, e.g. the skewed Edgeworth kernel of :mod:`minibatch_mcmc.acceptance.correction_skew_lp`.
A symmetric kernel gets symmetric masses (half the unknowns); any other gets free masses on the whole grid.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
from scipy.optimize import linprog
from scipy.special import expit, ndtr

from minibatch_mcmc.acceptance.correction import (
    EVAL_STEP,
    SHIP_MAX_ERROR,
    SHIPPED_PATH,
    CorrectionTable,
    alias_cells,
    check_sigma,
    shipped_tables,
)
from minibatch_mcmc.checks import check_positive, check_real

SHIPPED_SIGMAS: tuple[float, ...] = (
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
    1.05,
    1.1,
    1.15,
    1.2,
    1.25,
    1.3,
    1.35,
    1.4,
    1.42,
    1.44,
    1.45,
    1.5,
    1.6,
    1.7,
)
"""The ``sigma`` values whose tables :func:`build_shipped_tables` writes by default."""

EVAL_HALF_WIDTH = 40.0
"""The fine grid covers at least ``[-EVAL_HALF_WIDTH, EVAL_HALF_WIDTH]``."""

MAX_SUPPORT_POINTS = 1201
"""Largest grid ``solve_correction`` accepts (the LP is dense)."""

MAX_HALF_WIDTH = 100.0
"""Largest ``half_width`` accepted; the standard logistic has mass ~1e-43 beyond 100."""

LP_MAX_ENTRIES = 4_000_000
"""Largest LP ``solve_correction`` starts: coefficients of its dense constraint matrix (32 MB in float64)."""


class ConvolutionKernel(NamedTuple):
    """The noise ``C`` is convolved with: its CDF (vectorised, float64), its scale and whether it is symmetric."""

    cdf: Callable[[np.ndarray], np.ndarray]
    """CDF of the kernel at an array of points."""
    sigma: float
    """Its standard deviation: sets the LP's constraint step ``min(grid_step, sigma / 5) / 2``."""
    symmetric: bool
    """True if the kernel is symmetric about 0 (then so are the masses and only ``x >= 0`` is constrained)."""


def gaussian_kernel(sigma: float) -> ConvolutionKernel:
    """``N(0, sigma^2)``: the kernel of the plain correction ``C_sigma``."""
    return ConvolutionKernel(lambda d: ndtr(d / sigma), float(sigma), True)


_LP_OPTIONS = MappingProxyType({"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
_EXCHANGE_ROUNDS = 4


# ---------------------------------------------------------------------------------------------
# numerics (numpy, scipy)


def _grid_half_count(grid_step: float, half_width: float) -> int:
    """Number ``k`` of grid points on each side of 0 (support is ``grid_step * (-k..k)``)."""
    k = int(math.floor(half_width / grid_step + 1e-9))
    if k < 1:
        raise ValueError(f"grid_step={grid_step!r} must not exceed half_width={half_width!r}")
    if 2 * k + 1 > MAX_SUPPORT_POINTS:
        raise ValueError(
            f"grid_step={grid_step!r} and half_width={half_width!r} give {2 * k + 1} support points; "
            f"at most {MAX_SUPPORT_POINTS} are allowed"
        )
    return k


def _lp_rows(sigma: float, grid_step: float, k: int, limit: float, step: float, sides: int = 1) -> int:
    """Constraint points on ``[0, limit]``; refuses an LP whose dense matrix would exceed ``LP_MAX_ENTRIES``.

    ``sides=2`` (an asymmetric kernel) doubles both the constraint points and the unknowns.
    """
    rows = int(math.ceil(limit / step)) + 1
    entries = 2 * (sides * rows) * (sides * k + 2)
    if entries > LP_MAX_ENTRIES:
        raise ValueError(
            f"sigma={sigma!r} with grid_step={grid_step!r} needs an LP of 2 x {sides * rows} x {sides * k + 2} = {entries:.3g} "
            f"coefficients ({entries * 8 / 2**30:.2g} GiB dense) before HiGHS starts; at most LP_MAX_ENTRIES="
            f"{LP_MAX_ENTRIES:.3g} are solved: the constraint grid step is min(grid_step, sigma/5)/2, so the LP grows "
            "like 1/sigma, and like 1/sigma^2 once grid_step follows sigma as accuracy needs"
        )
    return rows


def _symmetric_cdf_matrix(x: np.ndarray, offsets: np.ndarray, kernel: ConvolutionKernel) -> np.ndarray:
    """Columns: CDF at ``x`` of the kernel shifted to 0 (first) and to the pairs ``+-offsets[j]``."""
    a = kernel.cdf(x[:, None] - offsets[None, :])
    b = kernel.cdf(x[:, None] + offsets[None, :])
    a[:, 1:] += b[:, 1:]
    return a


def _mixture_cdf(x: np.ndarray, support: np.ndarray, probs: np.ndarray, kernel: ConvolutionKernel) -> np.ndarray:
    """``sum_j probs_j K(x - support_j)`` for the kernel CDF ``K``, in chunks, over the atoms with mass only."""
    xs = np.asarray(x, dtype=np.float64)
    keep = np.asarray(probs) > 0
    y, p = np.asarray(support, dtype=np.float64)[keep], np.asarray(probs, dtype=np.float64)[keep]
    flat = xs.reshape(-1)
    out = np.empty(flat.shape, dtype=np.float64)
    chunk = max(1, 2_000_000 // max(1, y.size))
    for start in range(0, flat.size, chunk):
        part = flat[start : start + chunk]
        out[start : start + chunk] = kernel.cdf(part[:, None] - y[None, :]) @ p
    return out.reshape(xs.shape)


def _eval_limit(half_width: float) -> float:
    """Half width of the fine evaluation grid."""
    return max(EVAL_HALF_WIDTH, 2.0 * half_width)


def _fine_grid(limit: float, start: float) -> np.ndarray:
    """Points ``start, start + EVAL_STEP, ..., limit``."""
    n = int(round((limit - start) / EVAL_STEP))
    return start + EVAL_STEP * np.arange(n + 1)


def _sup_error(support: np.ndarray, probs: np.ndarray, kernel: ConvolutionKernel, limit: float) -> float:
    """``max |CDF - S|`` over the fine grid on ``[-limit, limit]`` (no symmetry assumed)."""
    x = _fine_grid(limit, -limit)
    return float(np.max(np.abs(_mixture_cdf(x, support, probs, kernel) - expit(x))))


def _lp_columns(x: np.ndarray, k: int, grid_step: float, kernel: ConvolutionKernel) -> tuple[np.ndarray, np.ndarray]:
    """The LP's matrix and the weights of its unknowns in the total mass (symmetric: ``q_0 + 2 sum q_j``)."""
    if kernel.symmetric:
        weights = np.full(k + 1, 2.0)
        weights[0] = 1.0
        return _symmetric_cdf_matrix(x, grid_step * np.arange(k + 1), kernel), weights
    support = grid_step * np.arange(-k, k + 1)
    return kernel.cdf(x[:, None] - support[None, :]), np.ones(2 * k + 1)


def _solve_lp(x: np.ndarray, m: np.ndarray, weights: np.ndarray, sigma: float) -> tuple[np.ndarray, float]:
    """Minimise ``t`` s.t. ``|M q - S(x)| <= t``, ``q >= 0``, ``weights . q = 1``."""
    s = expit(x)
    n = weights.size
    ones = np.ones((x.size, 1))
    a_ub = np.block([[m, -ones], [-m, -ones]])
    b_ub = np.concatenate([s, -s])
    a_eq = np.concatenate([weights, [0.0]])[None, :]
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    for options in (dict(_LP_OPTIONS), {}):  # tight tolerances first, HiGHS defaults as a fallback
        res = linprog(
            cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs", options=options
        )
        if res.status == 0:
            break
    else:
        raise RuntimeError(f"the correction LP failed for sigma={sigma!r}: {res.message}")
    q = np.clip(res.x[:n], 0.0, None)
    q /= weights @ q
    return q, float(res.x[-1])


def _unfold(q: np.ndarray) -> np.ndarray:
    """Masses on ``-k..k`` from the symmetric half ``q_0..q_k``."""
    return np.concatenate([q[:0:-1], q])


def _local_maxima_above(err: np.ndarray, level: float) -> np.ndarray:
    """Indices of local maxima of ``err`` that exceed ``level``."""
    left = np.concatenate([[-np.inf], err[:-1]])
    right = np.concatenate([err[1:], [-np.inf]])
    return np.flatnonzero((err >= left) & (err >= right) & (err > level))


def alias_table(probs: np.ndarray, n_cells: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias method over ``n_cells >= len(probs)`` cells (extra cells carry zero mass)."""
    p = np.asarray(probs, dtype=np.float64)
    n = p.size if n_cells is None else int(n_cells)
    if n < p.size:
        raise ValueError(f"n_cells={n} must be at least the number of atoms {p.size}")
    p = np.concatenate([p, np.zeros(n - p.size)])
    scaled = p * (n / p.sum())
    alias_prob = np.ones(n, dtype=np.float64)
    alias_index = np.arange(n, dtype=np.int32)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, big = small.pop(), large.pop()
        alias_prob[s] = scaled[s]
        alias_index[s] = big
        scaled[big] = (scaled[big] + scaled[s]) - 1.0
        (small if scaled[big] < 1.0 else large).append(big)
    # leftovers (from rounding) keep probability 1 and alias themselves; a massless one would be a bug
    if np.any((alias_prob > 0) & (p == 0)):
        raise RuntimeError("alias table construction left a zero-mass cell selectable")
    return alias_prob, alias_index


def make_table(
    sigma: float, support: np.ndarray, probs: np.ndarray, error: float, derived_from: float | None = None
) -> CorrectionTable:
    """Assemble a (not shipped) table, computing its alias arrays."""
    alias_prob, alias_index = alias_table(probs, alias_cells(probs.size))
    return CorrectionTable(float(sigma), support, probs, float(error), alias_prob, alias_index, False, derived_from)


def measured_error(
    support: np.ndarray, probs: np.ndarray, sigma: float, kernel: ConvolutionKernel | None = None
) -> float:
    """Max CDF error of ``kernel * masses`` (default ``N(0, sigma^2)``) against the logistic on the fine grid."""
    kernel = gaussian_kernel(sigma) if kernel is None else kernel
    return _sup_error(support, probs, kernel, _eval_limit(float(np.max(np.abs(support)))))


def solve_correction(
    sigma: float, grid_step: float = 0.1, half_width: float = 20.0, kernel: ConvolutionKernel | None = None
) -> CorrectionTable:
    """Solve the minimax LP for ``C`` on the grid ``-half_width..half_width`` (step ``grid_step``).

    ``kernel`` is the noise ``C`` is convolved with (default ``N(0, sigma^2)``; ``sigma`` labels the table).
    """
    sigma = check_sigma(sigma)
    kernel = gaussian_kernel(sigma) if kernel is None else kernel
    grid_step = check_positive(grid_step, "grid_step")
    half_width = check_real(half_width, "half_width", 0.0, MAX_HALF_WIDTH, low_open=True)
    k = _grid_half_count(grid_step, half_width)
    limit = _eval_limit(half_width)
    # constraints on x >= 0 suffice for a symmetric kernel: symmetric masses give CDF(-x) = 1 - CDF(x), as for S
    step = 0.5 * min(grid_step, kernel.sigma / 5.0)
    sides = 1 if kernel.symmetric else 2
    x = step * np.arange(_lp_rows(sigma, grid_step, k, limit, step, sides))
    x = x if kernel.symmetric else np.concatenate([-x[:0:-1], x])
    support = grid_step * np.arange(-k, k + 1)
    fine = _fine_grid(limit, 0.0 if kernel.symmetric else -limit)
    fine_target = expit(fine)
    best_probs, best_err = np.empty(0), math.inf
    for _ in range(_EXCHANGE_ROUNDS):
        q, t = _solve_lp(x, *_lp_columns(x, k, grid_step, kernel), sigma)
        probs = _unfold(q) if kernel.symmetric else q
        err = np.abs(_mixture_cdf(fine, support, probs, kernel) - fine_target)
        if err.max() < best_err:
            best_probs, best_err = probs, float(err.max())
        # below ~1e-10 the LP's own tolerances dominate: refining further only chases noise
        worst = _local_maxima_above(err, t * (1.0 + 1e-4) + 1e-10)
        if worst.size == 0:
            break
        x = np.union1d(x, fine[worst])  # exchange step: add the points where the fine grid beats t
    return make_table(sigma, support, best_probs, _sup_error(support, best_probs, kernel, limit))


# ---------------------------------------------------------------------------------------------
# shipped tables


def build_shipped_tables(
    path: str | Path | None = None, sigmas: tuple[float, ...] = SHIPPED_SIGMAS
) -> dict[float, float]:
    """Solve the LP for each ``sigma``, write those with error < 1e-2 to ``path``; return ``{sigma: error}``."""
    target = Path(path) if path is not None else SHIPPED_PATH
    tables = [solve_correction(s) for s in sigmas]
    kept = [t for t in tables if t.max_cdf_error < SHIP_MAX_ERROR]
    dropped = [t for t in tables if t.max_cdf_error >= SHIP_MAX_ERROR]
    if not kept:
        raise ValueError(f"no sigma in {sigmas!r} reaches a max CDF error below {SHIP_MAX_ERROR}")
    target.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        target,
        sigmas=np.array([t.sigma for t in kept]),
        max_cdf_error=np.array([t.max_cdf_error for t in kept]),
        support=np.stack([t.support for t in kept]),
        probs=np.stack([t.probs for t in kept]),
        alias_prob=np.stack([t.alias_prob for t in kept]),
        alias_index=np.stack([t.alias_index for t in kept]),
        dropped_sigmas=np.array([t.sigma for t in dropped], dtype=np.float64),
        dropped_errors=np.array([t.max_cdf_error for t in dropped], dtype=np.float64),
    )
    shipped_tables.cache_clear()
    return {t.sigma: t.max_cdf_error for t in tables}


def _main() -> None:
    """Regenerate the shipped tables and print their errors."""
    import time

    start = time.perf_counter()
    errors = build_shipped_tables()
    elapsed = time.perf_counter() - start
    print(f"wrote {SHIPPED_PATH} ({SHIPPED_PATH.stat().st_size / 1024:.1f} KiB) in {elapsed:.1f} s")
    for sigma, err in errors.items():
        flag = "" if err < SHIP_MAX_ERROR else "  (dropped: error >= 1e-2)"
        print(f"  sigma={sigma:<5g} max CDF error {err:.3e}{flag}")


if __name__ == "__main__":
    _main()
