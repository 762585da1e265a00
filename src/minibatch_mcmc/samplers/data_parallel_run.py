"""``sample_data_parallel``: the data-parallel kernel (``data_parallel.py``) run in blocks, with checkpoints written by
process 0 and read by every process on resume.

A checkpoint directory holds ``manifest.json`` (the run's settings: chains, steps, minibatch, temperature, the shards'
sizes and draws, the key's data, the blocks written so far) and one ``block-START-END.npz`` per finished block (its
positions and records and the chains' states after it). Only process 0 writes; every process reads the directory on
resume, so it must be one directory every process sees (a shared file system); all processes wait for each block's
file before going on, and learn in that same wait whether process 0 could write it: a failed write stops every process
with an error at once, not only process 0 while the others wait for it until the coordinator's timeout. The manifest
is rewritten after each block's file, so a block missing from it (a crash between the two) is written again.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.compiling import RUN_WORK, compile_options, use_compilation_cache
from minibatch_mcmc.control_variates.base import Estimator, plain
from minibatch_mcmc.data.host import is_host_data
from minibatch_mcmc.data.shards import agreed
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.data_parallel import (
    check_parts,
    data_parallel_kernel,
    layout_shards,
    local_copy,
    make_block_runner,
    place_states,
)
from minibatch_mcmc.samplers.kernel import ChainState
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult, constrain_draws
from minibatch_mcmc.samplers.safe_files import write_bytes

PyTree = Any
MANIFEST = "manifest.json"
SAFE = "the blocks listed in manifest.json are intact"


def run_manifest(
    num_chains: int,
    num_samples: int,
    block_size: int,
    batch_size: int,
    temperature: float,
    key: jax.Array,
    sizes: np.ndarray,
    draws: np.ndarray,
) -> dict:
    """The settings a resumed run must repeat (JSON-able)."""
    return {
        "num_chains": num_chains,
        "num_samples": num_samples,
        "block_size": block_size,
        "batch_size": batch_size,
        "temperature": temperature,
        "key": np.asarray(jax.random.key_data(key)).tolist(),
        "shard_sizes": sizes.tolist(),
        "shard_draws": draws.tolist(),
        "blocks": [],
    }


def read_manifest(directory: Path, settings: dict, resume: bool) -> list[list[int]]:
    """The blocks already written (``[start, end]``) when resuming a run with the same settings; else none."""
    path = directory / MANIFEST
    if not path.exists():
        return []
    if not resume:
        raise ValueError(
            f"{directory} already holds a data-parallel run ({MANIFEST}); pass resume=True to continue it "
            "or choose an empty directory"
        )
    saved = json.loads(path.read_text())
    differ = sorted(k for k in settings if k != "blocks" and saved.get(k) != settings[k])
    if differ:
        raise ValueError(
            f"cannot resume {directory}: settings differ from the saved run's in {differ} "
            f"(saved {[saved.get(k) for k in differ]}, given {[settings[k] for k in differ]})"
        )
    return [list(b) for b in saved["blocks"]]


def block_file(directory: Path, start: int, end: int) -> Path:
    """The file of the block of steps ``[start, end)``."""
    return directory / f"block-{start:08d}-{end:08d}.npz"


def write_block(
    directory: Path, start: int, end: int, states: ChainState, out: tuple[PyTree, dict], settings: dict
) -> None:
    """Process 0: the block's draws, records and final states, then the manifest listing it."""
    if jax.process_index() != 0:
        return
    positions, records = out
    leaves = {f"pos{i}": a for i, a in enumerate(jax.tree_util.tree_leaves(positions))}
    leaves.update({f"state{i}": a for i, a in enumerate(jax.tree_util.tree_leaves(states))})
    leaves.update({f"rec_{k}": v for k, v in records.items()})
    buf = io.BytesIO()
    np.savez(buf, **leaves)
    write_bytes(block_file(directory, start, end), buf.getvalue(), "data-parallel block", SAFE)
    settings["blocks"].append([start, end])
    write_bytes(directory / MANIFEST, json.dumps(settings).encode(), "data-parallel manifest", SAFE)


