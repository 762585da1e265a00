"""A 2-parameter logistic regression with an intercept and its posterior by quadrature (float64), for tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit, gammaln, log_ndtr
from scipy.stats import t as student_t

from minibatch_mcmc.models import make_glm_data

PRECISION = 3.0
"""Noise precision of the Gaussian family in the GLM tests."""
NU_T, SIGMA_T = 3.0, 0.7
"""Degrees of freedom and scale of the Student-t family in the GLM tests."""


def family_settings(family: str) -> dict:
    """``glm_proxy``'s ``precision`` (and ``nu``) for ``family`` in the GLM tests."""
    if family == "student_t":
        return {"precision": SIGMA_T**-2, "nu": NU_T}
    return {"precision": PRECISION}


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
        return y @ z.T - np.exp(z).sum(1)
    return y @ z.T - (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))).sum(1)  # y z - log(1 + e^z), one exp per point


def glm_quadrature(data: dict, prior_scale: float, points: int = 31, family: str = "logistic"):
    """Posterior mean and variance on a ``points x points`` grid of +-7 Laplace s.d. around the Newton mode,
    with the mode and the Laplace covariance (prior N(0, prior_scale^2) on both coefficients; ``family``:
    ``"logistic"`` or ``"poisson"`` with log link). The grid's spacing, 0.47 s.d. at 31 points, is fine enough: the
    trapezoid rule on a smooth, nearly Gaussian density converges faster than any power of the spacing, so the error is
    the +-7 s.d. cut's. On the tests' posteriors (5,000 logistic rows at seeds 8 and 21, 5,000 Poisson rows, 100,000
    logistic rows) the moments agree with a 151-point grid's to 4e-11 s.d. (means) and 3e-10 (variances), as 61 points'
    did (2e-11 and 1e-10), at a thirtieth of 61 points' time on 5,000 rows (1.0 -> 0.03 CPU s)."""
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


def mills(z):
    """The inverse Mills ratio ``phi(z) / Phi(z)`` in float64."""
    return np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - log_ndtr(z))


def f64(family, eta, y):
    """``(f, f', f'')`` of the family's log-likelihood in float64."""
    if family == "logistic":
        p = expit(eta)
        return y * eta - np.logaddexp(0.0, eta), y - p, -p * (1 - p)
    if family == "probit":
        s = 2 * y - 1
        lam = mills(s * eta)
        return log_ndtr(s * eta), s * lam, -lam * (s * eta + lam)
    if family == "poisson":
        return y * eta - np.exp(eta) - gammaln(y + 1), y - np.exp(eta), -np.exp(eta)
    if family == "student_t":  # scipy's log density; derivatives of -(nu+1)/2 log(1 + e^2/(nu s^2)) by hand
        e, v = y - eta, NU_T * SIGMA_T**2
        return (
            student_t.logpdf(y, NU_T, loc=eta, scale=SIGMA_T),
            (NU_T + 1) * e / (v + e * e),
            (NU_T + 1) * (e * e - v) / (v + e * e) ** 2,
        )
    return -0.5 * PRECISION * (y - eta) ** 2, PRECISION * (y - eta), -PRECISION * np.ones_like(eta)


def residual_reference(family, data, centre, t0, t1, order):
    """``l_i(t1) - l_i(t0) - q_i`` in float64."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    off = np.asarray(data["offset"], np.float64) if "offset" in data else 0.0
    c, a0, a1 = (np.asarray(v, np.float64) for v in (centre, t0, t1))
    eta_c, e0, e1 = x @ c + off, x @ a0 + off, x @ a1 + off
    f0, f1 = f64(family, e0, y)[0], f64(family, e1, y)[0]
    _, g, h = f64(family, eta_c, y)
    q = g * (e1 - e0) + (0.5 * h * ((e1 - eta_c) ** 2 - (e0 - eta_c) ** 2) if order == 2 else 0.0)
    return f1 - f0 - q


def make_family_data(family, n=400, d=3, seed=0):
    """``make_glm_data`` for ``family`` (Gaussian: linear responses with precision ``PRECISION``; Student-t: linear
    responses with ``NU_T``, ``SIGMA_T`` noise; Poisson: an offset)."""
    data, theta = make_glm_data(
        jax.random.key(seed), n, d, "logistic" if family in ("gaussian", "student_t") else family
    )
    if family == "student_t":
        noise = SIGMA_T * np.random.default_rng(seed + 1).standard_t(NU_T, n).astype(np.float32)
        data = {"x": data["x"], "y": data["x"] @ theta + noise}
    if family == "gaussian":
        noise = jax.random.normal(jax.random.key(seed + 1), (n,)) / np.sqrt(PRECISION)
        data = {"x": data["x"], "y": data["x"] @ theta + noise}
    if family == "poisson":
        data["offset"] = jnp.asarray(np.random.default_rng(seed).uniform(-0.5, 0.5, n), jnp.float32)
    return data, np.asarray(theta, np.float32)
