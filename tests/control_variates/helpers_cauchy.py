"""The issue-19 case in small: ``theta = (a, b)``, most rows ``x ~ N(b, 1)``, five rows ``x ~ Cauchy(a, 1)``, prior N(0, 10^2)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.models.base import Model, gaussian_prior

CAUCHY_X = np.array([-3.0, -1.0, 0.2, 1.5, 4.0])
"""The five Cauchy rows' values: spread so that the posterior of ``a`` is far from its Laplace approximation."""
PRIOR_SCALE = 10.0


def cauchy_rows_model() -> Model:
    """Per row: ``log Cauchy(x | a, 1)`` where ``cauchy == 1``, else ``log N(x | b, 1)``."""

    def log_lik(theta, batch):
        x, c = batch["x"], batch["cauchy"]
        lc = -jnp.log1p((x - theta[0]) ** 2) - jnp.log(jnp.pi)
        ln = -0.5 * (x - theta[1]) ** 2 - 0.5 * jnp.log(2 * jnp.pi)
        return jnp.where(c > 0, lc, ln)

    return Model(gaussian_prior(0.0, PRIOR_SCALE), log_lik, "cauchy_rows")


def cauchy_rows_data(n: int, seed: int = 0) -> tuple[dict, np.ndarray]:
    """``n`` rows (float32), the Cauchy ones at evenly spaced indices; returns the data and those indices."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) + 0.5
    idx = np.arange(CAUCHY_X.size) * (n // CAUCHY_X.size) + min(7, n // CAUCHY_X.size - 1)
    x[idx] = CAUCHY_X
    c = np.zeros(n, np.float32)
    c[idx] = 1.0
    return {"x": x.astype(np.float32), "cauchy": c}, idx


def posterior_a(grid_points: int = 400_001) -> tuple[float, float]:
    """Mean and s.d. of ``a`` by quadrature in float64 (``a`` is independent of ``b`` a posteriori)."""
    g = np.linspace(-60.0, 60.0, grid_points)
    lp = -0.5 * (g / PRIOR_SCALE) ** 2 - np.sum(np.log1p((CAUCHY_X[:, None] - g[None, :]) ** 2), axis=0)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    mean = float(g @ p)
    return mean, float(np.sqrt(((g - mean) ** 2) @ p))


def mode_and_factor(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """The posterior mode and the Laplace Cholesky factor, by Newton in float64 numpy (independent of the library)."""
    x, c = np.asarray(data["x"], np.float64), np.asarray(data["cauchy"]) > 0
    xn, xc = x[~c], x[c]
    b = xn.sum() / (xn.size + PRIOR_SCALE**-2)
    a = float(np.median(xc))
    for _ in range(100):
        r = xc - a
        g = np.sum(2 * r / (1 + r**2)) - a / PRIOR_SCALE**2
        h = np.sum(2 * (r**2 - 1) / (1 + r**2) ** 2) - PRIOR_SCALE**-2
        a -= g / h
    r = xc - a
    h_a = np.sum(2 * (r**2 - 1) / (1 + r**2) ** 2) - PRIOR_SCALE**-2
    h_b = -(xn.size + PRIOR_SCALE**-2)
    return np.array([a, b]), np.diag([1 / np.sqrt(-h_a), 1 / np.sqrt(-h_b)])
