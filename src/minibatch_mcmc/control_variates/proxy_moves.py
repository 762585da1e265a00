"""Global proposals from the proxy posterior ``log p0(theta) + sum_i l~_i(theta) / K``: independence and HMC.

Both read no data: the proxy posterior's gradient is ``grad log p0 + (G + H (theta - c)) / K`` (``O(d^2)``),
and the minibatch test at the end corrects for the proxy's error with the true likelihood.

``proxy_independence`` proposes from the proxy posterior's Laplace approximation (Gaussian, or multivariate
t for heavier tails). ``proxy_hmc`` runs leapfrog on the proxy energy ``U(theta) = -log p0 - proxy_sum / K``
with momentum ``v ~ N(0, I)`` in the coordinates whitened by ``cov = L L'`` (mass matrix ``cov^{-1}``).
The leapfrog map followed by a momentum flip is a deterministic, volume-preserving involution of
``(theta, v)``, so an MH step on the extended target ``pi(theta) N(v; 0, I)`` accepts with the ratio
``pi(theta') / pi(theta) * exp(|v|^2 / 2 - |v'|^2 / 2)`` whatever energy drove the trajectory: the
proposal's ``log_q_ratio`` is the kinetic-energy difference ``(|v|^2 - |v'|^2) / 2`` and the proxy's
potential never enters the ratio (the test supplies the true one). See docs/notes-on-the-papers.md.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.control_variates.base import Proxy
from minibatch_mcmc.control_variates.proposals import cholesky_factor, proxy_gradient
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.proposals.random_walk import independence_gaussian, independence_t

PyTree = Any

UNROLL = 8
"""Leapfrog steps per iteration of the compiled loop: a short trajectory runs without a loop (cheaper under ``vmap``)."""


def proxy_laplace(
    proxy: Proxy, log_prior: Callable[[PyTree], jax.Array], temperature: float = 1.0, newton_steps: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """Mode and ``(-Hessian)^{-1}`` of the proxy posterior (float64, flat), by data-free Newton steps from the centre."""
    check_positive(temperature, "temperature")
    if proxy.order != 2:
        raise ValueError("proxy_laplace needs a second-order proxy (order=2): a first-order one has no curvature")
    c, unravel = proxy.flat_centre()

    def target(flat: jax.Array) -> jax.Array:
        theta = unravel(flat.astype(c.dtype))
        return log_prior(theta) + proxy.proxy_sum(theta) / temperature

    grad, hess = jax.jit(jax.grad(target)), jax.jit(jax.hessian(target))
    x = np.asarray(c, np.float64)
    for _ in range(newton_steps):
        h = -np.asarray(hess(jnp.asarray(x, c.dtype)), np.float64)
        step = np.linalg.solve(0.5 * (h + h.T), np.asarray(grad(jnp.asarray(x, c.dtype)), np.float64))
        x = x + step
        if np.max(np.abs(step)) < 1e-10 * (1.0 + np.max(np.abs(x))):
            break
    h = -np.asarray(hess(jnp.asarray(x, c.dtype)), np.float64)
    h = 0.5 * (h + h.T)
    lam = np.linalg.eigvalsh(h)
    if not np.all(np.isfinite(x)) or not np.all(np.isfinite(lam)) or lam[0] <= 0:
        raise ValueError(
            f"the proxy posterior has no strict mode (smallest curvature {lam[0]:.4g}, must be > 0); "
            "its Laplace approximation does not exist: use a proper prior or a local proposal"
        )
    return x, np.linalg.inv(h)


def proxy_independence(
    proxy: Proxy,
    log_prior: Callable[[PyTree], jax.Array],
    df: float | None = None,
    scale: float = 1.0,
    temperature: float = 1.0,
) -> Proposal:
    """Independence proposal from the proxy posterior's Laplace approximation: Gaussian (``df=None``) or multivariate t.

    ``scale`` widens the covariance (``scale^2 cov``); a t with a few degrees of freedom (``df=5``) is the safe choice
    when the posterior's tails may be heavier than the Laplace approximation's.

    Args:
        proxy: The Taylor proxy whose data-free sum stands for the log-likelihood.
        log_prior: The model's log prior.
        df: Degrees of freedom of a multivariate t; None: Gaussian.
        scale: A factor on the Laplace covariance's square root.
        temperature: ``K``: the proxy's sum is divided by it.
    """
    mean, cov = proxy_laplace(proxy, log_prior, temperature)
    if df is None:
        check_positive(scale, "scale")
        return independence_gaussian(mean, cov=(scale * scale) * cov)._replace(name="proxy_independence")
    return independence_t(mean, cov, df, scale=scale)._replace(name="proxy_independence_t")


def proxy_hmc(
    proxy: Proxy,
    log_prior: Callable[[PyTree], jax.Array],
    step_size: float | jax.Array,
    num_steps: int = 8,
    cov: Any = None,
    temperature: float = 1.0,
    jitter: float = 0.2,
) -> Proposal:
    """HMC on the proxy posterior: ``num_steps`` leapfrog steps of ``step_size`` (whitened units) with mass ``cov^{-1}``.

    Each step's size is ``step_size * u``, ``u ~ Uniform(1 - jitter, 1 + jitter)`` drawn independently of
    ``theta`` (an auxiliary variable, so the move stays an involution for each ``u``), which breaks the periodic
    orbits a fixed trajectory length gives on a near-Gaussian posterior. ``log_q_ratio`` is
    ``(|v|^2 - |v'|^2) / 2``; ``step_size`` may be traced (for tuning).

    Args:
        proxy: The Taylor proxy whose data-free sum stands for the log-likelihood.
        log_prior: The model's log prior.
        step_size: The leapfrog step in whitened units (> 0; a traced array inside ``jit``).
        num_steps: Leapfrog steps per proposal.
        cov: The inverse mass matrix (e.g. the Laplace covariance); None: the identity.
        temperature: ``K``: the proxy's sum is divided by it.
        jitter: Each step's size is ``step_size * u``, ``u ~ Uniform(1 - jitter, 1 + jitter)``, in [0, 1).
    """
    if not isinstance(step_size, jax.Array):
        check_positive(step_size, "step_size")
    steps = check_int(num_steps, "num_steps", 1)
    check_positive(temperature, "temperature")
    if not 0.0 <= float(jitter) < 1.0:
        raise ValueError(
            f"jitter={jitter!r} must be in [0, 1): the step size is step_size * Uniform(1 - jitter, 1 + jitter)"
        )
    c_flat, _ = proxy.flat_centre()
    chol = cholesky_factor(cov, int(c_flat.size))
    grad = proxy_gradient(proxy, log_prior, float(temperature))

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        flat, unravel = ravel_pytree(theta)
        dtype = flat.dtype
        lower = jnp.asarray(chol, dtype)
        k_v, k_u = jax.random.split(key)
        v0 = jax.random.normal(k_v, flat.shape, dtype)
        u = jax.random.uniform(k_u, (), dtype, 1.0 - jitter, 1.0 + jitter)
        eps = jnp.asarray(step_size, dtype) * u

        def kick(x: jax.Array, v: jax.Array, h: jax.Array) -> jax.Array:
            return v + h * (lower.T @ grad(x).astype(dtype))

        def leap(_, xv):
            x, v = xv
            x = x + eps * (lower @ v)
            return x, kick(x, v, eps)

        v = kick(flat, v0, 0.5 * eps)
        x, v = jax.lax.fori_loop(0, steps - 1, leap, (flat, v), unroll=UNROLL)
        x = x + eps * (lower @ v)
        v = kick(x, v, 0.5 * eps)
        log_q_ratio = 0.5 * (jnp.sum(v0 * v0) - jnp.sum(v * v))
        # a diverging trajectory (a stiff proxy posterior, e.g. a non-centred GLMM's large group s.d.) is rejected:
        # the candidate is the start with log q ratio -inf, as HMC treats a divergence
        ok = jnp.all(jnp.isfinite(x)) & jnp.isfinite(log_q_ratio)
        return unravel(jnp.where(ok, x, flat)), jnp.where(ok, log_q_ratio, -jnp.inf)

    return Proposal(sample=sample, symmetric=False, name="proxy_hmc")
