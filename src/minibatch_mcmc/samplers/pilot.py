"""AustereMH(c)'s pilot: the ``|mu_std|`` a short exact Metropolis run meets, run on the library's one loop."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.data.passes import full_data_sum
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.keys import as_key, split_step
from minibatch_mcmc.samplers.scaled_runner import scan_steps

PyTree = Any


def pilot_mu_std(
    model: Model,
    data: PyTree | DataSource,
    proposal: Proposal,
    position: PyTree,
    key: jax.Array | int,
    steps: int = 50,
    temperature: float = 1.0,
) -> np.ndarray:
    """``|mu_std|`` of ``steps`` proposals along an exact Metropolis run from ``position`` (for ``design_conservative``).

    ``mu_std = |mu - mu_0| sqrt(N) / sd`` from the full-data mean and s.d. of the tempered log-likelihood ratios
    (streamed in chunks: any data source, out-of-core ones included), ``mu_0 = (log u - psi) / N``; the chain moves
    on ``mu > mu_0``, the exact decision. It runs on ``scaled_runner.scan_steps`` with ``sample``'s key schedule (one
    chain): step ``t``'s key split into the proposal's key and ``u``'s.
    """
    steps = check_int(steps, "steps", 1)
    temperature = check_positive(temperature, "temperature")
    source = as_data_source(data)
    n = source.n

    def one(key: jax.Array, theta: PyTree, rows: PyTree) -> tuple[PyTree, jax.Array]:
        k_proposal, k_test = split_step(key)
        cand, log_q = proposal.sample(k_proposal, theta)
        psi = model.log_prior(cand) - model.log_prior(theta) + log_q

        def per_datum(r: PyTree) -> jax.Array:
            return (model.log_lik(cand, r) - model.log_lik(theta, r)) / temperature

        mu = full_data_sum(per_datum, rows, n)[0] / n
        sd = jnp.sqrt(full_data_sum(lambda r: (per_datum(r) - mu) ** 2, rows, n)[0] / max(n - 1, 1))
        mu0 = (jnp.log(jax.random.uniform(k_test, minval=1e-12)) - psi) / n
        moved = jax.tree_util.tree_map(lambda a, b: jnp.where(mu > mu0, a, b), cand, theta)
        return moved, jnp.abs(mu - mu0) * jnp.sqrt(jnp.float32(n)) / sd

    def step_all(t, keys, thetas, rows, temp, carry):
        moved, value = jax.vmap(one, in_axes=(0, 0, None))(keys, thetas, rows)
        return moved, {"mu_std": value}

    @jax.jit
    def run(base_key: jax.Array, thetas: PyTree, rows: PyTree) -> jax.Array:
        t = jnp.arange(steps, dtype=jnp.int32)
        return scan_steps(
            step_all, base_key, 1, thetas, rows, t, jnp.ones(steps, jnp.float32), emit=lambda s, r: r["mu_std"]
        )[1]

    thetas = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], position)  # one chain
    return np.asarray(run(as_key(key), thetas, source.arrays()), np.float64)[:, 0]
