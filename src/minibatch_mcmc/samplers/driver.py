"""The driver: run many chains of a kernel under ``lax.scan`` with ``vmap`` over chains."""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest, temperature_factor
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.data.arrays import DataSource, as_data_source, is_host_data, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers import checkpoint
from minibatch_mcmc.samplers.kernel import ChainState, Kernel, build_kernel
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult
from minibatch_mcmc.samplers.sharding import ChainLayout, chain_layout, place_data, shard_chains

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


def _first_nonfinite(model: Model, data: PyTree, n: int, position: PyTree) -> tuple[int, float] | None:
    """The first datum whose log-likelihood is non-finite at ``position`` and its value (host-side scan)."""
    for start in range(0, n, 65536):
        idx = jnp.arange(start, min(n, start + 65536))
        ll = np.asarray(model.log_lik(position, take(data, idx)))
        bad = np.flatnonzero(~np.isfinite(ll))
        if bad.size:
            return start + int(bad[0]), float(ll[bad[0]])
    return None


def _locate_nonfinite(model: Model, data: PyTree, n: int, position: PyTree, candidate: PyTree | None = None) -> str:
    """Name the datum whose log-likelihood is non-finite at the chain's position, or else at the candidate."""
    found = _first_nonfinite(model, data, n, position)
    if found is not None:
        return f"; datum {found[0]} has log-likelihood {found[1]} at the chain's current position"
    if candidate is not None:
        found = _first_nonfinite(model, data, n, candidate)
        if found is not None:
            return f"; datum {found[0]} has log-likelihood {found[1]} at the proposed candidate"
    return "; the current position's log-likelihoods are all finite, so the candidate produced it"


def _replay_candidate(proposal: Proposal, base_key: jax.Array, step: int, chain: int, num_chains: int, position: PyTree):
    """The candidate a gradient-free proposal made at ``step`` for ``chain`` (same key path as the kernel), else None."""
    if getattr(proposal, "gradient_batch_size", None) is not None:
        return None
    key = jax.random.split(jax.random.fold_in(base_key, step), num_chains)[chain]
    k_prop, _ = jax.random.split(key)
    try:
        return proposal.sample(k_prop, jax.tree_util.tree_map(jnp.asarray, position))[0]
    except Exception:  # a replay is a diagnostic aid only
        return None


def _make_block_runner(kernel: Kernel, num_chains: int, layout: ChainLayout | None = None):
    """A jitted function running one block of steps for all chains under ``lax.scan``.

    With a ``layout`` the chain axis of the states stays split over the devices of its mesh; the
    keys are split over all ``num_chains`` before that, so they do not depend on the layout.
    """

    def keep_on_chains(tree: PyTree) -> PyTree:
        if layout is None:
            return tree
        return jax.lax.with_sharding_constraint(tree, layout.chains)

    def one_step(carry: tuple[jax.Array, ChainState, PyTree], x: tuple[jax.Array, jax.Array]):
        base_key, states, data = carry
        t, temp = x
        keys = keep_on_chains(jax.random.split(jax.random.fold_in(base_key, t), num_chains))
        new_states, outcome = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(keys, states, data, temp)
        new_states = keep_on_chains(new_states)
        rec = {k: getattr(outcome, k) for k in RECORD_FIELDS}
        rec["nonfinite"] = outcome.nonfinite
        return (base_key, new_states, data), (new_states.position, rec)

    @jax.jit
    def run_block(base_key, states, data, steps, temps):
        (_, states, _), (positions, recs) = jax.lax.scan(one_step, (base_key, states, data), (steps, temps))
        return states, positions, recs

    return run_block


