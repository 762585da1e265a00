"""Gradient proposals from a control variate's proxy: the combination to reach for first at temperature 1.

``proxy_langevin`` is a Langevin (MALA) proposal whose drift is the gradient of the proxy posterior
``log p0(theta) + sum_i l~_i(theta) / K``: data-free (no minibatch, no full pass), deterministic in
``theta``, so its reverse density is exact and any acceptance test corrects for the proxy's error.
Preconditioned by the Laplace covariance it moves along the posterior's shape; the per-step data
cost is only the minibatch test's. The control-variate minibatch gradient (SGLD-CV) is the other
option: ``proposals.langevin(step, batch_size=b)`` with ``sample(..., estimator=proxy)``.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_positive
from minibatch_mcmc.control_variates.base import Proxy
from minibatch_mcmc.proposals.base import Proposal

PyTree = Any


def proxy_gradient(
    proxy: Proxy, log_prior: Callable[[PyTree], jax.Array], temperature: float = 1.0
) -> Callable[[jax.Array], jax.Array]:
    """``theta -> grad[log p0(theta) + proxy_sum(theta) / K]`` on flat vectors (the free full-data gradient approximation)."""
    _, unravel = proxy.flat_centre()

    def target(flat: jax.Array) -> jax.Array:
        theta = unravel(flat)
        return log_prior(theta) + proxy.proxy_sum(theta) / temperature

    return jax.grad(target)


def cholesky_factor(cov: Any, d: int) -> np.ndarray:
    """Lower Cholesky factor of a ``d x d`` covariance (identity when ``cov`` is None), with a clear error."""
    if cov is None:
        return np.eye(d)
    c = np.asarray(cov, np.float64)
    if c.shape != (d, d) or not np.all(np.isfinite(c)):
        raise ValueError(f"cov must be a finite {d} x {d} matrix for a {d}-parameter model; got shape {c.shape}")
    try:
        return np.linalg.cholesky(0.5 * (c + c.T))
    except np.linalg.LinAlgError:
        raise ValueError("cov is not positive definite (its Cholesky factorisation failed)") from None


def proxy_langevin(
    proxy: Proxy,
    log_prior: Callable[[PyTree], jax.Array],
    step_size: float | jax.Array,
    cov: Any = None,
    temperature: float = 1.0,
) -> Proposal:
    """MALA ``theta' ~ N(theta + (h/2) C g(theta), h C)`` with ``g`` the proxy posterior's gradient and ``C = cov``.

    ``step_size`` may be a traced array (for tuning inside ``jit``).

    Args:
        proxy: The Taylor proxy whose data-free sum stands for the log-likelihood.
        log_prior: The model's log prior.
        step_size: ``h`` (> 0; a traced array inside ``jit``).
        cov: The preconditioner ``C`` (e.g. the Laplace covariance); None: the identity.
        temperature: ``K``: the proxy's sum is divided by it.
    """
    if not isinstance(step_size, jax.Array):
        check_positive(step_size, "step_size")
    check_positive(temperature, "temperature")
    c_flat, unravel = proxy.flat_centre()
    d = int(c_flat.size)
    chol = cholesky_factor(cov, d)
    grad = proxy_gradient(proxy, log_prior, float(temperature))

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat = ravel_pytree(theta)[0]
        dtype = flat.dtype
        h = jnp.asarray(step_size, dtype)
        lower = jnp.asarray(chol, dtype)

        def mean(x: jax.Array) -> jax.Array:
            return x + 0.5 * h * (lower @ (lower.T @ grad(x)))

        def whitened_sq(to: jax.Array, frm: jax.Array) -> jax.Array:
            r = jax.scipy.linalg.solve_triangular(lower, to - mean(frm), lower=True)
            return jnp.sum(r * r)

        z = jax.random.normal(key, flat.shape, dtype)
        new = mean(flat) + jnp.sqrt(h) * (lower @ z)
        log_q_ratio = (whitened_sq(new, flat) - whitened_sq(flat, new)) / (2.0 * h)
        return unravel(new), log_q_ratio

    return Proposal(sample=sample, symmetric=False, name="proxy_langevin")
