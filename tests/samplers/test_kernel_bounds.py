"""The kernel hands an estimator's per-datum bounds to the acceptance test (the input bound-based tests read)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import ResidualBounds, Statistics, TestOutcome, no_checks, no_rows_first, untempered
from minibatch_mcmc.control_variates.base import PlainDifference
from minibatch_mcmc.models import Model
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel

N = 5


class BoundedPlain(NamedTuple):
    """The plain estimator with the bound ``|x_i| |theta' - theta|`` on ``|log_ratio_i|`` of the model below."""

    name: str = "bounded_plain"

    def log_ratio(self, model, current, candidate):
        return PlainDifference().log_ratio(model, current, candidate)

    def known_sum(self, current, candidate):
        return 0.0

    def population(self, data):
        return data

    def population_size(self, n_data):
        return n_data

    def residual_bounds(self, model, current, candidate):
        step = jnp.abs(candidate - current)
        return ResidualBounds(
            per_datum=lambda rows: jnp.abs(rows) * step, total=jnp.float32(15.0) * step, largest=5.0 * step
        )

    def row_draw(self):
        return None

    def subtracts_rows(self):
        return PlainDifference().subtracts_rows()

    def log_lik_sum(self, model, key, data, n_data, batch_size):
        return PlainDifference().log_lik_sum(model, key, data, n_data, batch_size)


class ReadBounds(NamedTuple):
    """A probe test: records the bound sum as ``delta_star`` and whether every term lies within its bound."""

    name: str = "read_bounds"
    decision_rule = "none"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        within = jnp.all(jnp.abs(stats.log_ratio(stats.data)) <= stats.bounds.per_datum(stats.data) * (1 + 1e-6))
        zero = jnp.zeros((), jnp.float32)
        return TestOutcome(within, jnp.asarray(N, jnp.int32), zero, zero, stats.bounds.total, jnp.zeros((), bool))


def test_kernel_passes_the_estimators_bounds_to_the_test():
    model = Model(log_prior=lambda t: -0.5 * t**2, log_lik=lambda t, x: t * x, name="linear")
    data = jnp.arange(1.0, N + 1.0)  # sum |x_i| = 15
    kernel = build_kernel(model, random_walk(scale=0.3), ReadBounds(), N, BoundedPlain())
    state = kernel.init(jnp.float32(0.2))
    new, out = jax.jit(kernel.step)(jax.random.key(0), state, data, jnp.float32(1.0))
    assert bool(out.accepted)  # every |log_ratio_i| within its bound
    np.testing.assert_allclose(float(out.delta_star), 15.0 * abs(float(new.position) - 0.2), rtol=1e-6)
    assert float(out.delta_star) > 0
