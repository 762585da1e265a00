"""Gaussian random-walk and Gaussian independence proposals over pytree parameters."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.proposals.base import Proposal

PyTree = Any


def _cholesky(cov: Any, name: str) -> np.ndarray:
    """Validated lower Cholesky factor of a symmetric positive-definite matrix."""
    c = np.asarray(cov, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"{name} must be a square matrix; got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"{name} contains NaN or inf")
    if not np.allclose(c, c.T, rtol=1e-8, atol=1e-12):
        raise ValueError(f"{name} must be symmetric")
    try:
        return np.linalg.cholesky(c)
    except np.linalg.LinAlgError as err:
        raise ValueError(f"{name} must be positive definite (Cholesky failed): {err}") from None


def _scale_factor(scale: Any, cov: Any, name: str) -> tuple[str, Any]:
    """Turn ``scale`` (scalar or per-coordinate s.d.) or ``cov`` (full covariance) into a factor."""
    if (scale is None) == (cov is None):
        raise ValueError(f"{name}: give exactly one of scale (standard deviation) or cov (covariance matrix)")
    if cov is not None:
        return "chol", _cholesky(cov, f"{name} cov")
    s = np.asarray(scale, dtype=np.float64)
    if s.ndim > 1 or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"{name} scale={scale!r} must be a positive finite scalar or 1-D vector of standard deviations")
    return "diag", s


def _apply(kind: str, factor: Any, z: jax.Array) -> jax.Array:
    """Multiply standard-normal noise by the proposal's scale factor."""
    f = jnp.asarray(factor, dtype=z.dtype)
    return f @ z if kind == "chol" else f * z


def _check_dim(kind: str, factor: Any, d: int, name: str) -> None:
    """The factor must match the flattened parameter dimension."""
    size = factor.shape[0] if (kind == "chol" or np.ndim(factor) == 1) else d
    if size != d:
        raise ValueError(f"{name}: covariance/scale has dimension {size} but the parameter has {d} elements")


def random_walk(scale: Any = None, cov: Any = None) -> Proposal:
    """Symmetric Gaussian random walk ``theta' = theta + L z``; give s.d. ``scale`` or covariance ``cov``.

    The paper's "covariance 0.15 I" is ``random_walk(cov=0.15 * np.eye(2))`` or ``scale=sqrt(0.15)``.
    """
    kind, factor = _scale_factor(scale, cov, "random_walk")

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        _check_dim(kind, factor, flat.size, "random_walk")
        z = jax.random.normal(key, flat.shape, flat.dtype)
        return unravel(flat + _apply(kind, factor, z)), jnp.zeros((), flat.dtype)

    return Proposal(sample=sample, symmetric=True, name="random_walk")


def independence_gaussian(mean: Any, scale: Any = None, cov: Any = None) -> Proposal:
    """Asymmetric independence proposal ``theta' ~ N(mean, cov)``, reporting its ``log q`` ratio."""
    kind, factor = _scale_factor(scale, cov, "independence_gaussian")
    mu = np.asarray(mean, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(mu)):
        raise ValueError(f"independence_gaussian mean has NaN or inf: {mean!r}")
    if kind == "chol":
        inv = np.linalg.inv(factor)
    else:
        inv = 1.0 / factor

    def log_q(flat: jax.Array) -> jax.Array:
        r = flat - jnp.asarray(mu, flat.dtype)
        w = jnp.asarray(inv, flat.dtype) @ r if kind == "chol" else jnp.asarray(inv, flat.dtype) * r
        return -0.5 * jnp.sum(w * w)

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        _check_dim(kind, factor, flat.size, "independence_gaussian")
        if mu.size != flat.size:
            raise ValueError(f"independence_gaussian mean has {mu.size} elements but the parameter has {flat.size}")
        z = jax.random.normal(key, flat.shape, flat.dtype)
        new = jnp.asarray(mu, flat.dtype) + _apply(kind, factor, z)
        return unravel(new), log_q(flat) - log_q(new)

    return Proposal(sample=sample, symmetric=False, name="independence_gaussian")
