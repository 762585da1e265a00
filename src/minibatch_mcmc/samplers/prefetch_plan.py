"""The rows an MHminibatch run will read first at every step, for ``minibatch_mcmc.data.prefetch``."""

from __future__ import annotations

import jax
import numpy as np

from minibatch_mcmc.acceptance.mhminibatch import first_chunk_indices
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.samplers.keys import as_key, split_step, step_keys


def mhminibatch_plan(key: jax.Array | int, num_samples: int, num_chains: int, batch_size: int, n: int) -> np.ndarray:
    """First-chunk indices ``(num_samples, num_chains, m)`` that ``sample(..., test=mh_minibatch(m))`` will draw.

    Follows the run's key schedule (``step_keys``, then ``split_step``'s test key) into
    MHminibatch's ``first_chunk_indices``. A plan that stops matching only makes every prefetched
    gather a miss; it never alters the draws.
    """
    num_samples = check_int(num_samples, "num_samples", 1)
    num_chains = check_int(num_chains, "num_chains", 1)
    n = check_int(n, "n", 1)
    batch_size = check_int(batch_size, "batch_size", 1, n, why="the minibatch cannot exceed the data size n")
    base = as_key(key)

    def first_chunk(k: jax.Array) -> jax.Array:
        _, k_test = split_step(k)
        return first_chunk_indices(k_test, batch_size, n)

    def one_step(t: jax.Array) -> jax.Array:
        return jax.vmap(first_chunk)(step_keys(base, t, num_chains))

    return np.asarray(jax.jit(jax.vmap(one_step))(np.arange(num_samples, dtype=np.int32)))
