"""A Metropolis-Hastings kernel as an ``init``/``step`` pair over NamedTuple states (BlackJAX style).

One step: the proposal draws a candidate (with a gradient from the estimator's log-likelihood sum
when it asks for one), the estimator turns the pair into per-datum terms and a data-free sum
(``control_variates``), the acceptance test decides from them, and the state moves or stays.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import AcceptanceTest, Statistics, TestOutcome
from minibatch_mcmc.acceptance.registry import contract
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.control_variates.base import Estimator, plain, uses_all_rows
from minibatch_mcmc.data.arrays import row_ids
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import GradientFn, Proposal
from minibatch_mcmc.samplers.keys import gradient_key, split_step

PyTree = Any


class ChainState(NamedTuple):
    """Current position of one chain and its log prior."""

    position: PyTree
    log_prior: jax.Array


class Kernel(NamedTuple):
    """``init(position) -> state`` and ``step(key, state, data, temperature) -> (state, outcome)``."""

    init: Callable[[PyTree], ChainState]
    step: Callable[[jax.Array, ChainState, PyTree, jax.Array], tuple[ChainState, TestOutcome]]
    first_rows: Callable[[jax.Array], jax.Array] | None = None
    """``first_rows(key)``: the rows of the data the step with ``key`` reads first (its test's first minibatch, or the
    first rows of a bound-based test's thinned pass: its contract's ``rows_ahead``), known before it runs, so an
    out-of-core run can read them ahead (``samplers.planned_runner``); None when the step reads rows it cannot name
    before (a gradient's minibatch). Empty for a test that reads no minibatch first."""


def minibatch_grad_log_target(
    model: Model,
    key: jax.Array,
    data: PyTree,
    n_data: int,
    batch_size: int,
    temperature: jax.Array,
    estimator: Estimator | None = None,
) -> GradientFn:
    """Gradient of ``log p0(theta) + (1/K) * estimate of sum_i log p(x_i|theta)`` on one fresh minibatch.

    ``batch_size=0`` (or ``>= N``) uses all ``N`` points; otherwise ``b`` distinct points are drawn
    without replacement from ``key``, independently of ``theta``. The estimate is the plain
    ``(N / b) sum_batch`` unless ``estimator`` says otherwise (a control variate: SGLD-CV).
    """
    log_lik_sum, scale = (estimator or plain()).log_lik_sum(model, key, data, n_data, batch_size)

    def log_target(theta: PyTree) -> jax.Array:
        return model.log_prior(theta) + log_lik_sum(theta) * (scale / temperature)

    return jax.grad(log_target)


def gradient_data_used(proposal: Proposal, n_data: int) -> int:
    """Data points a proposal's gradient evaluates per step (0 for gradient-free proposals)."""
    b = proposal.gradient_batch_size
    if b is None:
        return 0
    return n_data if uses_all_rows(b, n_data) else int(b)


def check_gradient_batch(proposal: Proposal) -> int | None:
    """``proposal.gradient_batch_size``: None or a non-negative integer."""
    b = proposal.gradient_batch_size
    return (
        None if b is None else check_int(b, "proposal.gradient_batch_size", 0, why="None for a gradient-free proposal")
    )


def build_kernel(
    model: Model, proposal: Proposal, test: AcceptanceTest, n_data: int, estimator: Estimator | None = None
) -> Kernel:
    """Combine a model, a proposal, an acceptance test and an estimator of ``Delta``'s data part into one MH transition.

    Args:
        model: The ``Model``.
        proposal: The ``Proposal`` (e.g. ``random_walk``, or ``Warmup.proposal``).
        test: The acceptance test (e.g. ``penalty_test()``).
        n_data: ``N``, the rows of the data the kernel will be given.
        estimator: How the log-likelihood difference is estimated: ``plain()`` if None, or a control variate
            (``taylor_proxy``, ``glm_proxy``, ``stratify``).

    Returns:
        The ``Kernel``: ``init(position)`` and ``step(key, state, data, temperature)``.
    """
    estimator = plain() if estimator is None else estimator
    n_population = estimator.population_size(n_data)  # rows the test's minibatch is drawn from
    test.validate(n_population)
    grad_batch = check_gradient_batch(proposal)
    grad_rows = gradient_data_used(proposal, n_data)
    grad_temperature_factor = float(
        test.temperature_factor(n_data)
    )  # a test that tempers by itself (MINT): the drift follows it

    def init(position: PyTree) -> ChainState:
        return ChainState(position=position, log_prior=jnp.asarray(model.log_prior(position)))

    def step(key: jax.Array, state: ChainState, data: PyTree, temperature: jax.Array) -> tuple[ChainState, TestOutcome]:
        k_prop, k_test = split_step(key)
        if grad_batch is None:
            candidate, log_q_ratio = proposal.sample(k_prop, state.position)
        else:
            k_grad = gradient_key(k_prop)  # the gradient minibatch; k_prop stays the noise key
            grad_fn = minibatch_grad_log_target(
                model, k_grad, data, n_data, grad_batch, temperature * grad_temperature_factor, estimator
            )
            candidate, log_q_ratio = proposal.sample(k_prop, state.position, grad_fn)
        lp_new = model.log_prior(candidate)
        psi = jnp.where(lp_new > -jnp.inf, lp_new - state.log_prior + log_q_ratio, -jnp.inf)
        stats = Statistics(
            log_ratio=estimator.log_ratio(model, state.position, candidate),
            data=estimator.population(data),
            n_data=n_population,
            psi=psi,
            temperature=temperature,
            known_sum=estimator.known_sum(state.position, candidate),
            bounds=estimator.residual_bounds(model, state.position, candidate),
        )
        outcome = test.decide(k_test, stats)
        if grad_rows:  # the gradient's rows are read outside the test's minibatch: count them
            outcome = outcome._replace(hidden_data=outcome.hidden_data + jnp.asarray(grad_rows, jnp.int32))
        new_state = jax.tree_util.tree_map(
            lambda new, old: jnp.where(outcome.accepted, new, old), ChainState(candidate, lp_new), state
        )
        return new_state, outcome

    ahead = contract(test).rows_ahead

    def first_rows(key: jax.Array) -> jax.Array:
        _, k_test = split_step(key)
        if ahead is None:
            rows = test.first_rows(k_test, n_population)
        else:
            rows = ahead(test, k_test, n_population, estimator.row_draw())
        return row_ids(estimator.population(None), rows)

    return Kernel(init=init, step=step, first_rows=first_rows if grad_batch is None else None)
