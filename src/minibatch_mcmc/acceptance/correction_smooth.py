"""Correction tables for a ``sigma`` without a shipped table, derived from a shipped one in milliseconds.

If ``N(0, S^2) * C_S`` is close to the standard logistic, then so is
``N(0, sigma^2) * [N(0, S^2 - sigma^2) * C_S]`` for any ``sigma < S``, with *the same* error: the two
Gaussians add up to ``N(0, S^2)``. So ``C_sigma = C_S`` smoothed by ``N(0, v)``, ``v = S^2 - sigma^2``,
where ``S`` is the nearest shipped ``sigma`` above. The Gaussian is discretised on a lattice fine
enough that ``N(0, sigma^2)`` blurs it away (step at most half of ``sqrt(v)`` and of ``sigma``), so the
result stays a table of point masses that the alias sampler draws exactly; its error is measured on
the fine grid like every other table's. No linear programme is solved at run time.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from minibatch_mcmc.acceptance.correction import (
    SIGMA_MIN,
    CorrectionTable,
    check_sigma,
    shipped_tables,
)
from minibatch_mcmc.acceptance.correction_lp import make_table, measured_error

SMOOTHING_MIN_SD = 0.025
"""Smallest s.d. ``sqrt(S^2 - sigma^2)`` of the smoothing Gaussian; closer to ``S``, the next shipped table is used."""

GAUSS_TAIL_SDS = 8.0
"""The discrete Gaussian is cut at this many s.d. (mass beyond: about 1e-15)."""


def smoothing_source(sigma: float) -> CorrectionTable:
    """The shipped table ``C_S`` that ``C_sigma`` is derived from: the smallest ``S`` with ``S^2 - sigma^2 >= SMOOTHING_MIN_SD^2``."""
    sigma = check_sigma(sigma)
    usable = [t for t in shipped_tables() if t.sigma**2 - sigma**2 >= SMOOTHING_MIN_SD**2 - 1e-15]
    if not usable:
        top = max((t.sigma for t in shipped_tables()), default=float("nan"))
        limit = math.sqrt(max(top**2 - SMOOTHING_MIN_SD**2, 0.0))
        raise ValueError(
            f"sigma={sigma!r} has no correction table: the largest shipped sigma is {top:g}, a table for a smaller "
            f"sigma is derived from a larger one (so sigma <= {limit:.6g} or a shipped value), and above it the "
            "correction's error exceeds 1e-2 (at sigma=1.8 the LP's correction collapses to one atom, CDF error 2e-2)"
        )
    return min(usable, key=lambda t: t.sigma)


def discrete_gaussian(sd: float, step: float) -> np.ndarray:
    """Masses ``~ exp(-(j step)^2 / (2 sd^2))`` on ``j = -J..J`` (``J step >= GAUSS_TAIL_SDS sd``), summing to one."""
    half = int(math.ceil(GAUSS_TAIL_SDS * sd / step))
    j = np.arange(-half, half + 1, dtype=np.float64)
    p = np.exp(-0.5 * (j * step / sd) ** 2)
    return p / p.sum()


def _refinement(lattice: float, sd: float, sigma: float) -> int:
    """Integer ``m`` so that the lattice ``lattice / m`` is at most half of ``sd`` and of ``sigma``."""
    return max(1, int(math.ceil(2.0 * lattice / min(sd, sigma) - 1e-9)))


def _trim(support: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the symmetric ends of the grid that carry no mass."""
    centre = support.size // 2
    reach = int(np.max(np.abs(np.flatnonzero(probs > 0) - centre)))
    keep = slice(centre - reach, centre + reach + 1)
    return support[keep], probs[keep]


@functools.lru_cache(maxsize=32)
def smoothed_correction(sigma: float) -> CorrectionTable:
    """``C_sigma`` as a shipped ``C_S`` convolved with a discrete ``N(0, S^2 - sigma^2)``, error measured."""
    sigma = check_sigma(sigma)
    if sigma < SIGMA_MIN:
        raise ValueError(f"sigma={sigma!r} is below SIGMA_MIN={SIGMA_MIN}")
    source = smoothing_source(sigma)
    sd = math.sqrt(source.sigma**2 - sigma**2)
    lattice = float(source.support[1] - source.support[0])
    m = _refinement(lattice, sd, sigma)
    step = lattice / m
    upsampled = np.zeros((source.support.size - 1) * m + 1)
    upsampled[::m] = source.probs
    probs = np.convolve(upsampled, discrete_gaussian(sd, step))
    half = probs.size // 2
    support, probs = _trim(step * np.arange(-half, half + 1), probs / probs.sum())
    error = measured_error(support, probs, sigma)
    return make_table(sigma, support, probs, error, derived_from=source.sigma)
