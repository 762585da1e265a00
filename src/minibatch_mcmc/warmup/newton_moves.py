"""Newton Metropolis-Hastings moves on small vectors: the proposals ``warmup.group_gibbs``'s sweep steps are made of.

From a point ``x`` with the target's gradient and a positive-definite precision ``P`` there (a ``Fit``), the proposal
``m + rho (x - m) + sqrt(1 - rho^2) P^{-1/2} xi`` with ``m = x + P^{-1} grad``: ``rho = 0`` the local Laplace fit,
``rho`` near 1 a small autoregressive step about it. ``newton_mh`` makes it an exact MH step (the reverse proposal
built at the proposed point); its ``climb`` option, for warm-ups only, moves to ``m`` where that raises the target.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

PREC_FLOOR = 1e-6
"""The smallest eigenvalue a globals move's precision keeps (relative to its largest, plus this absolute)."""

CLIMB_HALVINGS = 5
"""A climbing step goes ``2^-k`` of the way to the Newton point, ``k`` drawn uniformly from ``0 .. CLIMB_HALVINGS``."""


class Fit(NamedTuple):
    """A Newton proposal's ingredients at a point: the target's gradient and a positive-definite precision."""

    grad: jax.Array
    prec: jax.Array


def clipped_prec(hess: jax.Array) -> jax.Array:
    """``-hess`` with its eigenvalues held above ``PREC_FLOOR`` times the largest (a small symmetric matrix)."""
    vals, vecs = jnp.linalg.eigh(-0.5 * (hess + hess.T))
    floor = PREC_FLOOR * (1.0 + jnp.max(jnp.abs(vals)))
    return (vecs * jnp.maximum(vals, floor)) @ vecs.T


def newton_mean(x: jax.Array, fit: Fit) -> tuple[jax.Array, jax.Array]:
    """``P``'s lower Cholesky factor and the Newton point ``m = x + P^{-1} grad`` (batched over leading axes)."""
    chol = jnp.linalg.cholesky(fit.prec)
    return chol, x + jax.scipy.linalg.cho_solve((chol, True), fit.grad[..., None])[..., 0]


def newton_draw(key: jax.Array, x: jax.Array, fit: Fit, rho: jax.Array) -> jax.Array:
    """``m + rho (x - m) + sqrt(1 - rho^2) P^{-1/2} xi`` with ``m = x + P^{-1} grad`` (batched over leading axes)."""
    chol, mean = newton_mean(x, fit)
    xi = jax.random.normal(key, x.shape, x.dtype)
    noise = jax.scipy.linalg.solve_triangular(jnp.swapaxes(chol, -1, -2), xi[..., None], lower=False)[..., 0]
    rho = jnp.asarray(rho, x.dtype)
    return mean + rho * (x - mean) + jnp.sqrt(1.0 - rho * rho) * noise


def climbed(key: jax.Array, x: jax.Array, mean: jax.Array, shape: tuple = ()) -> jax.Array:
    """A climbing step from ``x`` towards the Newton point ``mean``: ``2^-k`` of the way, ``k`` uniform in
    ``0 .. CLIMB_HALVINGS`` of ``shape`` (one per leading index, or one for all with ``()``)."""
    halvings = jax.random.randint(key, shape, 0, CLIMB_HALVINGS + 1).astype(x.dtype)
    return x + 0.5**halvings * (mean - x)


def climb_log_alpha(change: jax.Array) -> jax.Array:
    """A climbing step's acceptance: kept (0) where it raised the target, else refused (``-inf``)."""
    return jnp.where(change > 0, 0.0, -jnp.inf)


def newton_log_q(to: jax.Array, frm: jax.Array, fit: Fit, rho: jax.Array) -> jax.Array:
    """``log q(to | frm)`` of ``newton_draw`` from ``frm`` with ``fit`` at ``frm``, up to a constant shared by both directions."""
    chol, mean = newton_mean(frm, fit)
    rho = jnp.asarray(rho, to.dtype)
    r = to - mean - rho * (frm - mean)
    w = jnp.einsum("...ji,...j->...i", chol, r)  # L' r: (L' r)'(L' r) = r' P r
    logdet = jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * jnp.sum(w * w, axis=-1) / (1.0 - rho * rho) + logdet


def newton_mh(
    key: jax.Array, x: jax.Array, fit: Callable, rho: jax.Array, climb: jax.Array | bool = False
) -> tuple[jax.Array, jax.Array]:
    """One Newton MH step on a small vector ``x``: ``fit(point, base) -> (Fit, value)`` with ``value`` such that
    ``sum(fit(x', x)[1] - fit(x, None)[1])`` is the target's change (``globals_fit`` puts the rows' change from ``base``,
    summed after differencing row by row so float32 keeps it, into the first). The new ``x`` and whether it moved.
    ``climb`` (warm-up only: it does not leave the target invariant): a step towards the Newton point, of length a
    random ``2^-k`` of it (``k`` uniform in ``0 .. CLIMB_HALVINGS``: far from a mode the full step may overshoot),
    kept where it raises the target."""
    k_draw, k_accept = jax.random.split(key)
    here, value_here = fit(x, None)
    proposed = jnp.where(climb, climbed(k_accept, x, newton_mean(x, here)[1]), newton_draw(k_draw, x, here, rho))
    there, value_there = fit(proposed, x)
    change = jnp.sum(value_there - value_here)
    log_alpha = change + newton_log_q(x, proposed, there, rho) - newton_log_q(proposed, x, here, rho)
    log_alpha = jnp.where(climb, climb_log_alpha(change), log_alpha)
    accept = jnp.isfinite(log_alpha) & (jnp.log(jax.random.uniform(k_accept, (), x.dtype)) < log_alpha)
    return jnp.where(accept, proposed, x), accept.astype(x.dtype)


def hessian_by_rows(target: Callable, x: jax.Array) -> jax.Array:
    """``jax.hessian(target)(x)``, its forward-over-reverse products taken one basis direction at a time
    (``lax.map``): the memory of one gradient of ``target``, not ``len(x)`` of them at once (a target over ``G``-sized
    effects holds ``len(x) x G`` tangents under ``jax.hessian``'s ``vmap``)."""
    rows = jax.lax.map(lambda v: jax.jvp(jax.grad(target), (x,), (v,))[1], jnp.eye(x.shape[0], dtype=x.dtype))
    return rows.T


def autodiff_fit(target: Callable) -> Callable:
    """``fit`` for ``newton_mh`` from a cheap scalar ``target`` (gradient and Hessian by autodiff)."""

    def fit(point, base=None):
        return Fit(jax.grad(target)(point), clipped_prec(jax.hessian(target)(point))), target(point)

    return fit