def read_block(
    directory: Path, start: int, end: int, like: tuple[ChainState, PyTree]
) -> tuple[ChainState, tuple[PyTree, dict]]:
    """A written block's final states and ``(positions, records)``, shaped as ``like`` (states, one step's positions)."""
    with np.load(block_file(directory, start, end)) as f:
        got = dict(f)
    states_like, pos_like = like
    treedef = jax.tree_util.tree_structure(pos_like)
    positions = jax.tree_util.tree_unflatten(treedef, [got[f"pos{i}"] for i in range(treedef.num_leaves)])
    sdef = jax.tree_util.tree_structure(states_like)
    states = jax.tree_util.tree_unflatten(sdef, [got[f"state{i}"] for i in range(sdef.num_leaves)])
    records = {k[4:]: v for k, v in got.items() if k.startswith("rec_")}
    return states, (positions, records)


def sample_data_parallel(
    model: Model,
    data: PyTree,
    initial_position: PyTree,
    *,
    proposal: Proposal,
    batch_size: int,
    num_samples: int,
    estimator: Estimator | None = None,
    key: jax.Array | int = 0,
    num_chains: int = 1,
    temperature: float = 1.0,
    devices: Sequence[jax.Device] | None = None,
    chain_groups: int = 1,
    block_size: int | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    batched_init: bool = False,
) -> SampleResult:
    """Sample with the rows split over devices and processes, each step's minibatch stratified over them.

    Every process of ``jax.distributed`` calls it with the same arguments but its own rows (``data.shards.open_npy_rows``
    and the like); in one process, in-memory rows are split evenly over ``devices``. Each device draws its share of the
    ``batch_size`` rows (in proportion to its rows) from its rows alone; one ``psum`` per step combines the shards'
    estimates; the penalty test decides (``samplers.data_parallel``). Every process returns the whole result.

    Args:
        model: The ``Model``.
        data: This process's rows: a row-partitioned source (several processes), or arrays or a whole source (one).
        initial_position: The start, the same for every chain (with ``batched_init``: one per chain, leading axis
            ``num_chains``).
        proposal: A gradient-free ``Proposal``, the same in every process.
        batch_size: Rows per step over all shards (at least 2 per shard).
        num_samples: Steps (draws) per chain.
        estimator: ``plain()`` if None, or a proxy whose minibatch is drawn from all rows (``taylor_proxy``).
        key: The run's key (the same in every process).
        num_chains: Chains, vmapped on every device.
        temperature: ``K``: the log-likelihood is divided by it.
        devices: The devices of the mesh (all devices of all processes if None).
        chain_groups: The chains split over this many groups of devices (the ``chains`` axis of a ``chains`` x
            ``data`` mesh; it must divide ``num_chains`` and every process's number of devices), each group with every
            shard's rows; the draws do not depend on it.
        block_size: Steps per compiled block (and per checkpoint); all steps if None.
        checkpoint_dir: A directory every process sees: process 0 writes each block there.
        resume: Continue the run saved in ``checkpoint_dir`` (the same settings), drawing what an uninterrupted run draws.
        batched_init: ``initial_position`` holds one start per chain (``auto_sample``'s dispersed Laplace draws).

    Returns:
        A ``SampleResult`` whose records fill ``accepted``, ``batch_size``, ``s2`` and ``delta_star`` (positions through
        ``Model.constrain`` where the model has one, as ``sample``'s).
    """
    use_compilation_cache()  # before anything compiles: a new process reads what an earlier one compiled
    estimator = plain() if estimator is None else estimator
    num_samples = check_int(num_samples, "num_samples", 1)
    num_chains = check_int(num_chains, "num_chains", 1)
    block = num_samples if block_size is None else min(check_int(block_size, "block_size", 1), num_samples)
    temperature = check_positive(float(temperature), "temperature")
    n_data = int(data.n) if is_host_data(data) else int(jax.tree_util.tree_leaves(data)[0].shape[0])
    check_parts(proposal, estimator, n_data)  # before any row is read
    groups = check_int(chain_groups, "chain_groups", 1)
    if num_chains % groups:
        raise ValueError(f"num_chains={num_chains} must be a multiple of chain_groups={groups}")
    layout = layout_shards(data, check_int(batch_size, "batch_size", 2), devices, groups)
    kernel = data_parallel_kernel(model, proposal, estimator, int(layout.draws.max()))
    starts = (
        chain_starts(initial_position, num_chains) if batched_init else broadcast_chains(initial_position, num_chains)
    )
    initial_position = jax.tree_util.tree_map(lambda a: a[0], starts)  # one chain's, the shape of one draw
    dims = sum(int(np.size(a)) for a in jax.tree_util.tree_leaves(initial_position))
    run = make_block_runner(kernel, layout.mesh, num_chains, compile_options(num_chains * block * dims, RUN_WORK))
    base = as_key(key)
    states = local_copy(jax.vmap(kernel.init)(starts))
    directory = None if checkpoint_dir is None else Path(checkpoint_dir)
    settings = run_manifest(
        num_chains, num_samples, block, int(batch_size), temperature, base, layout.sizes, layout.draws
    )
    done = []
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        done = read_manifest(directory, settings, resume)
    t0 = time.perf_counter()
    pieces, start = [], 0
    for lo, hi in done:  # every process reads the same files
        states, out = read_block(directory, lo, hi, (states, initial_position))
        settings["blocks"].append([lo, hi])
        pieces.append(out)
        start = hi
    states = place_states(states, layout.mesh)
    while start < num_samples:
        end = min(start + block, num_samples)
        steps = jnp.arange(start, end, dtype=jnp.int32)
        states, out = run(
            base, states, layout.rows, layout.meta, steps, jnp.full((end - start,), temperature, jnp.float32)
        )
        out = local_copy(out)
        check_finite(out[1], start)
        if directory is not None:
            kept = local_copy(states)  # the block is on disk, or every process stops, before any goes on
            agreed(
                f"write the data-parallel checkpoint block of steps [{start}, {end}) in {directory}; {SAFE}",
                lambda: write_block(directory, start, end, kept, out, settings),
            )
        pieces.append(out)
        start = end
    result = assemble(pieces, layout.n_data, temperature, num_samples, time.perf_counter() - t0)
    if model.constrain is None:
        return result
    return result._replace(positions=constrain_draws(model.constrain, result.positions), unconstrained=result.positions)


