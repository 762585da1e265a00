"""The correction distribution ``C_sigma`` of MHminibatch (Seita et al. 2017, Section 4).

``C_sigma`` is a discrete distribution (point masses on a symmetric grid) chosen so that
``N(0, sigma^2) * C_sigma`` is as close as possible, in the sup norm of the CDF, to the standard
logistic distribution. The masses solve a linear programme (minimise the largest CDF error subject
to non-negative masses summing to one); the error is then measured on a grid much finer than the
one the programme saw. Tables for common ``sigma`` ship with the package; others are solved on
demand. Draws use Vose's alias method: O(1) per draw, usable under ``jit`` and ``vmap``.
"""

from __future__ import annotations

import functools
import math
import numbers
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linprog
from scipy.special import expit, ndtr

LOGISTIC_SD = math.pi / math.sqrt(3)
"""Standard deviation of the standard logistic distribution: the upper limit on ``sigma``."""

SHIPPED_SIGMAS: tuple[float, ...] = (
    0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4, 1.42, 1.44, 1.45, 1.5, 1.6, 1.7,
)
"""The ``sigma`` values whose tables :func:`build_shipped_tables` writes by default."""

SHIP_MAX_ERROR = 1e-2
"""A table is shipped only if its max CDF error is below this."""

EVAL_STEP = 0.005
"""Step of the fine grid on which ``max_cdf_error`` is measured."""

EVAL_HALF_WIDTH = 40.0
"""The fine grid covers at least ``[-EVAL_HALF_WIDTH, EVAL_HALF_WIDTH]``."""

MAX_SUPPORT_POINTS = 1201
"""Largest grid ``solve_correction`` accepts (the LP is dense; 1201 points take ~10 s)."""

MAX_HALF_WIDTH = 100.0
"""Largest ``half_width`` accepted; the standard logistic has mass ~1e-43 beyond 100."""

SHIPPED_PATH = Path(__file__).resolve().parent / "tables" / "correction_tables.npz"
"""Where the precomputed tables live."""

