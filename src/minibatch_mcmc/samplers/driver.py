"""The driver: run many chains of a kernel under ``lax.scan`` with ``vmap`` over chains."""

from __future__ import annotations

import time
import warnings
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.data.arrays import DataSource, as_data_source, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.kernel import ChainState, Kernel, build_kernel
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult

PyTree = Any


def _temperature_schedule(temperature: float | Sequence[float] | np.ndarray, num_samples: int) -> np.ndarray:
    """A per-step temperature array from a constant or a schedule of length ``num_samples``."""
    t = np.asarray(temperature, dtype=np.float64)
    if t.ndim == 0:
        t = np.full(num_samples, float(t))
    if t.shape != (num_samples,):
        raise ValueError(f"temperature schedule has shape {t.shape}; expected a scalar or shape ({num_samples},)")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"temperature must be positive and finite; got values in [{t.min()}, {t.max()}]")
    return t


def _check_initial(model: Model, data: PyTree, n: int, positions: PyTree, num_chains: int) -> None:
    """Fail early, with the chain and datum, if the start has a zero prior or a non-finite log-likelihood."""
    lp = np.asarray(jax.vmap(model.log_prior)(positions))
    if lp.shape != (num_chains,):
        raise ValueError(f"model.log_prior must return a scalar; got shape {lp.shape[1:]}")
    for c in range(num_chains):
        if not np.isfinite(lp[c]):
            raise ValueError(f"initial position of chain {c} has log prior {lp[c]}; start inside the prior's support")
    probe = take(data, jnp.arange(min(n, 4096)))
    try:
        ll = np.asarray(jax.vmap(model.log_lik, in_axes=(0, None))(positions, probe))
    except (TypeError, ValueError) as err:
        shapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), probe)
        pshapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)[1:]), positions)
        raise ValueError(
            f"model.log_lik failed on a batch with data shapes {shapes} and a position with shapes {pshapes}; "
            f"check that the data and the parameter match the model: {err}"
        ) from None
    if ll.shape != (num_chains, min(n, 4096)):
        raise ValueError(
            f"model.log_lik must return one value per datum, shape (b,); got {ll.shape[1:]} for a batch of {min(n, 4096)}"
        )
    bad = np.argwhere(~np.isfinite(ll))
    if bad.size:
        c, i = bad[0]
        raise ValueError(f"log-likelihood of datum {i} is {ll[c, i]} at the initial position of chain {c}")


def _locate_nonfinite(model: Model, data: PyTree, n: int, position: PyTree) -> str:
    """Find the first datum whose log-likelihood is non-finite at ``position`` (host-side scan)."""
    for start in range(0, n, 65536):
        idx = jnp.arange(start, min(n, start + 65536))
        ll = np.asarray(model.log_lik(position, take(data, idx)))
        bad = np.flatnonzero(~np.isfinite(ll))
        if bad.size:
            return f"; datum {start + int(bad[0])} has log-likelihood {ll[bad[0]]} at the chain's current position"
    return "; the current position's log-likelihoods are all finite, so the candidate produced it"


def _make_block_runner(kernel: Kernel, num_chains: int):
    """A jitted function running one block of steps for all chains under ``lax.scan``."""

    def one_step(carry: tuple[jax.Array, ChainState, PyTree], x: tuple[jax.Array, jax.Array]):
        base_key, states, data = carry
        t, temp = x
        keys = jax.random.split(jax.random.fold_in(base_key, t), num_chains)
        new_states, outcome = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(keys, states, data, temp)
        rec = {k: getattr(outcome, k) for k in RECORD_FIELDS}
        rec["nonfinite"] = outcome.nonfinite
        return (base_key, new_states, data), (new_states.position, rec)

    @jax.jit
    def run_block(base_key, states, data, steps, temps):
        (_, states, _), (positions, recs) = jax.lax.scan(one_step, (base_key, states, data), (steps, temps))
        return states, positions, recs

    return run_block


