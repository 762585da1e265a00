"""A Gaussian random walk with a fixed shape and a traceable overall scale, for tuning the scale under ``jit``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.proposals.base import Proposal

PyTree = Any


def scaled_random_walk(factor: jax.Array, scale: jax.Array) -> Proposal:
    """Symmetric random walk ``theta' = theta + scale * L z``, ``z ~ N(0, I)``, over the flattened ``theta``.

    ``factor`` is a ``(d, d)`` matrix ``L`` (e.g. the lower Cholesky factor of a Laplace covariance) or a
    ``(d,)`` vector of per-coordinate standard deviations; ``scale`` is a scalar and may be traced.
    """
    factor = jnp.asarray(factor)
    if factor.ndim not in (1, 2) or (factor.ndim == 2 and factor.shape[0] != factor.shape[1]):
        raise ValueError(
            f"scaled_random_walk factor must be a (d, d) matrix or a (d,) vector; got shape {factor.shape}"
        )
    if not jnp.issubdtype(factor.dtype, jnp.floating):
        raise ValueError(f"scaled_random_walk factor must be floating point; got dtype {factor.dtype}")
    if jnp.ndim(scale) != 0:
        raise ValueError(f"scaled_random_walk scale must be a scalar; got shape {jnp.shape(scale)}")

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        if factor.shape[0] != flat.size:
            raise ValueError(
                f"scaled_random_walk factor has dimension {factor.shape[0]} but the parameter has {flat.size} elements"
            )
        z = jax.random.normal(key, flat.shape, flat.dtype)
        f = factor.astype(flat.dtype)
        step = f @ z if f.ndim == 2 else f * z
        return unravel(flat + jnp.asarray(scale, flat.dtype) * step), jnp.zeros((), flat.dtype)

    return Proposal(sample=sample, symmetric=True, name="scaled_random_walk")