_LP_OPTIONS = MappingProxyType({"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
_MATCH_TOL = 1e-9
_EXCHANGE_ROUNDS = 4


class CorrectionTable(NamedTuple):
    """Point masses ``probs`` on ``support`` approximating ``C_sigma``, with an alias table for sampling.

    The alias arrays have one entry per cell; there are ``alias_cells(len(support))`` cells (a power
    of two, the cells past ``len(support)`` carry no mass of their own). Cell ``c`` yields atom ``c``
    with probability ``alias_prob[c]`` and atom ``alias_index[c]`` otherwise.
    """

    sigma: float
    support: np.ndarray
    probs: np.ndarray
    max_cdf_error: float
    alias_prob: np.ndarray
    alias_index: np.ndarray
    shipped: bool = False


class CorrectionSampler(NamedTuple):
    """Device arrays of a :class:`CorrectionTable` for O(1) draws in JAX."""

    support: jax.Array
    alias_prob: jax.Array
    alias_index: jax.Array
    sigma: float


# ---------------------------------------------------------------------------------------------
# validation


def _check_sigma(sigma: object) -> float:
    """Return ``sigma`` as a float if ``0 < sigma < pi/sqrt(3)``, else raise ValueError."""
    ok = isinstance(sigma, numbers.Real) and not isinstance(sigma, bool)
    value = float(sigma) if ok else float("nan")
    if not (ok and math.isfinite(value) and 0.0 < value < LOGISTIC_SD):
        shown = repr(value) if ok else repr(sigma)
        raise ValueError(
            f"sigma={shown} must be a finite number with 0 < sigma < pi/sqrt(3) = {LOGISTIC_SD:.6f} "
            "(the standard deviation of the standard logistic distribution; the correction needs "
            "the leftover variance pi^2/3 - sigma^2 > 0)"
        )
    return value


def _check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite number > 0, else raise ValueError."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    v = float(value) if ok else float("nan")
    if not (ok and math.isfinite(v) and v > 0.0):
        shown = repr(v) if ok else repr(value)
        raise ValueError(f"{name}={shown} must be a finite number > 0")
    return v


# ---------------------------------------------------------------------------------------------
# numerics (numpy)


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


def _symmetric_cdf_matrix(x: np.ndarray, offsets: np.ndarray, sigma: float) -> np.ndarray:
    """Columns: CDF at ``x`` of N(0, sigma^2) shifted to 0 (first) and to the pairs ``+-offsets[j]``."""
    a = ndtr((x[:, None] - offsets[None, :]) / sigma)
    b = ndtr((x[:, None] + offsets[None, :]) / sigma)
    a[:, 1:] += b[:, 1:]
    return a


def _mixture_cdf(x: np.ndarray, support: np.ndarray, probs: np.ndarray, sigma: float) -> np.ndarray:
    """``sum_j probs_j Phi((x - support_j) / sigma)``, in chunks, over the atoms with mass only."""
    xs = np.asarray(x, dtype=np.float64)
    keep = np.asarray(probs) > 0
    y, p = np.asarray(support, dtype=np.float64)[keep], np.asarray(probs, dtype=np.float64)[keep]
    flat = xs.reshape(-1)
    out = np.empty(flat.shape, dtype=np.float64)
    chunk = max(1, 2_000_000 // max(1, y.size))
    for start in range(0, flat.size, chunk):
        part = flat[start : start + chunk]
        out[start : start + chunk] = ndtr((part[:, None] - y[None, :]) / sigma) @ p
    return out.reshape(xs.shape)


def correction_cdf(x: np.ndarray | float, table: CorrectionTable) -> np.ndarray:
    """CDF of ``N(0, sigma^2) + X_corr`` at ``x`` (numpy, float64)."""
    return _mixture_cdf(np.asarray(x, dtype=np.float64), table.support, table.probs, table.sigma)


def _eval_limit(half_width: float) -> float:
    """Half width of the fine evaluation grid."""
    return max(EVAL_HALF_WIDTH, 2.0 * half_width)


def _fine_grid(limit: float, start: float) -> np.ndarray:
    """Points ``start, start + EVAL_STEP, ..., limit``."""
    n = int(round((limit - start) / EVAL_STEP))
    return start + EVAL_STEP * np.arange(n + 1)


def _sup_error(support: np.ndarray, probs: np.ndarray, sigma: float, limit: float) -> float:
    """``max |CDF - S|`` over the fine grid on ``[-limit, limit]`` (no symmetry assumed)."""
    x = _fine_grid(limit, -limit)
    return float(np.max(np.abs(_mixture_cdf(x, support, probs, sigma) - expit(x))))


def _solve_lp(x: np.ndarray, offsets: np.ndarray, sigma: float) -> tuple[np.ndarray, float]:
    """Minimise ``t`` s.t. ``|M q - S(x)| <= t``, ``q >= 0``, ``q_0 + 2 sum q_j = 1`` (symmetric masses)."""
    m = _symmetric_cdf_matrix(x, offsets, sigma)
    s = expit(x)
    n = offsets.size
    ones = np.ones((x.size, 1))
    a_ub = np.block([[m, -ones], [-m, -ones]])
    b_ub = np.concatenate([s, -s])
    weights = np.full(n, 2.0)
    weights[0] = 1.0
    a_eq = np.concatenate([weights, [0.0]])[None, :]
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    for options in (dict(_LP_OPTIONS), {}):  # tight tolerances first, HiGHS defaults as a fallback
        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs", options=options)
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


def alias_cells(n_atoms: int) -> int:
    """Number of alias cells: the next power of two, so a float32 uniform picks a cell exactly uniformly."""
    return 1 << max(0, int(n_atoms) - 1).bit_length()


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


def _make_table(sigma: float, support: np.ndarray, probs: np.ndarray, error: float) -> CorrectionTable:
    """Assemble a table, computing its alias arrays."""
    alias_prob, alias_index = alias_table(probs, alias_cells(probs.size))
    return CorrectionTable(float(sigma), support, probs, float(error), alias_prob, alias_index, False)


def solve_correction(sigma: float, grid_step: float = 0.1, half_width: float = 20.0) -> CorrectionTable:
    """Solve the minimax LP for ``C_sigma`` on the grid ``-half_width..half_width`` (step ``grid_step``)."""
    sigma = _check_sigma(sigma)
    grid_step = _check_positive("grid_step", grid_step)
    half_width = _check_positive("half_width", half_width)
    if half_width > MAX_HALF_WIDTH:
        raise ValueError(f"half_width={half_width!r} must be at most {MAX_HALF_WIDTH:g}")
    k = _grid_half_count(grid_step, half_width)
    offsets = grid_step * np.arange(k + 1)
    limit = _eval_limit(half_width)
    # constraints on x >= 0 suffice: symmetric masses give CDF(-x) = 1 - CDF(x), as for S
    step = 0.5 * min(grid_step, sigma / 5.0)
    x = step * np.arange(int(math.ceil(limit / step)) + 1)
    support = grid_step * np.arange(-k, k + 1)
    fine = _fine_grid(limit, 0.0)
    fine_target = expit(fine)
    best_probs, best_err = np.empty(0), math.inf
    for _ in range(_EXCHANGE_ROUNDS):
        q, t = _solve_lp(x, offsets, sigma)
        probs = _unfold(q)
        err = np.abs(_mixture_cdf(fine, support, probs, sigma) - fine_target)
        if err.max() < best_err:
            best_probs, best_err = probs, float(err.max())
        # below ~1e-10 the LP's own tolerances dominate: refining further only chases noise
        worst = _local_maxima_above(err, t * (1.0 + 1e-4) + 1e-10)
        if worst.size == 0:
            break
        x = np.union1d(x, fine[worst])  # exchange step: add the points where the fine grid beats t
    return _make_table(sigma, support, best_probs, _sup_error(support, best_probs, sigma, limit))


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
    _load_shipped.cache_clear()
    return {t.sigma: t.max_cdf_error for t in tables}


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a`` (cached tables must not be mutated)."""
    out = np.array(a)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=1)
def _load_shipped() -> tuple[CorrectionTable, ...]:
    """The tables in the shipped npz file (empty if the file is missing)."""
    if not SHIPPED_PATH.exists():
        return ()
    with np.load(SHIPPED_PATH) as f:
        return tuple(
            CorrectionTable(
                float(f["sigmas"][i]),
                _readonly(f["support"][i]),
                _readonly(f["probs"][i]),
                float(f["max_cdf_error"][i]),
                _readonly(f["alias_prob"][i]),
                _readonly(f["alias_index"][i].astype(np.int32)),
                True,
            )
            for i in range(f["sigmas"].size)
        )


def _find_shipped(sigma: float) -> CorrectionTable | None:
    """The shipped table whose sigma matches to 1e-9, if any."""
    for table in _load_shipped():
        if abs(table.sigma - sigma) <= _MATCH_TOL:
            return table
    return None


def shipped_sigmas() -> tuple[float, ...]:
    """The ``sigma`` values with a precomputed table."""
    return tuple(t.sigma for t in _load_shipped())


def load_correction(sigma: float) -> CorrectionTable:
    """The shipped table for ``sigma`` if there is one, else a freshly solved one."""
    sigma = _check_sigma(sigma)
    table = _find_shipped(sigma)
    return table if table is not None else solve_correction(sigma)


def correction_error(sigma: float) -> float:
    """Max CDF error of ``N(0, sigma^2) * C_sigma`` against the standard logistic."""
    return load_correction(sigma).max_cdf_error


def largest_sigma_with_error(max_error: float) -> float:
    """Largest shipped ``sigma`` whose max CDF error is at most ``max_error``."""
    bound = _check_positive("max_error", max_error)
    ok = [t.sigma for t in _load_shipped() if t.max_cdf_error <= bound]
    if not ok:
        best = min((t.max_cdf_error for t in _load_shipped()), default=float("nan"))
        raise ValueError(f"max_error={bound!r} is below every shipped table's error (smallest {best:.3g})")
    return max(ok)


# ---------------------------------------------------------------------------------------------
# sampling (JAX)


def make_sampler(table: CorrectionTable) -> CorrectionSampler:
    """Move a table's support and alias arrays to the device."""
    return CorrectionSampler(
        support=jnp.asarray(table.support),
        alias_prob=jnp.asarray(table.alias_prob),
        alias_index=jnp.asarray(table.alias_index, dtype=jnp.int32),
        sigma=float(table.sigma),
    )


def _alias_pick(index: jax.Array, coin: jax.Array, sampler: CorrectionSampler) -> jax.Array:
    """Keep cell ``index`` if ``coin < alias_prob[index]``, else take its alias; return the support point.

    Cells past the support have ``alias_prob = 0``, so they always resolve to their alias.
    """
    chosen = jnp.where(coin < sampler.alias_prob[index].astype(coin.dtype), index, sampler.alias_index[index])
    return sampler.support[chosen]


def sample_correction(key: jax.Array, sampler: CorrectionSampler, shape: tuple[int, ...] = ()) -> jax.Array:
    """Draw ``X_corr ~ C_sigma`` with the alias method (O(1) per draw; jit- and vmap-safe)."""
    k_index, k_coin = jax.random.split(key)
    n = sampler.alias_prob.shape[0]
    index = jax.random.randint(k_index, shape, 0, n, dtype=jnp.int32)
    coin = jax.random.uniform(k_coin, shape, dtype=sampler.alias_prob.dtype)
    return _alias_pick(index, coin, sampler)


def correction_from_uniforms(u_index: jax.Array, u_coin: jax.Array, sampler: CorrectionSampler) -> jax.Array:
    """``X_corr`` from two uniforms on [0, 1): one picks the alias cell, the other flips its coin."""
    n = sampler.alias_prob.shape[0]  # a power of two: floor(u * n) is exactly uniform for float32 u
    index = jnp.clip(jnp.floor(u_index * n).astype(jnp.int32), 0, n - 1)
    return _alias_pick(index, u_coin, sampler)


# ---------------------------------------------------------------------------------------------
# report


def format_correction_report(sigma: float) -> str:
    """A short table describing ``C_sigma``: grid, atoms, max CDF error, variance, shipped or computed."""
    sigma = _check_sigma(sigma)
    table = load_correction(sigma)
    support, probs = np.asarray(table.support), np.asarray(table.probs)
    step = float(support[1] - support[0]) if support.size > 1 else float("nan")
    variance = float(probs @ support**2 - (probs @ support) ** 2)
    theory = math.pi**2 / 3.0 - sigma**2
    source = f"shipped table ({SHIPPED_PATH.name})" if table.shipped else "computed now (LP, not shipped)"
    rows = [
        ("sigma", f"{table.sigma:g}"),
        ("source", source),
        ("support grid", f"[{support[0]:g}, {support[-1]:g}] step {step:g} ({support.size} points)"),
        ("atoms with mass > 0", f"{int(np.count_nonzero(probs > 0))}"),
        ("max CDF error", f"{table.max_cdf_error:.3e}  (sup |N(0,sigma^2)*C_sigma - logistic|, grid step {EVAL_STEP})"),
        ("variance of C_sigma", f"{variance:.6f}"),
        ("pi^2/3 - sigma^2", f"{theory:.6f}  (difference {variance - theory:+.2e})"),
    ]
    if table.max_cdf_error >= SHIP_MAX_ERROR:
        rows.append(("warning", f"error >= {SHIP_MAX_ERROR:g}: too inaccurate to ship; use a smaller sigma"))
    width = max(len(name) for name, _ in rows)
    title = "Correction distribution C_sigma: N(0, sigma^2) + X_corr ~ standard logistic"
    return "\n".join([title] + [f"  {name:<{width}}  {value}" for name, value in rows])


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
