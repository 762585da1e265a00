"""Proxy HMC with the arrow-shaped Laplace factor of a one-factor GLMM as its mass: no ``d x d`` matrix.

``proxy_moves.proxy_hmc`` whitens with a dense Cholesky factor of the Laplace covariance (``O(d^2)`` per leapfrog
step, ``d^2`` memory). For a GLMM with one grouping factor the negative Hessian at the mode is an arrow
(``optim.block_newton``) and its factor ``L`` (``L L' = A^{-1}``) is applied in ``O(G k^2 + G k m + m^2)``:
``x = L z`` has ``x_G = L_S^{-T} z_G``, ``x_g = L_g^{-T} z_g - M_g x_G``, and ``L' y`` has
``(L' y)_g = L_g^{-1} y_g``, ``(L' y)_G = L_S^{-1} (y_G - sum_g M_g' y_g)``. The leapfrog, its jitter and its
``log_q_ratio`` are those of ``proxy_hmc`` with ``lower @ v`` and ``lower.T @ g`` replaced by these maps.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jax.scipy.linalg import solve_triangular

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.control_variates.base import Proxy
from minibatch_mcmc.control_variates.proposals import proxy_gradient
from minibatch_mcmc.proposals.base import Proposal

PyTree = Any


class ArrowMass(NamedTuple):
    """The arrow factor as device arrays (from ``optim.block_newton.ArrowFactor``'s fields)."""

    levels: jax.Array
    """``(G, k)`` flat indices of each level's effects."""
    globals_: jax.Array
    """``(m,)`` flat indices of the global coordinates."""
    chol_levels: jax.Array
    """``(G, k, k)`` lower factors of the level blocks."""
    m: jax.Array
    """``(G, k, m)``: ``A_g^{-1} B_g``."""
    chol_schur: jax.Array
    """``(m, m)`` lower factor of the Schur complement."""


def arrow_mass(factor: Any) -> ArrowMass:
    """An ``ArrowMass`` from an ``optim.block_newton.ArrowFactor`` (its index and factor arrays)."""
    return ArrowMass(
        jnp.asarray(factor.index.levels, jnp.int32),
        jnp.asarray(factor.index.globals_, jnp.int32),
        jnp.asarray(factor.chol_levels),
        jnp.asarray(factor.m),
        jnp.asarray(factor.chol_schur),
    )


def lower_apply(mass: ArrowMass, z: jax.Array) -> jax.Array:
    """``L z`` (module docstring)."""
    dtype = z.dtype
    ls, lg, m = (a.astype(dtype) for a in (mass.chol_schur, mass.chol_levels, mass.m))
    x_glob = solve_triangular(ls.T, z[mass.globals_], lower=False)
    own = jax.vmap(lambda l, b: solve_triangular(l.T, b, lower=False))(lg, z[mass.levels])
    x = jnp.zeros_like(z).at[mass.globals_].set(x_glob)
    return x.at[mass.levels].set(own - jnp.einsum("gkc,c->gk", m, x_glob))


def lower_transpose_apply(mass: ArrowMass, y: jax.Array) -> jax.Array:
    """``L' y`` (module docstring)."""
    dtype = y.dtype
    ls, lg, m = (a.astype(dtype) for a in (mass.chol_schur, mass.chol_levels, mass.m))
    y_lev = y[mass.levels]
    own = jax.vmap(lambda l, b: solve_triangular(l, b, lower=True))(lg, y_lev)
    glob = solve_triangular(ls, y[mass.globals_] - jnp.einsum("gkc,gk->c", m, y_lev), lower=True)
    return jnp.zeros_like(y).at[mass.levels].set(own).at[mass.globals_].set(glob)


def arrow_hmc(
    proxy: Proxy,
    log_prior: Callable[[PyTree], jax.Array],
    step_size: float | jax.Array,
    mass: ArrowMass,
    num_steps: int = 8,
    temperature: float = 1.0,
    jitter: float = 0.2,
) -> Proposal:
    """HMC on the proxy posterior with mass ``A`` given by its arrow factor (``proxy_moves.proxy_hmc``'s leapfrog).

    Args:
        proxy: the proxy whose data-free sum stands for the log-likelihood (``control_variates.glmm_proxy``).
        log_prior: the model's log prior.
        step_size: the leapfrog step in whitened units (> 0; may be traced).
        mass: the Laplace fit's arrow factor (``arrow_mass``).
        num_steps: leapfrog steps per proposal.
        temperature: ``K``: the proxy's sum is divided by it.
        jitter: each step's size is ``step_size * Uniform(1 - jitter, 1 + jitter)``, in [0, 1).
    """
    if not isinstance(step_size, jax.Array):
        check_positive(step_size, "step_size")
    steps = check_int(num_steps, "num_steps", 1)
    check_positive(temperature, "temperature")
    if not 0.0 <= float(jitter) < 1.0:
        raise ValueError(
            f"jitter={jitter!r} must be in [0, 1): the step size is step_size * Uniform(1 - jitter, 1 + jitter)"
        )
    grad = proxy_gradient(proxy, log_prior, float(temperature))

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        dtype = flat.dtype
        k_v, k_u = jax.random.split(key)
        v0 = jax.random.normal(k_v, flat.shape, dtype)
        eps = jnp.asarray(step_size, dtype) * jax.random.uniform(k_u, (), dtype, 1.0 - jitter, 1.0 + jitter)

        def kick(x: jax.Array, v: jax.Array, h: jax.Array) -> jax.Array:
            return v + h * lower_transpose_apply(mass, grad(x).astype(dtype))

        def leap(_, xv):
            x, v = xv
            x = x + eps * lower_apply(mass, v)
            return x, kick(x, v, eps)

        v = kick(flat, v0, 0.5 * eps)
        x, v = jax.lax.fori_loop(0, steps - 1, leap, (flat, v))
        x = x + eps * lower_apply(mass, v)
        v = kick(x, v, 0.5 * eps)
        log_q_ratio = 0.5 * (jnp.sum(v0 * v0) - jnp.sum(v * v))
        ok = jnp.all(jnp.isfinite(x)) & jnp.isfinite(log_q_ratio)
        return unravel(jnp.where(ok, x, flat)), jnp.where(ok, log_q_ratio, -jnp.inf)

    return Proposal(sample=sample, symmetric=False, name="arrow_hmc")
