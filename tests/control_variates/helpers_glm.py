"""A 2-parameter logistic regression with an intercept and its posterior by quadrature (float64), for tests."""

from __future__ import annotations

import numpy as np


def glm_data(n: int, theta: tuple[float, float], seed: int) -> dict:
    """``x_i = (1, z_i)`` with standard normal ``z_i`` and ``y_i ~ Bernoulli(sigmoid(x_i . theta))``, float32/int32."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal(n)]).astype(np.float32)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x @ np.asarray(theta))))).astype(np.int32)
    return {"x": x, "y": y}


def poisson_data(n: int, theta: tuple[float, float], seed: int) -> dict:
    """``x_i = (1, z_i)`` with standard normal ``z_i`` and ``y_i ~ Poisson(exp(x_i . theta))``, float32/int32."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal(n)]).astype(np.float32)
    return {"x": x, "y": rng.poisson(np.exp(x @ np.asarray(theta))).astype(np.int32)}


def log_lik_rows(thetas: np.ndarray, x: np.ndarray, y: np.ndarray, family: str = "logistic") -> np.ndarray:
    """Full-data log-likelihood at each of a few parameter values, a block of the grid at a time (Poisson: up to
    the constant ``-sum log y_i!``)."""
    z = thetas @ x.T
    if family == "poisson":
        return (y * z - np.exp(z)).sum(1)
    return (y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z)).sum(1)


def glm_quadrature(data: dict, prior_scale: float, points: int = 151, family: str = "logistic"):
    """Posterior mean and variance on a ``points x points`` grid of +-7 Laplace s.d. around the Newton mode,
    with the mode and the Laplace covariance (prior N(0, prior_scale^2) on both coefficients; ``family``:
    ``"logistic"`` or ``"poisson"`` with log link)."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    th = np.zeros(2)
    for _ in range(30):
        p = np.exp(x @ th) if family == "poisson" else 1 / (1 + np.exp(-x @ th))
        h = -(x.T * (p if family == "poisson" else p * (1 - p))) @ x - np.eye(2) / prior_scale**2
        th = th - np.linalg.solve(h, x.T @ (y - p) - th / prior_scale**2)
    cov = np.linalg.inv(-h)
    half = 7 * np.sqrt(np.diag(cov))
    axes = [np.linspace(th[j] - half[j], th[j] + half[j], points) for j in range(2)]
    grid = np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], 1)
    log_lik = np.concatenate([log_lik_rows(rows, x, y, family) for rows in np.array_split(grid, points)])
    logp = log_lik - 0.5 * (grid**2).sum(1) / prior_scale**2
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ grid
    return mean, w @ (grid - mean) ** 2, th, cov
