"""Gaussian random-walk proposals and Gaussian or multivariate-t independence proposals over pytree parameters."""

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
        raise ValueError(
            f"{name} scale={scale!r} must be a positive finite scalar or 1-D vector of standard deviations"
        )
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

    Args:
        scale: The step's s.d.: a scalar, or one per coordinate of the flattened parameter.
        cov: The step's covariance matrix, instead of ``scale``.
    """
    kind, factor = _scale_factor(scale, cov, "random_walk")

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        _check_dim(kind, factor, flat.size, "random_walk")
        z = jax.random.normal(key, flat.shape, flat.dtype)
        return unravel(flat + _apply(kind, factor, z)), jnp.zeros((), flat.dtype)

    return Proposal(sample=sample, symmetric=True, name="random_walk")


def independence_gaussian(mean: Any, scale: Any = None, cov: Any = None) -> Proposal:
    """Asymmetric independence proposal ``theta' ~ N(mean, cov)``, reporting its ``log q`` ratio.

    Args:
        mean: The proposal's mean (flattened like the parameter).
        scale: Its s.d.: a scalar or one per coordinate (give ``scale`` or ``cov``).
        cov: Its covariance matrix.
    """
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


def independence_t(mean: Any, cov: Any, df: float, scale: float = 1.0) -> Proposal:
    """Independence proposal ``theta' ~ t_df(mean, scale^2 cov)`` (multivariate t), reporting its ``log q`` ratio.

    Heavier tails than the Gaussian: ``q`` dominates any target whose tails are no heavier than ``t_df``'s,
    so a chain in the tails is not stuck as it can be under a Gaussian independence proposal.
    ``theta' = mean + scale L z / sqrt(w)``, ``z ~ N(0, I)``, ``w ~ chi2_df / df``; ``log q(x) =
    -(df + d) / 2 * log(1 + r' (scale^2 cov)^{-1} r / df)`` up to a constant, ``r = x - mean``.

    Args:
        mean: The proposal's centre (flattened like the parameter).
        cov: Its scale matrix (the covariance of the Gaussian it widens).
        df: Degrees of freedom (> 0).
        scale: A factor on ``cov``'s square root.
    """
    nu = float(df)
    if not np.isfinite(nu) or nu <= 0:
        raise ValueError(f"independence_t df={df!r} must be a positive finite number of degrees of freedom")
    s = float(scale)
    if not np.isfinite(s) or s <= 0:
        raise ValueError(f"independence_t scale={scale!r} must be a positive finite number")
    factor = s * _cholesky(cov, "independence_t cov")
    inv = np.linalg.inv(factor)
    mu = np.asarray(mean, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(mu)) or mu.size != factor.shape[0]:
        raise ValueError(
            f"independence_t mean must be {factor.shape[0]} finite numbers (the size of cov); got {mean!r}"
        )

    def log_q(flat: jax.Array) -> jax.Array:
        w = jnp.asarray(inv, flat.dtype) @ (flat - jnp.asarray(mu, flat.dtype))
        return -0.5 * (nu + flat.size) * jnp.log1p(jnp.sum(w * w) / nu)

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        _check_dim("chol", factor, flat.size, "independence_t")
        k_z, k_w = jax.random.split(key)
        z = jax.random.normal(k_z, flat.shape, flat.dtype)
        w = 2.0 * jax.random.gamma(k_w, 0.5 * nu, (), flat.dtype) / nu
        new = jnp.asarray(mu, flat.dtype) + (jnp.asarray(factor, flat.dtype) @ z) / jnp.sqrt(w)
        return unravel(new), log_q(flat) - log_q(new)

    return Proposal(sample=sample, symmetric=False, name="independence_t")
