"""A Metropolis-Hastings kernel as an ``init``/``step`` pair over NamedTuple states (BlackJAX style)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import AcceptanceTest, Statistics, TestOutcome, full_data_sum, temperature_factor
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import GradientFn, Proposal

PyTree = Any


class ChainState(NamedTuple):
    """Current position of one chain and its log prior."""

    position: PyTree
    log_prior: jax.Array


class Kernel(NamedTuple):
    """``init(position) -> state`` and ``step(key, state, data, temperature) -> (state, outcome)``."""

    init: Callable[[PyTree], ChainState]
    step: Callable[[jax.Array, ChainState, PyTree, jax.Array], tuple[ChainState, TestOutcome]]


def minibatch_grad_log_target(
    model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int, temperature: jax.Array
) -> GradientFn:
    """Gradient of ``log p0(theta) + (N / (b K)) sum_{i in batch} log p(x_i|theta)`` on one fresh minibatch.

    ``batch_size=0`` (or ``>= N``) uses all ``N`` points; otherwise ``b`` distinct points are drawn
    without replacement from ``key``, independently of ``theta``.
    """
    if batch_size == 0 or batch_size >= n_data:
        scale = 1.0

        def log_lik_sum(theta: PyTree) -> jax.Array:
            # streamed in chunks, so an out-of-core source works too
            return full_data_sum(lambda rows: model.log_lik(theta, rows), data, n_data)[0]

    else:
        idx, _ = chunk_indices(key, jnp.zeros((), jnp.int32), batch_size, n_data)
        batch, scale = take(data, idx), n_data / batch_size

        def log_lik_sum(theta: PyTree) -> jax.Array:
            return jnp.sum(model.log_lik(theta, batch))

    def log_target(theta: PyTree) -> jax.Array:
        return model.log_prior(theta) + log_lik_sum(theta) * (scale / temperature)

    return jax.grad(log_target)


def gradient_data_used(proposal: Proposal, n_data: int) -> int:
    """Data points a proposal's gradient evaluates per step (0 for gradient-free proposals)."""
    b = getattr(proposal, "gradient_batch_size", None)
    if b is None:
        return 0
    return n_data if b == 0 or b >= n_data else int(b)


def build_kernel(model: Model, proposal: Proposal, test: AcceptanceTest, n_data: int) -> Kernel:
    """Combine a model, a proposal and an acceptance test into one MH transition."""
    validate = getattr(test, "validate", None)
    if validate is not None:
        validate(n_data)
    grad_batch = getattr(proposal, "gradient_batch_size", None)
    grad_temperature_factor = temperature_factor(test, n_data)  # a test that tempers by itself (MINT): the drift follows it
    if grad_batch is not None and (isinstance(grad_batch, bool) or not isinstance(grad_batch, int) or grad_batch < 0):
        raise ValueError(f"proposal.gradient_batch_size={grad_batch!r} must be None or a non-negative integer")

    def init(position: PyTree) -> ChainState:
        return ChainState(position=position, log_prior=jnp.asarray(model.log_prior(position)))

    def step(key: jax.Array, state: ChainState, data: PyTree, temperature: jax.Array) -> tuple[ChainState, TestOutcome]:
        k_prop, k_test = jax.random.split(key)
        if grad_batch is None:
            candidate, log_q_ratio = proposal.sample(k_prop, state.position)
        else:
            k_grad = jax.random.fold_in(k_prop, 1)  # the gradient minibatch; k_prop stays the noise key
            grad_fn = minibatch_grad_log_target(model, k_grad, data, n_data, grad_batch, temperature * grad_temperature_factor)
            candidate, log_q_ratio = proposal.sample(k_prop, state.position, grad_fn)
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
