"""Baselines for Li and Wong Section 4.3.2: SGD and SGD-momentum (optax) and plain SGLD, epoch by epoch.

Each epoch sweeps a fresh random permutation of the training set in minibatches of ``b``
(``N // b`` steps; the remainder is skipped) inside one jitted ``lax.scan``. SGD and SGD-M minimise
the mean negative log-likelihood of a minibatch plus ``(l2 / 2) ||W||^2`` on the weights (not the
biases). SGLD follows ``theta' = theta + (alpha / 2) grad[log p0 + (N / b) sum_batch log p] + sqrt(alpha) z``
with ``alpha = 2 lr / N``, so ``lr`` is the step on the mean log-likelihood, as for SGD, and no
acceptance test is applied.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int, check_positive, check_real
from minibatch_mcmc.models.base import Model

PyTree = Any


def sgd_optimizer(learning_rate: float, momentum: float = 0.0, l2: float = 0.0, decay_mask: PyTree | None = None):
    """``optax.sgd`` (heavy-ball momentum when ``momentum > 0``) with weight decay ``l2`` on the masked leaves."""
    lr = check_positive(learning_rate, "learning_rate")
    check_real(momentum, "momentum", 0.0, 1.0, high_open=True, why="0 is plain SGD")
    check_real(l2, "l2", 0.0)
    parts = [optax.add_decayed_weights(float(l2), mask=decay_mask)] if l2 > 0 else []
    parts.append(optax.sgd(lr, momentum=float(momentum) if momentum > 0 else None))
    return optax.chain(*parts)


def weights_mask(params: tuple) -> tuple:
    """True on every layer's ``"w"`` and False on its ``"b"``: the L2 penalty acts on weights only."""
    return tuple({k: k == "w" for k in layer} for layer in params)


def _permuted_batches(key: jax.Array, n: int, batch_size: int) -> jax.Array:
    """One epoch's minibatch indices: a random permutation cut into ``N // b`` rows of ``b``."""
    steps = n // batch_size
    return jax.random.permutation(key, n)[: steps * batch_size].reshape(steps, batch_size)


class SGDEpoch(NamedTuple):
    """Jitted one-epoch update and the optimizer's initial state."""

    run: Callable[[jax.Array, PyTree, PyTree, PyTree], tuple[PyTree, PyTree, jax.Array]]
    """``run(key, params, opt_state, data) -> (params, opt_state, mean minibatch loss)``."""
    init: Callable[[PyTree], PyTree]
    """``init(params) -> opt_state``."""


def make_sgd_epoch(model: Model, n_data: int, batch_size: int, optimizer: optax.GradientTransformation) -> SGDEpoch:
    """One epoch of ``optimizer`` on the mean negative log-likelihood of permuted minibatches."""
    b = check_int(batch_size, "batch_size", 1, n_data)

    def loss(params: PyTree, batch: PyTree) -> jax.Array:
        return -jnp.mean(model.log_lik(params, batch))

    @jax.jit
    def run(key: jax.Array, params: PyTree, opt_state: PyTree, data: PyTree):
        def body(carry, idx):
            p, s = carry
            batch = jax.tree_util.tree_map(lambda a: jnp.take(a, idx, axis=0), data)
            value, grads = jax.value_and_grad(loss)(p, batch)
            updates, s = optimizer.update(grads, s, p)
            return (optax.apply_updates(p, updates), s), value

        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), _permuted_batches(key, n_data, b))
        return params, opt_state, jnp.mean(losses)

    return SGDEpoch(run=run, init=optimizer.init)


def make_sgld_epoch(
    model: Model, n_data: int, batch_size: int
) -> Callable[[jax.Array, PyTree, PyTree, jax.Array], tuple[PyTree, PyTree]]:
    """Jitted ``run(key, params, data, lr) -> (params, sum of the epoch's samples)`` for plain SGLD, ``alpha = 2 lr / N``."""
    b = check_int(batch_size, "batch_size", 1, n_data)

    def log_target(params: PyTree, batch: PyTree) -> jax.Array:
        return model.log_prior(params) + (n_data / b) * jnp.sum(model.log_lik(params, batch))

    @jax.jit
    def run(key: jax.Array, params: PyTree, data: PyTree, lr: jax.Array):
        alpha = 2.0 * lr / n_data
        k_perm, k_noise = jax.random.split(key)

        def body(carry, x):
            p, total = carry
            idx, t = x
            batch = jax.tree_util.tree_map(lambda a: jnp.take(a, idx, axis=0), data)
            flat, unravel = ravel_pytree(p)
            g = ravel_pytree(jax.grad(log_target)(p, batch))[0]
            z = jax.random.normal(jax.random.fold_in(k_noise, t), flat.shape, flat.dtype)
            p = unravel(flat + 0.5 * alpha * g + jnp.sqrt(alpha) * z)
            return (p, jax.tree_util.tree_map(jnp.add, total, p)), None

        idx = _permuted_batches(k_perm, n_data, b)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        (params, total), _ = jax.lax.scan(body, (params, zeros), (idx, jnp.arange(idx.shape[0])))
        return params, total

    return run
