"""Exact full-data tests: Metropolis (``u < min(1, e^Delta)``) and Barker (``u < sigmoid(Delta)``)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import (
    Statistics,
    TestOutcome,
    exact_delta,
    full_data_outcome,
    no_checks,
    no_rows_first,
    untempered,
)


class MetropolisTest(NamedTuple):
    """Full-data Metropolis-Hastings test: accept iff ``log u < Delta``."""

    name: str = "metropolis"
    decision_rule = "metropolis"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept with probability ``min(1, exp(Delta))`` using all ``N`` data points."""
        delta, bad = exact_delta(stats)
        log_u = jnp.log(jax.random.uniform(key, (), delta.dtype, minval=jnp.finfo(delta.dtype).tiny))
        return full_data_outcome(log_u < delta, delta, bad, stats.n_data)


class BarkerTest(NamedTuple):
    """Full-data Barker (logistic) test: accept iff ``Delta + X_log > 0`` with ``X_log`` standard logistic."""

    name: str = "barker"
    decision_rule = "barker"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept with probability ``sigmoid(Delta)`` using all ``N`` data points."""
        delta, bad = exact_delta(stats)
        x_log = jax.random.logistic(key, (), delta.dtype)
        return full_data_outcome(delta + x_log > 0, delta, bad, stats.n_data)