def broadcast_chains(position: PyTree, num_chains: int) -> PyTree:
    """One start repeated for ``num_chains`` chains (a leading axis)."""
    return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (num_chains,) + jnp.shape(a)), position)


def chain_starts(starts: PyTree, num_chains: int) -> PyTree:
    """Per-chain starts (``batched_init``), refused unless every leaf's leading axis is ``num_chains``."""
    sizes = {int(np.shape(a)[0]) if np.ndim(a) else 0 for a in jax.tree_util.tree_leaves(starts)}
    if sizes != {num_chains}:
        raise ValueError(
            f"batched_init=True takes one start per chain: leading axes {sorted(sizes)}, expected num_chains={num_chains}"
        )
    return jax.tree_util.tree_map(jnp.asarray, starts)


def check_finite(records: dict, start: int) -> None:
    """Raise naming the first step and chain whose minibatch held a non-finite term."""
    bad = np.argwhere(np.asarray(records["nonfinite"]))
    if bad.size:
        t, c = bad[0]
        raise FloatingPointError(
            f"a non-finite log-likelihood ratio at step {start + int(t)} of chain {int(c)}: "
            "check the model's log_lik at the proposed positions"
        )


def assemble(
    pieces: list[tuple[PyTree, dict]], n_data: int, temperature: float, num_samples: int, seconds: float
) -> SampleResult:
    """The blocks' ``(step, chain)`` outputs joined into a ``SampleResult`` with ``(chain, draw)`` axes."""

    def join(*xs):
        return np.swapaxes(np.concatenate([np.asarray(x) for x in xs], axis=0), 0, 1)

    positions = jax.tree_util.tree_map(join, *[p for p, _ in pieces])
    records = {k: join(*[r[k] for _, r in pieces]) for k in RECORD_FIELDS}
    return SampleResult(
        positions=positions,
        records=records,
        method="data_parallel_penalty",
        n_data=n_data,
        temperature=np.full(num_samples, temperature),
        wall_time=seconds,
        filled=(),
    )
