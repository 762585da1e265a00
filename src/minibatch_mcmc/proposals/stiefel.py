"""Random walk on the orthogonal group / square Stiefel manifold (Ouyang 2008; Korattikara et al. 4.2.2).

``W' = W expm(S)`` with ``S = step (A - A^T) / sqrt(2)``, ``A`` a matrix of standard normals, so each
off-diagonal entry of the skew-symmetric ``S`` is ``N(0, step^2)``. ``W^-1 W' = expm(S)`` and the
reverse increment is ``expm(-S)``; ``S`` and ``-S`` have the same law, so the proposal density with
respect to Haar measure is symmetric and ``log_q_ratio = 0``.

In float32 the product drifts off the manifold by rounding (about 1e-7 per step), so the candidate is
re-orthonormalised by one Newton-Schulz step ``W (3 I - W^T W) / 2``, which maps a matrix at
distance ``e`` from the manifold to one at distance ``O(e^2)``. In exact arithmetic ``W expm(S)`` is
already orthonormal and the step is the identity, so it changes nothing but rounding error and the
proposal stays symmetric; the chain stays orthonormal to ~1e-7 over arbitrarily long runs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from minibatch_mcmc.checks import check_positive
from minibatch_mcmc.proposals.base import Proposal


def skew_gaussian(key: jax.Array, d: int, step: float, dtype=jnp.float32) -> jax.Array:
    """A skew-symmetric ``S`` whose off-diagonal entries are independent ``N(0, step^2)``."""
    a = jax.random.normal(key, (d, d), dtype)
    return step * (a - a.T) / math.sqrt(2.0)


def newton_schulz(w: jax.Array) -> jax.Array:
    """One Newton-Schulz step towards the nearest orthonormal matrix: ``W (3 I - W^T W) / 2``."""
    d = w.shape[-1]
    return w @ (1.5 * jnp.eye(d, dtype=w.dtype) - 0.5 * (w.T @ w))


def stiefel_random_walk(step: float, reorthonormalize: bool = True) -> Proposal:
    """Symmetric random walk ``W' = W expm(S)`` on ``D x D`` orthonormal matrices with step size ``step``.

    Args:
        step: S.d. of the skew-symmetric increment ``S``'s entries.
        reorthonormalize: Apply one Newton-Schulz step to ``W'`` against rounding drift.
    """
    check_positive(step, "step", why="s.d. of the skew-symmetric increments")

    def sample(key: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        if w.ndim != 2 or w.shape[0] != w.shape[1]:
            raise ValueError(f"stiefel_random_walk needs a square D x D matrix position; got shape {w.shape}")
        s = skew_gaussian(key, w.shape[0], step, w.dtype)
        w_new = w @ jax.scipy.linalg.expm(s)
        if reorthonormalize:
            w_new = newton_schulz(w_new)
        return w_new, jnp.zeros((), w.dtype)

    return Proposal(sample=sample, symmetric=True, name="stiefel_random_walk")
