"""A random choice between proposals, made independently of the state (a mixture of MH kernels).

Each step picks component ``j`` with a fixed probability ``w_j`` from its own key, then draws from
``q_j`` and reports ``q_j``'s own ``log_q_ratio``. This is valid without the mixture density
``sum_j w_j q_j``: the choice is an auxiliary variable independent of ``theta``, so the step is the MH
kernel of ``q_j`` with probability ``w_j``; each such kernel is reversible with respect to the target
and so is their fixed-weight mixture. (A choice that depended on ``theta`` would need the mixture
density.) It also works for components with no tractable density, such as proxy HMC, whose ratio is a
kinetic-energy difference. See docs/notes-on-the-papers.md.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.proposals.base import Proposal

PyTree = Any


def component_chooser(weights: Sequence[float]) -> Callable[[jax.Array], jax.Array]:
    """``key -> j``: the component ``mixture(..., weights)`` draws from with proposal key ``key`` (a function of the key alone)."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    log_w = jnp.log(jnp.asarray(w / w.sum(), jnp.float32))
    return lambda key: jax.random.categorical(jax.random.split(key)[0], log_w)


def mixture(components: Sequence[Proposal], weights: Sequence[float]) -> Proposal:
    """Propose from ``components[j]`` with probability ``weights[j]`` (normalised), chosen independently of ``theta``.

    Components must be gradient-free in the kernel's sense (``gradient_batch_size=None``); proxy-gradient
    proposals such as ``proxy_langevin`` and ``proxy_hmc`` qualify, as they need no data.

    Args:
        components: The proposals.
        weights: One non-negative weight per component, not all zero.
    """
    parts = tuple(components)
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if len(parts) == 0 or w.size != len(parts):
        raise ValueError(f"mixture needs one weight per component; got {len(parts)} components and {w.size} weights")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"mixture weights={list(weights)!r} must be non-negative, finite and not all zero")
    for p in parts:
        if not isinstance(p, Proposal):
            raise ValueError(f"mixture components must be Proposal objects; got {type(p).__name__}")
        if p.gradient_batch_size is not None:
            raise ValueError(
                f"mixture component {p.name!r} asks the kernel for a minibatch gradient (gradient_batch_size="
                f"{p.gradient_batch_size}); only gradient-free components are supported (use proxy_langevin)"
            )
    choose = component_chooser(w)

    def sample(key: jax.Array, theta: PyTree) -> tuple[PyTree, jax.Array]:
        j, k_move = choose(key), jax.random.split(key)[1]
        dtype = ravel_pytree(theta)[0].dtype

        def branch(p: Proposal):
            def draw(k: jax.Array) -> tuple[PyTree, jax.Array]:
                new, lq = p.sample(k, theta)
                return new, jnp.asarray(lq, dtype)

            return draw

        return jax.lax.switch(j, [branch(p) for p in parts], k_move)

    symmetric = all(p.symmetric for p in parts)
    return Proposal(sample=sample, symmetric=symmetric, name="mixture(" + ",".join(p.name for p in parts) + ")")
