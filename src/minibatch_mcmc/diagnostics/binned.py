"""Sample-quality metrics against a posterior known on a grid (Seita et al. Appendix B.2.2).

Samples are binned on a 2-D grid whose bin probabilities ``P_j`` come from the exact posterior.
Equation 40 of the paper scores the counts ``c_j`` of ``n`` samples under independent Poissons with
means ``n P_j``; a chi-squared statistic compares counts with expected counts. Both treat draws
as independent, which MCMC draws are not, so they are relative scores, not calibrated tests.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special, stats

from minibatch_mcmc.checks import check_int


class GridPosterior(NamedTuple):
    """Bin edges on two axes and the exact probability of each bin (shape ``(n1, n2)``, sums to 1)."""

    edges1: np.ndarray
    edges2: np.ndarray
    probs: np.ndarray


def grid_posterior(log_density, edges1: np.ndarray, edges2: np.ndarray, refine: int = 4) -> GridPosterior:
    """Bin probabilities from an unnormalised log density ``log_density(t1, t2) -> (len(t1), len(t2))``.

    Each bin's mass is the midpoint rule on a ``refine x refine`` sub-grid.
    """
    e1, e2 = np.asarray(edges1, float), np.asarray(edges2, float)
    if e1.ndim != 1 or e2.ndim != 1 or e1.size < 2 or e2.size < 2:
        raise ValueError("edges1 and edges2 must be 1-D arrays with at least two edges")
    refine = check_int(refine, "refine", low=1, why="sub-grid points per bin and axis")

    def sub(e: np.ndarray) -> np.ndarray:
        w = np.diff(e)
        frac = (np.arange(refine) + 0.5) / refine
        return (e[:-1, None] + w[:, None] * frac[None, :]).reshape(-1)

    lp = np.asarray(log_density(sub(e1), sub(e2)), float)
    lp = lp - lp.max()
    dens = np.exp(lp) * np.outer(np.repeat(np.diff(e1) / refine, refine), np.repeat(np.diff(e2) / refine, refine))
    mass = dens.reshape(e1.size - 1, refine, e2.size - 1, refine).sum(axis=(1, 3))
    return GridPosterior(e1, e2, mass / mass.sum())


def bin_counts(samples: np.ndarray, grid: GridPosterior) -> np.ndarray:
    """Counts of 2-D samples ``(n, 2)`` in the grid's bins (samples outside are dropped)."""
    s = np.asarray(samples, float).reshape(-1, 2)
    counts, _, _ = np.histogram2d(s[:, 0], s[:, 1], bins=[grid.edges1, grid.edges2])
    return counts


def poisson_log_likelihood(samples: np.ndarray, grid: GridPosterior) -> float:
    """Equation 40: ``sum_j c_j log(n P_j) - n P_j - log Gamma(c_j + 1)`` over the grid's bins."""
    c = bin_counts(samples, grid).ravel()
    n = float(np.asarray(samples).reshape(-1, 2).shape[0])
    lam = np.maximum(n * grid.probs.ravel(), 1e-300)
    return float(np.sum(c * np.log(lam) - lam - special.gammaln(c + 1.0)))


class ChiSquared(NamedTuple):
    """Pearson chi-squared statistic, its degrees of freedom and the nominal (i.i.d.) p-value."""

    statistic: float
    dof: int
    p_value: float


def chi_squared(samples: np.ndarray, grid: GridPosterior, min_expected: float = 5.0) -> ChiSquared:
    """Pearson statistic over bins with expected count >= ``min_expected`` (the rest pooled into one bin)."""
    c = bin_counts(samples, grid).ravel()
    n = float(np.asarray(samples).reshape(-1, 2).shape[0])
    e = n * grid.probs.ravel()
    big = e >= min_expected
    obs = np.append(c[big], c[~big].sum() + (n - c.sum()))
    exp = np.append(e[big], e[~big].sum())
    keep = exp > 0
    stat = float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep]))
    dof = int(keep.sum() - 1)
    return ChiSquared(stat, dof, float(stats.chi2.sf(stat, dof)) if dof > 0 else float("nan"))
