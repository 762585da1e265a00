"""The correction distribution ``C_sigma`` of MHminibatch (Seita et al. 2017, Section 4): the runtime part.

``C_sigma`` is a discrete distribution (point masses on a symmetric grid) chosen so that
``N(0, sigma^2) * C_sigma`` is as close as possible, in the sup norm of the CDF, to the standard
logistic distribution. Tables for common ``sigma`` ship with the package and are loaded here; others
are derived from the nearest larger shipped table by Gaussian smoothing
(:mod:`minibatch_mcmc.acceptance.correction_smooth`, imported only then; no LP is solved at run time).
Draws use Vose's alias method: O(1) per draw, usable under ``jit`` and ``vmap``.
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_positive, check_real

LOGISTIC_SD = math.pi / math.sqrt(3)
"""Standard deviation of the standard logistic distribution: the upper limit on ``sigma``."""

SHIP_MAX_ERROR = 1e-2
"""A table is shipped only if its max CDF error is below this."""

MAX_CORRECTION_ERROR = 1e-3
"""Above this max CDF error ``mh_minibatch`` warns (the paper's own table reached 8.9e-4 at ``sigma = 1``)."""

SIGMA_MIN = 0.1
"""Smallest ``sigma`` with a correction table at run time (reason in ``SIGMA_MIN_REASON``)."""

SIGMA_MIN_REASON = (
    "the tables are point masses on a lattice of step 0.1 that N(0, sigma^2) must blur (lattice error about "
    "exp(-2 pi^2 sigma^2 / 0.1^2): 3e-9 at sigma=0.1, 7e-3 at sigma=0.05); a finer lattice needs a new LP whose "
    "grid step scales with sigma, so its memory and time grow like 1/sigma^2 (sigma=0.02 took 67 s and 1.5 GB "
    "for an error of 3.6e-3, sigma=1e-3 passed 16 GB)"
)
"""Why ``sigma`` below ``SIGMA_MIN`` is refused."""

EVAL_STEP = 0.005
"""Step of the fine grid on which ``max_cdf_error`` is measured."""

SHIPPED_PATH = Path(__file__).resolve().parent / "tables" / "correction_tables.npz"
"""Where the precomputed tables live."""

SKEW_PATH = Path(__file__).resolve().parent / "tables" / "skew_correction_tables.npz"
"""Where the skew-corrected tables ``C_{sigma,kappa}`` live (built by ``correction_skew_lp``)."""

_MATCH_TOL = 1e-9
_SIGMA_LIMIT = (
    f"pi/sqrt(3) = {LOGISTIC_SD:.6f} is the standard deviation of the standard logistic distribution; "
    "the correction needs the leftover variance pi^2/3 - sigma^2 > 0"
)


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
    derived_from: float | None = None


class CorrectionSampler(NamedTuple):
    """Device arrays of a :class:`CorrectionTable` for O(1) draws in JAX."""

    support: jax.Array
    alias_prob: jax.Array
    alias_index: jax.Array
    sigma: float


def check_sigma(sigma: object) -> float:
    """``sigma`` as a float if it is a finite number with ``0 < sigma < pi/sqrt(3)``, else a ValueError naming it."""
    real = isinstance(sigma, numbers.Real) and not isinstance(sigma, (bool, np.bool_))
    return check_real(
        float(sigma) if real else sigma, "sigma", 0.0, LOGISTIC_SD, low_open=True, high_open=True, why=_SIGMA_LIMIT
    )


def alias_cells(n_atoms: int) -> int:
    """Number of alias cells: the next power of two, so a float32 uniform picks a cell exactly uniformly."""
    return 1 << max(0, int(n_atoms) - 1).bit_length()


# ---------------------------------------------------------------------------------------------
# shipped tables


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a`` (cached tables must not be mutated)."""
    out = np.array(a)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=1)
def shipped_tables() -> tuple[CorrectionTable, ...]:
    """The tables in the shipped npz file (empty if the file is missing); cached, cleared by the table builder."""
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
    for table in shipped_tables():
        if abs(table.sigma - sigma) <= _MATCH_TOL:
            return table
    return None


def load_correction(sigma: float) -> CorrectionTable:
    """The shipped table for ``sigma`` if there is one, else one derived from the next larger shipped table."""
    sigma = check_sigma(sigma)
    table = _find_shipped(sigma)
    if table is not None:
        return table
    check_real(sigma, "sigma", SIGMA_MIN, allowed=f"at least {SIGMA_MIN} (SIGMA_MIN)", why=SIGMA_MIN_REASON)
    from minibatch_mcmc.acceptance.correction_smooth import smoothed_correction  # scipy only when needed

    return smoothed_correction(sigma)


def warn_if_inaccurate(table: CorrectionTable) -> None:
    """A ``UserWarning`` naming ``sigma`` and the CDF error if the table's error exceeds ``MAX_CORRECTION_ERROR``."""
    if table.max_cdf_error > MAX_CORRECTION_ERROR:
        warnings.warn(
            f"sigma={table.sigma!r}: the correction distribution's max CDF error is {table.max_cdf_error:.2e}, above "
            f"{MAX_CORRECTION_ERROR:g} (MAX_CORRECTION_ERROR); every acceptance probability may be off by that much. "
            f"sigma <= {largest_sigma_with_error(MAX_CORRECTION_ERROR):g} stays below it",
            UserWarning,
            stacklevel=3,
        )


def correction_error(sigma: float) -> float:
    """Max CDF error of ``N(0, sigma^2) * C_sigma`` against the standard logistic."""
    return load_correction(sigma).max_cdf_error


def largest_sigma_with_error(max_error: float) -> float:
    """Largest shipped ``sigma`` whose max CDF error is at most ``max_error``."""
    bound = check_positive(max_error, "max_error")
    ok = [t.sigma for t in shipped_tables() if t.max_cdf_error <= bound]
    if not ok:
        best = min((t.max_cdf_error for t in shipped_tables()), default=float("nan"))
        raise ValueError(f"max_error={bound!r} is below every shipped table's error (smallest {best:.3g})")
    return max(ok)


class SkewCorrectionTable(NamedTuple):
    """Rows ``probs[r]`` of ``C_{sigma,kappa}`` at ``kappa = kappas[r]`` (``kappa >= 0``) on one support, with alias arrays."""

    sigma: float
    kappas: np.ndarray
    support: np.ndarray
    probs: np.ndarray
    alias_prob: np.ndarray
    alias_index: np.ndarray
    max_cdf_error: float
    """Largest CDF error of any row and of any two-row mixture, against the standard logistic."""


@functools.lru_cache(maxsize=1)
def skew_tables() -> tuple[SkewCorrectionTable, ...]:
    """The skew tables in the shipped npz file (empty if it is missing); cached, cleared by their builder."""
    if not SKEW_PATH.exists():
        return ()
    with np.load(SKEW_PATH) as f:
        arrays = [_readonly(f[k]) for k in ("kappas", "support", "probs", "alias_prob")]
        index = _readonly(f["alias_index"].astype(np.int32))
        return (SkewCorrectionTable(float(f["sigma"]), *arrays, index, float(f["max_cdf_error"])),)


def load_skew_correction(sigma: float) -> SkewCorrectionTable:
    """The shipped skew table for ``sigma``; a ValueError naming ``sigma`` and the tabulated values if there is none."""
    sigma = check_sigma(sigma)
    for table in skew_tables():
        if abs(table.sigma - sigma) <= _MATCH_TOL:
            return table
    have = [t.sigma for t in skew_tables()]
    raise ValueError(f"sigma={sigma!r} has no skew-corrected table; tabulated: {have} (built by correction_skew_lp)")


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
    sigma = check_sigma(sigma)
    table = load_correction(sigma)
    support, probs = np.asarray(table.support), np.asarray(table.probs)
    step = float(support[1] - support[0]) if support.size > 1 else float("nan")
    variance = float(probs @ support**2 - (probs @ support) ** 2)
    theory = math.pi**2 / 3.0 - sigma**2
    source = f"shipped table ({SHIPPED_PATH.name})" if table.shipped else "computed now (LP, not shipped)"
    if table.derived_from is not None:
        source = f"computed now: the shipped table at sigma={table.derived_from:g} smoothed by N(0, {table.derived_from**2 - sigma**2:.4g})"
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
    elif table.max_cdf_error > MAX_CORRECTION_ERROR:
        rows.append(("warning", f"error > {MAX_CORRECTION_ERROR:g}: mh_minibatch warns; use a smaller sigma"))
    width = max(len(name) for name, _ in rows)
    title = "Correction distribution C_sigma: N(0, sigma^2) + X_corr ~ standard logistic"
    return "\n".join([title] + [f"  {name:<{width}}  {value}" for name, value in rows])
