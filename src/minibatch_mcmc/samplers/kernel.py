"""A Metropolis-Hastings kernel as an ``init``/``step`` pair over NamedTuple states (BlackJAX style)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import AcceptanceTest, Statistics, TestOutcome
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal

PyTree = Any


class ChainState(NamedTuple):
    """Current position of one chain and its log prior."""

    position: PyTree
    log_prior: jax.Array


class Kernel(NamedTuple):
    """``init(position) -> state`` and ``step(key, state, data, temperature) -> (state, outcome)``."""

    init: Callable[[PyTree], ChainState]
    step: Callable[[jax.Array, ChainState, PyTree, jax.Array], tuple[ChainState, TestOutcome]]


def build_kernel(model: Model, proposal: Proposal, test: AcceptanceTest, n_data: int) -> Kernel:
    """Combine a model, a proposal and an acceptance test into one MH transition."""
    validate = getattr(test, "validate", None)
    if validate is not None:
        validate(n_data)

    def init(position: PyTree) -> ChainState:
        return ChainState(position=position, log_prior=jnp.asarray(model.log_prior(position)))

    def step(key: jax.Array, state: ChainState, data: PyTree, temperature: jax.Array) -> tuple[ChainState, TestOutcome]:
        k_prop, k_test = jax.random.split(key)
        candidate, log_q_ratio = proposal.sample(k_prop, state.position)
        lp_new = model.log_prior(candidate)
        psi = jnp.where(lp_new > -jnp.inf, lp_new - state.log_prior + log_q_ratio, -jnp.inf)
        current = state.position

        def log_ratio(batch: PyTree) -> jax.Array:
            return model.log_lik(candidate, batch) - model.log_lik(current, batch)

        stats = Statistics(log_ratio=log_ratio, data=data, n_data=n_data, psi=psi, temperature=temperature)
        outcome = test.decide(k_test, stats)
        new_state = jax.tree_util.tree_map(
            lambda new, old: jnp.where(outcome.accepted, new, old), ChainState(candidate, lp_new), state
        )
        return new_state, outcome

    return Kernel(init=init, step=step)