def sample(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    *,
    proposal: Proposal,
    test: AcceptanceTest,
    num_samples: int,
    key: jax.Array | int = 0,
    num_chains: int = 1,
    temperature: float | Sequence[float] | np.ndarray = 1.0,
    batched_init: bool = False,
    block_size: int = 250,
    progress: bool = True,
) -> SampleResult:
    """Draw ``num_samples`` MH steps per chain for ``num_chains`` vmapped chains.

    ``temperature`` is a constant ``K`` or one value per step (e.g. 100 then 1). Steps run in
    jitted blocks of ``block_size``; finished blocks are kept if the run is interrupted
    (Ctrl-C), and a non-finite log-likelihood stops the run with the step and chain named.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples={num_samples!r} must be a positive integer")
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) or num_chains < 1:
        raise ValueError(f"num_chains={num_chains!r} must be a positive integer")
    if not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be a positive integer")
    source = as_data_source(data)
    n = source.n
    arrays = source.arrays()
    temps = _temperature_schedule(temperature, int(num_samples))
    base_key = jax.random.key(key) if isinstance(key, (int, np.integer)) else key

    if batched_init:
        positions = jax.tree_util.tree_map(jnp.asarray, initial_position)
        lead = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(positions)}
        if lead != {num_chains}:
            raise ValueError(f"batched_init=True needs a leading axis of num_chains={num_chains} on every leaf; got {lead}")
    else:
        positions = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (num_chains,) + np.shape(x)), initial_position
        )
    for leaf in jax.tree_util.tree_leaves(positions):
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            raise ValueError(f"initial position must be floating point; got dtype {leaf.dtype}")
        if not bool(jnp.all(jnp.isfinite(leaf))):
            raise ValueError("initial position contains NaN or inf")
    _check_initial(model, arrays, n, positions, int(num_chains))

    kernel = build_kernel(model, proposal, test, n)
    states = jax.vmap(kernel.init)(positions)
    run_block = _make_block_runner(kernel, int(num_chains))

    pos_blocks: list = []
    rec_blocks: list = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(num_samples), desc=getattr(test, "name", "sampling"), unit="step", leave=False)
    interrupted = False
    start = time.perf_counter()
    try:
        done = 0
        while done < num_samples:
            length = min(int(block_size), int(num_samples) - done)
            steps = jnp.arange(done, done + length, dtype=jnp.int32)
            new_states, pos, recs = run_block(base_key, states, arrays, steps, jnp.asarray(temps[done : done + length], jnp.float32))
            recs = jax.device_get(recs)
            nonfinite = np.asarray(recs.pop("nonfinite"))
            if nonfinite.any():
                t, c = np.argwhere(nonfinite)[0]
                where = _locate_nonfinite(model, arrays, n, jax.tree_util.tree_map(lambda a: a[c], states.position))
                raise FloatingPointError(
                    f"non-finite log-likelihood ratio at step {done + int(t)}, chain {int(c)}{where}. "
                    "Check the data and the model's log_lik for NaN/inf (e.g. log(0))."
                )
            states = new_states
            pos_blocks.append(jax.device_get(pos))
            rec_blocks.append(recs)
            done += length
            if bar is not None:
                acc = float(np.mean(recs["accepted"]))
                bar.set_postfix(accept=f"{acc:.2f}", batch=f"{np.mean(recs['batch_size']):.0f}")
                bar.update(length)
    except KeyboardInterrupt:
        interrupted = True
        warnings.warn(f"sampling interrupted; returning the {sum(len(r['accepted']) for r in rec_blocks)} finished draws")
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - start
    if not rec_blocks:
        raise KeyboardInterrupt("sampling interrupted before the first block finished; nothing to return")

    def stack(*blocks: np.ndarray) -> np.ndarray:
        return np.swapaxes(np.concatenate(blocks, axis=0), 0, 1)

    all_pos = jax.tree_util.tree_map(stack, *pos_blocks)
    all_rec = {k: stack(*[r[k] for r in rec_blocks]) for k in RECORD_FIELDS}
    draws = all_rec["accepted"].shape[1]
    return SampleResult(
        positions=all_pos,
        records=all_rec,
        method=getattr(test, "name", type(test).__name__),
        n_data=n,
        temperature=temps[:draws],
        wall_time=wall,
        interrupted=interrupted,
    )
