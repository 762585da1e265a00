"""A run's start, checked before anything compiles its chains: the run's arguments, the per-step temperature schedule,
one finite start per chain, and the model at those starts (a finite prior, one finite log-likelihood per datum, the same
values from two traces)."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_bool, check_int
from minibatch_mcmc.data.arrays import RowsExcept, is_host_data, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.contract import impure_message, same_values
from minibatch_mcmc.samplers.checkpoint import describe_data

PyTree = Any


def temperature_schedule(temperature: float | Sequence[float] | np.ndarray, num_samples: int) -> np.ndarray:
    """A per-step temperature array from a constant or a schedule of length ``num_samples``."""
    t = np.asarray(temperature, dtype=np.float64)
    if t.ndim == 0:
        t = np.full(num_samples, float(t))
    if t.shape != (num_samples,):
        raise ValueError(f"temperature schedule has shape {t.shape}; expected a scalar or shape ({num_samples},)")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"temperature must be positive and finite; got values in [{t.min()}, {t.max()}]")
    return t


def check_initial(model: Model, data: PyTree, n: int, positions: PyTree, num_chains: int) -> None:
    """Fail early, with the chain and datum, if the start has a zero prior or a non-finite log-likelihood."""
    m = min(n, 4096)
    in_memory = not (is_host_data(data) or isinstance(data, RowsExcept))  # sliced inside the check: no compiled gather
    probe = take(data, jnp.arange(m)) if model.check_shapes is not None or not in_memory else None
    if model.check_shapes is not None:  # the model's own shape check, once, on chain 0's start
        try:
            model.check_shapes(jax.tree_util.tree_map(lambda a: a[0], positions), probe)
        except ValueError as err:
            raise ValueError(f"{err} (data: {describe_data(data)})") from None
    traced = []

    def densities(position: PyTree, rows: PyTree) -> tuple[jax.Array, jax.Array, jax.Array]:
        rows = jax.tree_util.tree_map(lambda a: a[:m], rows) if probe is None else rows
        prior = model.log_prior(position)
        traced.append(True)  # the errors below are the likelihood's
        return prior, model.log_lik(position, rows), model.log_lik(position, rows)  # traced twice: np.random differs

    try:  # prior and likelihood in one compiled function: op by op, a NumPyro model took seconds
        rows = data if probe is None else probe
        lp, ll, again = (np.asarray(a) for a in jax.jit(jax.vmap(densities, in_axes=(0, None)))(positions, rows))
    except (KeyError, TypeError, ValueError) as err:
        if not traced:  # the prior's own error
            raise
        raise _likelihood_error(err, data, take(data, jnp.arange(m)) if probe is None else probe, positions) from None
    if lp.shape != (num_chains,):
        raise ValueError(f"model.log_prior must return a scalar; got shape {lp.shape[1:]}")
    for c in range(num_chains):
        if not np.isfinite(lp[c]):
            raise ValueError(f"initial position of chain {c} has log prior {lp[c]}; start inside the prior's support")
    if ll.shape != (num_chains, m):
        raise ValueError(
            f"model.log_lik must return one value per datum, shape (b,); got {ll.shape[1:]} for a batch of {m}"
        )
    bad = np.argwhere(~np.isfinite(ll))
    if bad.size:
        c, i = bad[0]
        raise ValueError(f"log-likelihood of datum {i} is {ll[c, i]} at the initial position of chain {c}")
    if not same_values(ll, again):
        raise ValueError(impure_message(model.name, "log_lik", ll, again))


def _likelihood_error(err: Exception, data: PyTree, probe: PyTree, positions: PyTree) -> ValueError:
    """The error for ``model.log_lik`` failing at the start: the data column it missed, or the shapes it got."""
    if isinstance(err, KeyError):
        keys = sorted(probe) if isinstance(probe, dict) else type(probe).__name__
        return ValueError(
            f"model.log_lik reads data column {err} but the data ({describe_data(data)}) have columns {keys}"
        )
    shapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), probe)
    pshapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)[1:]), positions)
    return ValueError(
        f"model.log_lik failed on a batch with data shapes {shapes} and a position with shapes {pshapes}; "
        f"check that the data and the parameter match the model: {err}"
    )


def check_args(
    num_samples, num_chains, block_size, resume, checkpoint_dir, devices, data_sharding
) -> tuple[int, int, int]:
    """``num_samples``, ``num_chains`` and ``block_size`` as ints, after checking them and the run options."""
    num_samples = check_int(num_samples, "num_samples", 1)
    num_chains = check_int(num_chains, "num_chains", 1)
    block_size = check_int(block_size, "block_size", 1)
    if check_bool(resume, "resume") and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir (the directory the interrupted run wrote to)")
    if data_sharding is not None and devices is None:
        raise ValueError("data_sharding needs devices (the mesh the chains run on)")
    return num_samples, num_chains, block_size


def initial_positions(initial_position: PyTree, num_chains: int, batched_init: bool) -> PyTree:
    """One finite floating-point start per chain: ``initial_position`` broadcast, or as given with ``batched_init``."""
    if batched_init:
        positions = jax.tree_util.tree_map(jnp.asarray, initial_position)
        lead = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(positions)}
        if lead != {num_chains}:
            raise ValueError(
                f"batched_init=True needs a leading axis of num_chains={num_chains} on every leaf; got {lead}"
            )
    else:
        positions = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (num_chains,) + np.shape(x)), initial_position
        )
    for leaf in jax.tree_util.tree_leaves(positions):
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            raise ValueError(f"initial position must be floating point; got dtype {leaf.dtype}")
        if not np.all(np.isfinite(np.asarray(leaf))):  # on the host: no compiled check per leaf shape
            raise ValueError("initial position contains NaN or inf")
    return positions
