"""Reversible-jump update/birth/death moves for variable selection (Green 1995; Korattikara et al. 4.2.3).

The state is ``{"beta": (D,), "gamma": (D,)}`` with a float 0/1 mask ``gamma`` and excluded
coefficients held at 0 (:mod:`minibatch_mcmc.models.variable_selection`). Each step picks one move:

* **update** (probability ``p_u(k)``): a uniformly chosen active ``j``, ``beta_j += N(0, update_sd^2)``;
* **birth** (``p_b(k)``, only for ``k < D``): a uniformly chosen inactive ``j`` enters with
  ``beta_j ~ N(0, birth_sd^2)``;
* **death** (``p_d(k)``, only for ``k > 1``): a uniformly chosen active ``j`` leaves, ``beta_j`` is dropped.

The returned ``log_q_ratio`` is ``log[p(reverse move) q(reverse draw)] - log[p(forward move) q(forward
draw)]`` with the component choices ``1/k`` and ``1/(D - k)`` included; the dimension-matching map
``beta_j = u`` has unit Jacobian. Adding the model's prior ratio gives the data-independent ``psi`` of
Equations 18-20, so every acceptance test in the library applies unchanged.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.checks import check_int, check_positive, check_probability
from minibatch_mcmc.proposals.base import Proposal

UPDATE, BIRTH, DEATH = 0, 1, 2
"""Move codes."""


class MoveProbabilities(NamedTuple):
    """Birth and death probabilities for ``1 < k < D``; at ``k = 1`` or ``k = D`` the impossible move's share goes to update."""

    birth: float = 1.0 / 3.0
    death: float = 1.0 / 3.0

    @property
    def update(self) -> float:
        """Probability of an update move away from the boundaries."""
        return 1.0 - self.birth - self.death


def move_probabilities(
    k: jax.Array, n_features: int, probs: MoveProbabilities
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(p_birth(k), p_death(k), p_update(k))`` for a model of size ``k`` out of ``D`` features."""
    kf = jnp.asarray(k, jnp.float32)
    pb = jnp.where(kf < n_features, probs.birth, 0.0)
    pd = jnp.where(kf > 1, probs.death, 0.0)
    return pb, pd, 1.0 - pb - pd


def _normal_logpdf(x: jax.Array, sd: float) -> jax.Array:
    """``log N(x | 0, sd^2)``."""
    return -0.5 * (x / sd) ** 2 - math.log(sd) - 0.5 * math.log(2 * math.pi)


def _pick(u: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniformly chosen index among the positions where ``mask`` is true, from iid uniforms ``u``."""
    return jnp.argmax(jnp.where(mask, u, -1.0))


def reversible_jump(
    n_features: int,
    update_sd: float,
    birth_sd: float,
    probs: MoveProbabilities = MoveProbabilities(),
) -> Proposal:
    """Mixture of update, birth and death moves on ``{"beta", "gamma"}`` with ``D = n_features``.

    Args:
        n_features: ``D``, the number of covariates.
        update_sd: S.d. of an update move's change to one active coefficient.
        birth_sd: S.d. of a new coefficient drawn by a birth move.
        probs: The birth and death probabilities (update takes the rest).
    """
    n = check_int(n_features, "n_features", low=1, why="D, the number of covariates")
    check_positive(update_sd, "update_sd", why="a standard deviation")
    check_positive(birth_sd, "birth_sd", why="a standard deviation")
    b = check_probability(probs.birth, "birth", why="a move probability")
    d = check_probability(probs.death, "death", why="a move probability")
    if b + d >= 1 + 1e-12:
        raise ValueError(f"move probabilities birth={b!r}, death={d!r} must be in (0, 1) with birth + death <= 1")

    def sample(key: jax.Array, theta: dict) -> tuple[dict, jax.Array]:
        beta, gamma = theta["beta"], theta["gamma"]
        if beta.shape != (n,) or gamma.shape != (n,):
            raise ValueError(
                f"reversible_jump(n_features={n}) got beta {beta.shape} and gamma {gamma.shape}; expected ({n},)"
            )
        dtype = beta.dtype
        # one draw of uniforms (a single PRNG call keeps compilation cheap): move, normal, two index choices
        u = jax.random.uniform(key, (2 * n + 2,), jnp.float32, minval=jnp.finfo(jnp.float32).tiny)
        active = gamma == 1
        k = jnp.sum(active).astype(jnp.float32)
        pb, pd, _ = move_probabilities(k, n, probs)
        move = jnp.where(u[0] < pb, BIRTH, jnp.where(u[0] < pb + pd, DEATH, UPDATE))
        j_act = _pick(u[2 : 2 + n], active)
        j_inact = _pick(u[2 + n :], ~active)
        z = jax.scipy.special.ndtri(u[1]).astype(dtype)

        # update: symmetric random walk on one active coefficient
        beta_u = beta.at[j_act].add(update_sd * z)
        # birth: a new coefficient drawn from N(0, birth_sd^2)
        new_b = birth_sd * z
        beta_b = beta.at[j_inact].set(new_b)
        gamma_b = gamma.at[j_inact].set(1.0)
        pb_rev, pd_rev, _ = move_probabilities(k + 1, n, probs)
        lq_birth = (jnp.log(pd_rev) - jnp.log(k + 1)) - (jnp.log(pb) - jnp.log(n - k) + _normal_logpdf(new_b, birth_sd))
        # death: an active coefficient is dropped
        old = beta[j_act]
        beta_d = beta.at[j_act].set(0.0)
        gamma_d = gamma.at[j_act].set(0.0)
        pb_back, _, _ = move_probabilities(k - 1, n, probs)
        lq_death = (jnp.log(pb_back) - jnp.log(n - k + 1) + _normal_logpdf(old, birth_sd)) - (jnp.log(pd) - jnp.log(k))

        beta_new = jnp.select([move == BIRTH, move == DEATH], [beta_b, beta_d], beta_u)
        gamma_new = jnp.select([move == BIRTH, move == DEATH], [gamma_b, gamma_d], gamma)
        lq = jnp.select([move == BIRTH, move == DEATH], [lq_birth, lq_death], jnp.zeros((), jnp.float32))
        return {"beta": beta_new, "gamma": gamma_new}, lq.astype(dtype)

    return Proposal(sample=sample, symmetric=False, name="reversible_jump")


def move_of(theta: dict, theta_new: dict) -> jax.Array:
    """Which move took ``theta`` to ``theta_new`` (UPDATE, BIRTH or DEATH) from the change in model size."""
    dk = jnp.sum(theta_new["gamma"], -1) - jnp.sum(theta["gamma"], -1)
    return jnp.where(dk > 0, BIRTH, jnp.where(dk < 0, DEATH, UPDATE))
