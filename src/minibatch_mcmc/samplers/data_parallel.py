"""Data-parallel sampling: the rows split over devices (one per ``jax.distributed`` process, or a host's devices), each
step's minibatch stratified over them, one ``psum`` per step.

The devices form a ``chains`` x ``data`` mesh. Shard ``s`` (a column: one device per chain group) holds only its rows:
a process's own rows of a row-partitioned source (``data.shards.open_npy_rows``, ``open_parquet_rows``,
``open_parquet_files``), split evenly over its shards; or, in one process, an even share of in-memory rows. At every
step each chain proposes from its step key, the same on every shard; each shard draws its ``m_s`` rows
(``strata.allocate``: ``m_s`` proportional to ``N_s``) with its own key (the test key folded with the shard's number),
reduces the estimator's terms on them to ``strata.StratumSums``, and one ``psum`` over ``data`` of those four numbers
per chain gives every shard the stratified estimate of the sum over all ``N`` rows, its estimated variance and
Satterthwaite's degrees of freedom. The decision is the penalty test's (``acceptance.penalty``): Metropolis on
``Delta* - u_B(s2)`` with ``u_B`` at those degrees of freedom, and a uniform from the chain's key, so every shard takes
the same decision. The estimator's data-free part (a proxy's ``known_sum``) is already a full-data sum. The chains are
split over ``chains`` (each group its slice of ``keys.step_keys``' one key per chain), so the draws do not depend on it.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from minibatch_mcmc.acceptance.base import TestOutcome, uniform_from_bits
from minibatch_mcmc.acceptance.penalty import penalty
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.host import is_host_data
from minibatch_mcmc.data.shards import even_bounds, partition_of
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.kernel import ChainState, Kernel
from minibatch_mcmc.samplers.keys import split_step
from minibatch_mcmc.samplers.results import RECORD_FIELDS
from minibatch_mcmc.samplers.scaled_runner import scan_steps
from minibatch_mcmc.samplers.strata import allocate, combine, stack, stratum_sums, unstack

PyTree = Any
AXIS = "data"
"""The mesh axis the rows are split over."""
CHAINS = "chains"
"""The mesh axis the chains are split over (size ``chain_groups``; 1 by default)."""


class Shard(NamedTuple):
    """What one device holds: its rows (padded to the longest shard's), how many are real, and how many it draws."""

    rows: PyTree
    size: jax.Array
    draws: jax.Array


class ShardLayout(NamedTuple):
    """The rows over the mesh: every shard's size and draws (the same numbers in every process) and the global arrays."""

    mesh: Mesh
    sizes: np.ndarray
    draws: np.ndarray
    rows: PyTree
    """Global arrays ``(S * R, ...)`` sharded over ``AXIS``: shard ``s``'s rows, then copies of its last row."""
    meta: jax.Array
    """Global ``(S, 2)`` int32 sharded over ``AXIS``: each shard's ``(size, draws)``."""

    @property
    def n_data(self) -> int:
        """``N``, all shards' rows."""
        return int(self.sizes.sum())


def mesh_devices(devices: Sequence[jax.Device] | None) -> list[jax.Device]:
    """The data axis's devices, process by process (all devices of all processes if None)."""
    devices = list(jax.devices() if devices is None else devices)
    return sorted(devices, key=lambda d: (d.process_index, d.id))


def process_rows(data: PyTree) -> tuple[PyTree, np.ndarray]:
    """This process's rows (numpy) and every process's row boundaries: a row-partitioned source's own rows, or (one
    process) all rows of in-memory arrays or a whole out-of-core source."""
    part = partition_of(data)
    if part is not None and part.count != jax.process_count():
        raise ValueError(
            f"the rows were split over {part.count} processes but JAX runs {jax.process_count()}: call "
            "jax.distributed.initialize(...) in every process before opening them"
        )
    if part is not None:
        reader = data.reader
        rows = jax.tree_util.tree_unflatten(reader.treedef, reader.read_range(part.lo, part.hi))
        return rows, np.asarray(reader.bounds, np.int64)
    if jax.process_count() > 1:
        raise ValueError(
            f"data-parallel sampling over {jax.process_count()} processes reads each process's own rows: open the data "
            "with data.shards.open_npy_rows, open_parquet_rows or open_parquet_files in every process"
        )
    if is_host_data(data):
        data = jax.tree_util.tree_unflatten(data.reader.treedef, data.reader.read_range(0, data.n))
    rows = jax.tree_util.tree_map(np.asarray, data)
    n = int(jax.tree_util.tree_leaves(rows)[0].shape[0])
    return rows, np.asarray([0, n], np.int64)


def device_grid(devices: list[jax.Device], groups: int) -> np.ndarray:
    """Devices as a ``(groups, shards)`` grid: each process's devices (in order) cut into shards of ``groups`` devices,
    one per chain group, so a shard's devices all belong to the process that holds its rows."""
    per: dict[int, list[jax.Device]] = {}
    for d in devices:
        per.setdefault(d.process_index, []).append(d)
    uneven = {p: len(ds) for p, ds in per.items() if len(ds) % groups}
    if uneven:
        raise ValueError(
            f"chain_groups={groups} must divide every process's number of devices; got {uneven} (process: devices)"
        )
    cols = [ds[k : k + groups] for p in sorted(per) for ds in [per[p]] for k in range(0, len(ds), groups)]
    grid = np.empty((groups, len(cols)), dtype=object)
    for s, col in enumerate(cols):
        grid[:, s] = col
    return grid


def shard_bounds(process_bounds: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Global row boundaries of the shards (the grid's columns): each process's rows split evenly over its shards."""
    per: dict[int, int] = {}
    for d in grid[0]:
        per[d.process_index] = per.get(d.process_index, 0) + 1
    if sorted(per) != list(range(len(process_bounds) - 1)):
        raise ValueError(
            f"the devices {list(grid.ravel())} must include devices of every one of the "
            f"{len(process_bounds) - 1} processes that hold rows"
        )
    cuts = [
        process_bounds[p] + even_bounds(int(process_bounds[p + 1] - process_bounds[p]), per[p])[:-1]
        for p in sorted(per)
    ]
    return np.concatenate(cuts + [process_bounds[-1:]]).astype(np.int64)


def layout_shards(
    data: PyTree, batch_size: int, devices: Sequence[jax.Device] | None = None, chain_groups: int = 1
) -> ShardLayout:
    """Place this process's rows on its devices of a ``(CHAINS, AXIS)`` mesh (a shard's rows on each of its
    ``chain_groups`` devices) and allocate the minibatch over the shards."""
    grid = device_grid(mesh_devices(devices), chain_groups)
    rows, pbounds = process_rows(data)
    bounds = shard_bounds(pbounds, grid)
    sizes = np.diff(bounds)
    if np.any(sizes < 1):
        raise ValueError(f"{int(bounds[-1])} rows over {grid.shape[1]} shards leave a shard no row: use fewer devices")
    draws = allocate(sizes, batch_size)
    mesh = Mesh(grid, (CHAINS, AXIS))
    width = int(sizes.max())
    me = jax.process_index()
    lo = int(pbounds[me]) if len(pbounds) > 2 else 0
    local = [(s, d) for (_, s), d in np.ndenumerate(grid) if d.process_index == me]

    def global_leaf(leaf: np.ndarray) -> jax.Array:
        pieces = []
        for s, d in local:
            block = leaf[bounds[s] - lo : bounds[s + 1] - lo]
            pad = np.repeat(block[-1:], width - block.shape[0], axis=0)
            pieces.append(jax.device_put(np.concatenate([block, pad]), d))
        return jax.make_array_from_single_device_arrays(
            (grid.shape[1] * width,) + leaf.shape[1:], NamedSharding(mesh, P(AXIS)), pieces
        )

    meta = np.stack([sizes, draws], axis=1).astype(np.int32)
    return ShardLayout(
        mesh=mesh,
        sizes=sizes,
        draws=draws,
        rows=jax.tree_util.tree_map(global_leaf, rows),
        meta=jax.make_array_from_single_device_arrays(
            meta.shape, NamedSharding(mesh, P(AXIS)), [jax.device_put(meta[s : s + 1], d) for s, d in local]
        ),
    )


def check_parts(proposal: Proposal, estimator: Estimator, n_data: int) -> None:
    """Refuse what the data-parallel kernel cannot run: a gradient proposal, an estimator drawing from other rows."""
    if proposal.gradient_batch_size is not None:
        raise ValueError(
            f"proposal {proposal.name!r} reads a gradient minibatch (gradient_batch_size="
            f"{proposal.gradient_batch_size}); data-parallel sampling takes a gradient-free proposal "
            "(random_walk, an independence or proxy move)"
        )
    if estimator.population_size(n_data) != n_data:
        raise ValueError(
            f"estimator {estimator.name!r} draws its minibatch from {estimator.population_size(n_data)} rows, "
            f"not the N={n_data} rows: data-parallel sampling takes plain() or a proxy without a stratum "
            "or importance weights (taylor_proxy, glm_proxy)"
        )


def data_parallel_kernel(model: Model, proposal: Proposal, estimator: Estimator, most_draws: int) -> Kernel:
    """The MH step of one chain on one shard (inside ``shard_map`` over ``AXIS``): ``step(key, state, shard, K)``."""

    def init(position: PyTree) -> ChainState:
        return ChainState(position=position, log_prior=jnp.asarray(model.log_prior(position)))

    def step(key: jax.Array, state: ChainState, shard: Shard, temperature: jax.Array) -> tuple[ChainState, TestOutcome]:
        k_prop, k_test = split_step(key)
        candidate, log_q_ratio = proposal.sample(k_prop, state.position)
        lp_new = model.log_prior(candidate)
        psi = jnp.where(lp_new > -jnp.inf, lp_new - state.log_prior + log_q_ratio, -jnp.inf)
        k_rows = jax.random.fold_in(k_test, jax.lax.axis_index(AXIS))  # this shard's draws
        idx = jax.random.randint(k_rows, (most_draws,), 0, shard.size)
        valid = jnp.arange(most_draws) < shard.draws
        dtype = jnp.result_type(psi, jnp.float32)
        terms = estimator.log_ratio(model, state.position, candidate)(take(shard.rows, idx)).astype(dtype)
        summed = unstack(jax.lax.psum(stack(stratum_sums(terms, valid, shard.size, shard.draws)), AXIS))
        total, variance, dof = combine(summed)
        delta = psi + (total + estimator.known_sum(state.position, candidate)) / temperature
        s2 = variance / (temperature * temperature)
        u = uniform_from_bits(jax.random.bits(k_test, (), jnp.uint32), dtype)
        bad = summed.bad > 0
        accepted = (jnp.log(u) < delta - penalty(s2, dof + 1.0)) & ~bad
        zero = jnp.zeros((), dtype)
        outcome = TestOutcome(
            accepted=accepted,
            batch_size=jax.lax.psum(shard.draws, AXIS),
            s2=s2,
            epsilon=zero,
            delta_star=delta,
            nonfinite=bad,
            residual_sd=zero,
        )
        new = jax.tree_util.tree_map(lambda a, b: jnp.where(accepted, a, b), ChainState(candidate, lp_new), state)
        return new, outcome

    return Kernel(init=init, step=step)


def make_block_runner(
    kernel: Kernel, mesh: Mesh, num_chains: int, compiler_options: dict | None = None
) -> Callable[..., tuple[ChainState, PyTree]]:
    """``run(base_key, states, rows, meta, steps, temps)``: the chains' steps on ``scan_steps``, jitted over the mesh,
    the chains split over ``CHAINS`` (each group's chains get their own keys of ``step_keys``' one per chain) and the
    rows over ``AXIS`` (with ``compiler_options``: ``compiling.compile_options``'s level for the run's work)."""
    per_group = num_chains // mesh.shape[CHAINS]

    def step_all(t, keys, states, shard, temp, carry):
        mine = jax.lax.dynamic_slice_in_dim(keys, jax.lax.axis_index(CHAINS) * per_group, per_group)
        new, outcome = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(mine, states, shard, temp)
        rec = {k: jnp.broadcast_to(getattr(outcome, k), outcome.accepted.shape) for k in RECORD_FIELDS}
        rec["nonfinite"] = outcome.nonfinite
        return new, rec

    def block(base_key, states, rows, meta, steps, temps):
        shard = Shard(rows, meta[0, 0], meta[0, 1])
        states, out, _ = scan_steps(step_all, base_key, num_chains, states, shard, steps, temps)
        return states, out

    mapped = jax.shard_map(
        block, mesh=mesh, in_specs=(P(), P(CHAINS), P(AXIS), P(AXIS), P(), P()), out_specs=(P(CHAINS), P(None, CHAINS))
    )
    return jax.jit(mapped, compiler_options=compiler_options)


def place_states(states: ChainState, mesh: Mesh) -> ChainState:
    """The chains' states (numpy, all chains, the same in every process) as global arrays split over ``CHAINS``."""
    sharding = NamedSharding(mesh, P(CHAINS))
    return jax.tree_util.tree_map(
        lambda a: jax.make_array_from_callback(np.shape(a), sharding, lambda idx, a=np.asarray(a): a[idx]), states
    )


def local_copy(tree: PyTree) -> PyTree:
    """A global result as numpy, assembled from this process's shards (every process holds every chain group)."""

    def gather(a: jax.Array) -> np.ndarray:
        out = np.empty(a.shape, a.dtype)
        for piece in a.addressable_shards:
            out[piece.index] = np.asarray(piece.data)
        return out

    return jax.tree_util.tree_map(gather, tree)
