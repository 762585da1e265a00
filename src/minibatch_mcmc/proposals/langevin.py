"""Langevin proposals: a gradient step plus Gaussian noise, with the reverse density for the MH test.

``theta' ~ N(theta + (alpha / 2) P g(theta), alpha P)`` where ``g`` is the gradient of the minibatch
estimate of the tempered log posterior ``log p0(theta) + (N / (b K)) sum_{i in batch} log p(x_i|theta)``
and ``P`` an optional diagonal preconditioner. The proposal is not symmetric: ``log_q_ratio``
includes both Gaussian densities, evaluated with the same minibatch gradient function, so it can
enter any acceptance test's data-independent term ``psi``. With no acceptance test (``no_test()``)
this is plain stochastic-gradient Langevin dynamics (SGLD); with the full-data gradient and an exact
test it is MALA.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.proposals.base import GradientFn, Proposal

PyTree = Any


def langevin_log_q_ratio(
    theta: jax.Array, theta_new: jax.Array, grad: jax.Array, grad_new: jax.Array, step_size: float, precond: Any = 1.0
) -> jax.Array:
    """``log q(theta|theta_new) - log q(theta_new|theta)`` for the Gaussian Langevin kernel (flat vectors)."""
    p = jnp.asarray(precond, theta.dtype)
    fwd = theta_new - theta - 0.5 * step_size * p * grad
    rev = theta - theta_new - 0.5 * step_size * p * grad_new
    return (jnp.sum(fwd * fwd / p) - jnp.sum(rev * rev / p)) / (2.0 * step_size)


def langevin_sample(
    key: jax.Array, theta: PyTree, drift: Callable[[PyTree], jax.Array], step_size: Any, precond: Any = 1.0
) -> tuple[PyTree, jax.Array]:
    """``theta' = theta + (alpha / 2) P g(theta) + sqrt(alpha P) z`` and its ``log_q_ratio``; ``drift`` gives the flat ``g``."""
    flat, unravel = ravel_pytree(theta)
    alpha = jnp.asarray(step_size, flat.dtype)
    p = jnp.asarray(precond, flat.dtype)
    grad = drift(theta)
    new = flat + 0.5 * alpha * p * grad + jnp.sqrt(alpha * p) * jax.random.normal(key, flat.shape, flat.dtype)
    grad_new = drift(unravel(new))
    return unravel(new), langevin_log_q_ratio(flat, new, grad, grad_new, alpha, p)


def flat_gradient(grad_log_target: GradientFn) -> Callable[[PyTree], jax.Array]:
    """The kernel's gradient function with its output flattened to one vector."""
    return lambda theta: ravel_pytree(grad_log_target(theta))[0]


def tempered_drift(
    grad_log_target: GradientFn, log_prior: Callable[[PyTree], jax.Array], temperature_factor: float
) -> Callable[[PyTree], jax.Array]:
    """``g / T + (1 - 1/T) grad log p0``: the kernel's gradient ``g`` with its likelihood part tempered by ``T``."""
    t_inv = 1.0 / float(temperature_factor)
    flat = flat_gradient(grad_log_target)
    if t_inv == 1.0:
        return flat
    grad_prior = jax.grad(log_prior)
    return lambda theta: flat(theta) * t_inv + (1.0 - t_inv) * ravel_pytree(grad_prior(theta))[0]


def langevin(step_size: float, batch_size: int = 0, preconditioner: Any = None) -> Proposal:
    """Langevin proposal: a gradient step plus Gaussian noise, its reverse density in the proposal ratio.

    With ``no_test()`` it is SGLD; with the full-data gradient and ``MetropolisTest()``, MALA.

    Args:
        step_size: The step ``alpha`` (> 0).
        batch_size: Rows of the gradient's minibatch (0: all data).
        preconditioner: A positive scalar or vector ``P`` scaling drift and noise per coordinate of the flattened
            parameter; None: 1.
    """
    alpha = check_positive(step_size, "step_size", why="the Langevin step alpha")
    b = check_int(batch_size, "batch_size", 0, why="0 means the full data set")
    precond = 1.0 if preconditioner is None else np.asarray(preconditioner, dtype=np.float64)
    if np.any(~np.isfinite(precond)) or np.any(np.asarray(precond) <= 0) or np.ndim(precond) > 1:
        raise ValueError(f"preconditioner must be a positive finite scalar or 1-D vector; got {preconditioner!r}")

    def sample(key: jax.Array, theta: PyTree, grad_log_target: GradientFn) -> tuple[PyTree, jax.Array]:
        size = ravel_pytree(theta)[0].size
        if np.ndim(precond) == 1 and np.shape(precond)[0] != size:
            raise ValueError(f"preconditioner has {np.shape(precond)[0]} entries but the parameter has {size}")
        return langevin_sample(key, theta, flat_gradient(grad_log_target), alpha, precond)

    return Proposal(sample=sample, symmetric=False, name="langevin", gradient_batch_size=b)


def tempered_langevin(
    log_prior: Callable[[PyTree], jax.Array], step_size: jax.Array, batch_size: int, temperature_factor: float = 1.0
) -> Proposal:
    """Langevin proposal with a (traced) step size whose drift follows the likelihood tempered by ``T``.

    The kernel supplies ``g = grad[log p0 + (N / (b K)) sum_batch log p]``; the drift uses
    ``g / T + (1 - 1/T) grad log p0``, the minibatch gradient of ``log p0 + (N / (b K T)) sum_batch log p``.
    ``step_size`` may be a traced array (one compiled step for a whole schedule); it is not checked here.
    """
    b = check_int(batch_size, "batch_size", 0, why="0 means the full data set")
    t = check_positive(temperature_factor, "temperature_factor")

    def sample(key: jax.Array, theta: PyTree, grad_log_target: GradientFn) -> tuple[PyTree, jax.Array]:
        return langevin_sample(key, theta, tempered_drift(grad_log_target, log_prior, t), step_size)

    return Proposal(sample=sample, symmetric=False, name="tempered_langevin", gradient_batch_size=b)
