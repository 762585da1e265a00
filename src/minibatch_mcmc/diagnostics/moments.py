"""Compare posterior mean and variance estimates with known values, with ESS-based standard errors."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np


class MomentCheck(NamedTuple):
    """Estimated and exact mean/variance per coordinate, with Monte Carlo standard errors."""

    mean: np.ndarray
    var: np.ndarray
    exact_mean: np.ndarray
    exact_var: np.ndarray
    ess: np.ndarray
    se_mean: np.ndarray
    se_var: np.ndarray

    def z_mean(self) -> np.ndarray:
        """Standardised error of the mean estimates."""
        return (self.mean - self.exact_mean) / self.se_mean

    def z_var(self) -> np.ndarray:
        """Standardised error of the variance estimates."""
        return (self.var - self.exact_var) / self.se_var


def check_moments(draws: np.ndarray, exact_mean: np.ndarray, exact_var: np.ndarray) -> MomentCheck:
    """Moments of ``draws`` shaped ``(chain, draw, d)`` against exact values, with ArviZ ESS-based standard errors.

    ``se_mean = sqrt(var / ess_mean)`` and ``se_var = sd((x - mu)^2) / sqrt(ess_sq)``, both from ArviZ's ESS of
    the *mean* (``method="mean"``) of ``x`` and of its squared deviations. Not the rank-normalised bulk ESS
    (``ess``, reported for ESS thresholds): a skewed or heavy-tailed quantity is visited in long tail
    excursions that rank normalisation flattens, so the bulk ESS overstates the precision of its mean
    (by how much on the rare-category logistic posterior: docs/notes-on-the-papers.md).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

    x = np.asarray(draws, float)
    if x.ndim == 2:
        x = x[..., None]
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chain, draw, d); got {x.shape}")
    mu = np.asarray(exact_mean, float).reshape(-1)
    v = np.asarray(exact_var, float) * np.ones(x.shape[-1])
    mean = x.mean(axis=(0, 1))
    var = x.var(axis=(0, 1))
    ess = np.array([float(az.ess(x[..., j], method="bulk")) for j in range(x.shape[-1])])
    sq = (x - mu) ** 2
    ess_sq = np.array([float(az.ess(sq[..., j], method="mean")) for j in range(x.shape[-1])])
    ess_mean = np.array([float(az.ess(x[..., j], method="mean")) for j in range(x.shape[-1])])
    se_mean = np.sqrt(v / ess_mean)
    se_var = sq.reshape(-1, x.shape[-1]).std(axis=0) / np.sqrt(ess_sq)
    return MomentCheck(mean, var, mu, v, ess, se_mean, se_var)
