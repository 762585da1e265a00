"""The key schedule of a run: one base key, ``fold_in`` by step, split over chains, then per decision.

Step ``t`` of chain ``c`` uses ``step_keys(base_key, t, num_chains)[c]``: ``split(fold_in(base_key, t),
num_chains)[c]`` from one base key, or ``split(fold_in(base_key[c], t), 1)[0]`` from one base key per chain
(``as_run_key``), the schedule ``numpyro.infer.MCMC`` gives ``MinibatchMH``'s chains after it splits its key
``num_chains`` ways (one chain with one key: both read the same). The kernel splits that key
into a proposal key and a test key, and a gradient proposal draws its minibatch from a key folded out
of the proposal key. The driver, the non-finite replay, the prefetch plan and the library's one loop
(``scaled_runner.scan_steps``: sampling, tuning, the efficiency runs, CMINT, MINTEE, the AustereMH pilot) all read
the schedule from here, so they cannot drift apart; a run's set-up draws come from ``setup_keys``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def as_key(key: jax.Array | int) -> jax.Array:
    """A typed PRNG key from a seed, a typed key or a legacy ``uint32[2]`` key."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return jax.random.key(int(key))
    if isinstance(key, (jax.Array, np.ndarray)):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            if key.shape != ():
                raise ValueError(f"key must be a single PRNG key; got a key array of shape {key.shape}")
            return key
        if key.dtype == np.uint32 and key.shape == (2,):
            return jax.random.wrap_key_data(jnp.asarray(key))
    raise ValueError(f"key={key!r} must be an int seed or a jax PRNG key")


def as_run_key(key: jax.Array | int, num_chains: int) -> jax.Array:
    """A run's base key: one typed key (from ``as_key``), or a key array of shape ``(num_chains,)``, one per chain."""
    if isinstance(key, (jax.Array, np.ndarray)) and (
        (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.ndim == 1)
        or (key.dtype == np.uint32 and key.ndim == 2 and key.shape[1] == 2)
    ):
        keys = (
            key if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(jnp.asarray(key))
        )
        if keys.shape != (num_chains,):
            raise ValueError(
                f"a key array holds one key per chain; got {keys.shape[0]} keys for num_chains={num_chains}"
            )
        return keys
    return as_key(key)


def step_keys(base_key: jax.Array, t: jax.Array | int, num_chains: int) -> jax.Array:
    """The keys of step ``t``, one per chain: ``base_key`` folded with ``t`` and split ``num_chains`` ways, or
    with one base key per chain, each folded with ``t`` (and split once, as one chain of one key)."""
    if jnp.ndim(base_key):
        return jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, t), 1)[0])(base_key)
    return jax.random.split(jax.random.fold_in(base_key, t), num_chains)


def split_step(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One chain's step key split into the proposal key and the acceptance-test key."""
    k_proposal, k_test = jax.random.split(key)
    return k_proposal, k_test


def gradient_key(k_proposal: jax.Array) -> jax.Array:
    """The key of a gradient proposal's minibatch, folded out of the proposal key (which stays the noise key)."""
    return jax.random.fold_in(k_proposal, 1)


def setup_keys(base_key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A run's key split into the key of its set-up draws (starts, MINTEE's first minibatches) and its steps' base key."""
    k_setup, k_run = jax.random.split(base_key)
    return k_setup, k_run
