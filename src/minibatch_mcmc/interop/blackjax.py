"""Our kernels as BlackJAX ``SamplingAlgorithm``s: ``init(position)`` and ``step(rng_key, state) -> (state, info)``.

The data set and the temperature are closed over, so ``blackjax.util.run_inference_algorithm`` and a
user's own ``lax.scan`` (or ``vmap`` over chains) drive the kernel like any BlackJAX algorithm. The
state is our ``ChainState`` (``position``, ``log_prior``); the info is the step's ``TestOutcome`` (the
per-step record: ``accepted``, ``batch_size``, ``delta_star``, ...). The key a step uses is the one the
caller passes, so draws follow the caller's key schedule, not the ``sample`` driver's.

BlackJAX is optional: without it the same two functions come back in a local ``SamplingAlgorithm``
NamedTuple with the same fields.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import AcceptanceTest, TestOutcome
from minibatch_mcmc.checks import check_positive
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.kernel import ChainState, build_kernel

PyTree = Any

__all__ = ["SamplingAlgorithm", "as_sampling_algorithm"]


class SamplingAlgorithm(NamedTuple):
    """``init(position, rng_key=None) -> state`` and ``step(rng_key, state) -> (state, info)``: BlackJAX's pair."""

    init: Callable[..., ChainState]
    step: Callable[[jax.Array, ChainState], tuple[ChainState, TestOutcome]]


def _algorithm_class() -> type:
    """BlackJAX's ``SamplingAlgorithm`` when BlackJAX is installed, else the local NamedTuple of the same fields."""
    try:
        from blackjax.base import SamplingAlgorithm as BlackJAXSamplingAlgorithm
    except ImportError:
        return SamplingAlgorithm
    return BlackJAXSamplingAlgorithm


def as_sampling_algorithm(
    model: Model,
    data: PyTree | DataSource,
    proposal: Proposal,
    test: AcceptanceTest,
    estimator: Estimator | None = None,
    temperature: float = 1.0,
) -> SamplingAlgorithm:
    """One MH kernel (``build_kernel``) over fixed ``data`` and ``temperature`` as a BlackJAX ``SamplingAlgorithm``.

    ``init`` accepts and ignores BlackJAX's optional ``rng_key``; ``step`` is pure and jit/vmap/scan-safe.
    The info of each step is the ``TestOutcome`` with every field an array.
    """
    temperature = check_positive(temperature, "temperature", why="the likelihood is raised to 1/temperature")
    source = as_data_source(data)
    arrays = source.arrays()
    kernel = build_kernel(model, proposal, test, source.n, estimator)
    temp = jnp.asarray(temperature, jnp.float32)

    def init(position: PyTree, rng_key: jax.Array | None = None) -> ChainState:
        del rng_key  # the kernel's state is deterministic in the position
        return kernel.init(position)

    def step(rng_key: jax.Array, state: ChainState) -> tuple[ChainState, TestOutcome]:
        new_state, outcome = kernel.step(rng_key, state, arrays, temp)
        return new_state, TestOutcome(*(jnp.asarray(v) for v in outcome))

    return _algorithm_class()(init, step)