def as_key(key: jax.Array | int) -> jax.Array:
    """A typed PRNG key from a seed, a typed key or a legacy ``uint32[2]`` key."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return jax.random.key(int(key))
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"key must be a single PRNG key; got a key array of shape {key.shape}")
        return key
    if key.dtype == jnp.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise ValueError(f"key={key!r} must be an int seed or a jax PRNG key")


def _restore(chunks: list[checkpoint.Chunk], states: ChainState, temps: np.ndarray, num_samples: int, where: str):
    """States, finished blocks and step counter from the chunks of a checkpoint."""
    done = chunks[-1].end
    if done > num_samples:
        raise ValueError(f"checkpoint {where} already holds {done} steps, more than num_samples={num_samples}")
    saved_temps = np.concatenate([c.temperature for c in chunks])
    if not np.array_equal(saved_temps.astype(np.float32), temps[:done].astype(np.float32)):
        t = int(np.flatnonzero(saved_temps.astype(np.float32) != temps[:done].astype(np.float32))[0])
        raise ValueError(
            f"cannot resume {where}: the temperature at step {t} was {saved_temps[t]} in the checkpoint but is {temps[t]} now"
        )
    leaves, treedef = jax.tree_util.tree_flatten(states)
    saved = chunks[-1].state
    if len(saved) != len(leaves) or any(np.shape(a) != np.shape(b) for a, b in zip(saved, leaves)):
        raise ValueError(f"cannot resume {where}: its chain states do not match this kernel's state layout")
    restored = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(a, b.dtype) for a, b in zip(saved, leaves)])
    pos_treedef = jax.tree_util.tree_structure(states.position)
    pos_blocks = [jax.tree_util.tree_unflatten(pos_treedef, c.positions) for c in chunks]
    rec_blocks = [{k: c.records[k] for k in RECORD_FIELDS} for c in chunks]
    return restored, pos_blocks, rec_blocks, done, sum(c.wall_time for c in chunks)


def sample(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    *,
    proposal: Proposal,
    test: AcceptanceTest,
    num_samples: int,
    estimator: Estimator | None = None,
    key: jax.Array | int = 0,
    num_chains: int = 1,
    temperature: float | Sequence[float] | np.ndarray = 1.0,
    batched_init: bool = False,
    block_size: int = 250,
    progress: bool = True,
    devices: Sequence[jax.Device] | int | str | None = None,
    data_sharding: Any = None,
    checkpoint_dir: str | os.PathLike | None = None,
    resume: bool = False,
) -> SampleResult:
    """Draw ``num_samples`` MH steps per chain for ``num_chains`` vmapped chains.

    ``estimator`` is how the kernel estimates the log-likelihood difference: the plain per-datum
    ratio by default, or a control variate (``control_variates.taylor_proxy``) for temperature 1 on
    tall data. ``temperature`` is a constant ``K`` or one value per step (e.g. 100 then 1). Steps run in
    jitted blocks of ``block_size``; finished blocks are kept if the run is interrupted
    (Ctrl-C), and a non-finite log-likelihood stops the run with the step and chain named.

    ``devices`` (a list of devices, a count, or ``"all"``) splits the chains over a 1-D device mesh
    (``num_chains`` must be a multiple of the device count); the data are replicated unless
    ``data_sharding`` says otherwise. The draws do not depend on the layout. With
    ``checkpoint_dir`` every finished block is written there; ``resume=True`` reloads the finished
    blocks and continues, drawing exactly what an uninterrupted run with the same seed draws.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples={num_samples!r} must be a positive integer")
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) or num_chains < 1:
        raise ValueError(f"num_chains={num_chains!r} must be a positive integer")
    if not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be a positive integer")
    if not isinstance(resume, bool):
        raise ValueError(f"resume={resume!r} must be True or False")
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir (the directory the interrupted run wrote to)")
    if data_sharding is not None and devices is None:
        raise ValueError("data_sharding needs devices (the mesh the chains run on)")
    num_samples, num_chains = int(num_samples), int(num_chains)
    layout = None if devices is None else chain_layout(devices, num_chains)
    source = as_data_source(data)
    n = source.n
    arrays = source.arrays()
    temps = _temperature_schedule(temperature, num_samples)
    base_key = as_key(key)

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
    _check_initial(model, arrays, n, positions, num_chains)

    kernel = build_kernel(model, proposal, test, n, estimator)
    states = jax.vmap(kernel.init)(positions)
    run_block = _make_block_runner(kernel, num_chains, layout)

    pos_blocks: list = []
    rec_blocks: list = []
    done = 0
    previous_wall = 0.0
    if checkpoint_dir is not None:
        settings = checkpoint.run_settings(
            key=base_key, model=model, test=test, proposal=proposal, num_chains=num_chains, n_data=n, positions=positions,
            estimator=estimator,
        )
        chunks = checkpoint.open_checkpoint(checkpoint_dir, settings, resume)
        if chunks:
            states, pos_blocks, rec_blocks, done, previous_wall = _restore(chunks, states, temps, num_samples, str(checkpoint_dir))
    if layout is not None:
        states = shard_chains(states, layout)
        if not is_host_data(arrays):  # out-of-core sources stay on the host
            arrays = place_data(arrays, layout, data_sharding)
        base_key = jax.device_put(base_key, layout.replicated)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_samples, initial=done, desc=getattr(test, "name", "sampling"), unit="step", leave=False)
    interrupted = False
    start = time.perf_counter()
    try:
        while done < num_samples:
            block_start = time.perf_counter()
            length = min(int(block_size), num_samples - done)
            steps = jnp.arange(done, done + length, dtype=jnp.int32)
            block_temps = temps[done : done + length]
            new_states, pos, recs = run_block(base_key, states, arrays, steps, jnp.asarray(block_temps, jnp.float32))
            recs = jax.device_get(recs)
            nonfinite = np.asarray(recs.pop("nonfinite"))
            if nonfinite.any():
                t, c = np.argwhere(nonfinite)[0]
                t_abs = done + int(t)
                # replay the block's finished steps to find chain c's position before the bad step
                position = jax.tree_util.tree_map(lambda a: np.asarray(a)[c], states.position)
                if t > 0:
                    position = jax.tree_util.tree_map(lambda a: np.asarray(a)[int(t) - 1, c], jax.device_get(pos))
                candidate = _replay_candidate(proposal, as_key(key), t_abs, int(c), num_chains, position)
                where = _locate_nonfinite(model, source.arrays(), n, position, candidate)
                raise FloatingPointError(
                    f"non-finite log-likelihood ratio at step {t_abs}, chain {int(c)}{where}. "
                    "Check the data and the model's log_lik for NaN/inf (e.g. log(0))."
                )
            states = new_states
            pos = jax.device_get(pos)
            pos_blocks.append(pos)
            rec_blocks.append(recs)
            if checkpoint_dir is not None:
                checkpoint.write_chunk(
                    checkpoint_dir,
                    checkpoint.Chunk(
                        start=done,
                        end=done + length,
                        positions=[np.asarray(x) for x in jax.tree_util.tree_leaves(pos)],
                        records=recs,
                        temperature=block_temps,
                        state=[np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(states))],
                        wall_time=time.perf_counter() - block_start,
                    ),
                )
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
    wall = previous_wall + time.perf_counter() - start
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
        temperature=temps[:draws] * temperature_factor(test, n),  # a test that tempers by itself (MINT)
        wall_time=wall,
        interrupted=interrupted,
    )
