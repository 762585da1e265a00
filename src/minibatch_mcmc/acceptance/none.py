"""No acceptance test: every candidate inside the prior's support is accepted (plain SGLD, for contrast)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, no_checks, no_rows_first, untempered


class NoTest(NamedTuple):
    """Accept every candidate with a finite prior and proposal ratio; touches no data (biased for finite steps)."""

    name: str = "no_test"
    decision_rule = "none"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept iff ``psi > -inf`` (the candidate lies in the prior's support)."""
        del key
        dtype = jnp.result_type(stats.psi, jnp.float32)
        zero = jnp.zeros((), dtype)
        return TestOutcome(
            accepted=stats.psi > -jnp.inf,
            batch_size=jnp.zeros((), jnp.int32),
            s2=zero,
            epsilon=zero,
            delta_star=jnp.asarray(stats.psi, dtype),
            nonfinite=jnp.isnan(stats.psi),
            hidden_data=jnp.zeros((), jnp.int32),
            residual_sd=zero,
            pvalue_threshold=zero,
            half_width=zero,
        )


def no_test() -> NoTest:
    """The always-accept 'test' that turns a Langevin proposal into plain SGLD."""
    return NoTest()
