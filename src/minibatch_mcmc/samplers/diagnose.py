"""Naming the cause of a non-finite log-likelihood ratio: the step, the chain and the datum."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.keys import split_step, step_keys

PyTree = Any

SCAN_ROWS = 65536
"""Rows per host-side read when looking for a non-finite log-likelihood."""


def first_nonfinite(model: Model, data: PyTree, n: int, position: PyTree) -> tuple[int, float] | None:
    """The first datum whose log-likelihood is non-finite at ``position`` and its value (host-side scan)."""
    for start in range(0, n, SCAN_ROWS):
        idx = jnp.arange(start, min(n, start + SCAN_ROWS))
        ll = np.asarray(model.log_lik(position, take(data, idx)))
        bad = np.flatnonzero(~np.isfinite(ll))
        if bad.size:
            return start + int(bad[0]), float(ll[bad[0]])
    return None


def locate_nonfinite(model: Model, data: PyTree, n: int, position: PyTree, candidate: PyTree | None = None) -> str:
    """Name the datum whose log-likelihood is non-finite at the chain's position, or else at the candidate."""
    found = first_nonfinite(model, data, n, position)
    if found is not None:
        return f"; datum {found[0]} has log-likelihood {found[1]} at the chain's current position"
    if candidate is not None:
        found = first_nonfinite(model, data, n, candidate)
        if found is not None:
            return f"; datum {found[0]} has log-likelihood {found[1]} at the proposed candidate"
    return "; the current position's log-likelihoods are all finite, so the candidate produced it"


@contextlib.contextmanager
def bad_rows_named(model: Model, source: DataSource, *positions: PyTree) -> Iterator[None]:
    """Inside: a ``ValueError`` about a non-finite value is re-raised naming the first datum whose log-likelihood
    is non-finite at one of ``positions`` (a warm-up phase's start points), when there is one."""
    try:
        yield
    except ValueError as err:
        found = next((f for f in (first_nonfinite(model, source.arrays(), source.n, p) for p in positions) if f), None)
        if found is None or "non-finite" not in str(err):
            raise
        raise ValueError(
            f"{err}; datum {found[0]} (row {found[0]} of the data) has log-likelihood {found[1]}: check that row"
        ) from err


def replay_candidate(proposal: Proposal, base_key: jax.Array, step: int, chain: int, num_chains: int, position: PyTree):
    """The candidate a gradient-free proposal made at ``step`` for ``chain`` (same key path as the kernel), else None."""
    if proposal.gradient_batch_size is not None:
        return None
    k_proposal, _ = split_step(step_keys(base_key, step, num_chains)[chain])
    try:
        return proposal.sample(k_proposal, jax.tree_util.tree_map(jnp.asarray, position))[0]
    except Exception:  # a replay is a diagnostic aid only
        return None


def nonfinite_error(
    model: Model,
    proposal: Proposal,
    source: DataSource,
    base_key: jax.Array,
    num_chains: int,
    block_start: PyTree,
    block_positions: PyTree,
    nonfinite: np.ndarray,
    done: int,
) -> FloatingPointError:
    """The error for the first ``(step, chain)`` flagged in a block's ``nonfinite`` records, naming the datum.

    ``block_start`` holds the chains' positions before the block (step ``done``), ``block_positions``
    the block's draws ``(step, chain, ...)``; together they give the chain's position before the bad step.
    """
    t, c = (int(i) for i in np.argwhere(nonfinite)[0])
    position = jax.tree_util.tree_map(lambda a: np.asarray(a)[c], block_start)
    if t > 0:
        position = jax.tree_util.tree_map(lambda a: np.asarray(a)[t - 1, c], jax.device_get(block_positions))
    candidate = replay_candidate(proposal, base_key, done + t, c, num_chains, position)
    where = locate_nonfinite(model, source.arrays(), source.n, position, candidate)
    return FloatingPointError(
        f"non-finite log-likelihood ratio at step {done + t}, chain {c}{where}. "
        "Check the data and the model's log_lik for NaN/inf (e.g. log(0))."
    )
