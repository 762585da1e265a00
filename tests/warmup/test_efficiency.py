"""The lag-1 effective-draws estimate used to choose proposals, on Gaussian AR(1) chains with a known answer."""

import numpy as np
import pytest

from minibatch_mcmc.warmup.efficiency import lag1_ess_per_draw


def _ar1(rho: float, chains: int = 8, steps: int = 20_000, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty((chains, steps, d))
    x[:, 0] = rng.standard_normal((chains, d))
    noise = rng.standard_normal((chains, steps, d)) * np.sqrt(1 - rho**2)
    for t in range(1, steps):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x


@pytest.mark.parametrize("rho, expected", [(0.6, 0.4 / 1.6), (-0.6, 0.64 / 1.36), (0.0, 1.0)])
def test_lag1_estimate_on_ar1(rho, expected):
    """A Gaussian AR(1) with lag-1 correlation rho: the draws give (1 - rho) / (1 + rho), their squares rho^2; the
    minimum of the two is the answer (with rho < 0 it is the squares', which an antithetic move cannot flatter).
    160,000 draws: the estimate's s.e. is below 0.01, so 0.03 catches using the wrong one of the two."""
    assert abs(lag1_ess_per_draw(_ar1(rho)) - expected) < 0.03
