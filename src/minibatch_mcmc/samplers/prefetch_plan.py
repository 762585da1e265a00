"""The rows a run's acceptance test will read first at every step, for ``minibatch_mcmc.data.prefetch``."""

from __future__ import annotations

import jax
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.samplers.keys import as_run_key, split_step, step_keys


def prefetch_plan(test: AcceptanceTest, key: jax.Array | int, num_samples: int, num_chains: int, n: int) -> np.ndarray:
    """First-minibatch rows ``(num_samples, num_chains, m)`` that ``sample(..., test=test)`` will read.

    Follows the run's key schedule (``step_keys``, then ``split_step``'s test key) into the test's own
    ``first_rows``. A plan that stops matching only makes every prefetched gather a miss; it never
    alters the draws.
    """
    num_samples = check_int(num_samples, "num_samples", 1)
    num_chains = check_int(num_chains, "num_chains", 1)
    n = check_int(n, "n", 1)
    test.validate(n)
    base = as_run_key(key, num_chains)

    def first(k: jax.Array) -> jax.Array:
        _, k_test = split_step(k)
        return test.first_rows(k_test, n)

    def one_step(t: jax.Array) -> jax.Array:
        return jax.vmap(first)(step_keys(base, t, num_chains))

    plan = np.asarray(jax.jit(jax.vmap(one_step))(np.arange(num_samples, dtype=np.int32)))
    if plan.shape[-1] == 0:
        raise ValueError(
            f"test {test.name!r} reads no minibatch first (its first_rows is empty): there is nothing to prefetch"
        )
    return plan
