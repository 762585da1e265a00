"""Shared checks of correction tables: an independent error measurement and the masses an alias table samples."""

import numpy as np
from scipy import stats
from scipy.special import ndtr

from minibatch_mcmc.acceptance.correction import CorrectionTable, shipped_tables


def independent_error(table: CorrectionTable) -> float:
    """Sup CDF error re-measured with scipy on a grid offset from (and finer than) the module's (``ndtr`` is what
    ``stats.norm.cdf`` computes, without its argument checks: 2-3x faster on these 24,000 x atoms arrays)."""
    x = np.arange(-45.0, 45.0, 0.0037) + 0.0011
    keep = table.probs > 0
    y, p = table.support[keep], table.probs[keep]
    cdf = np.concatenate([ndtr((xx[:, None] - y[None, :]) / table.sigma) @ p for xx in np.array_split(x, 8)])
    return float(np.max(np.abs(cdf - stats.logistic.cdf(x))))


def shipped_sigmas() -> tuple[float, ...]:
    """The ``sigma`` values with a table in the package."""
    return tuple(t.sigma for t in shipped_tables())


def implied_alias_probs(alias_prob: np.ndarray, alias_index: np.ndarray, n_atoms: int) -> np.ndarray:
    """The distribution over ``n_atoms`` atoms that an alias table (possibly padded) samples."""
    n_cells = alias_prob.size
    out = np.zeros(max(n_cells, n_atoms))
    out[:n_cells] += alias_prob
    np.add.at(out, alias_index, 1.0 - alias_prob)
    assert np.all(out[n_atoms:] == 0)
    return out[:n_atoms] / n_cells
