"""Chains over devices: a 1-D ``Mesh`` whose ``"chains"`` axis splits the chain axis of every state.

The driver vmaps one MH transition over chains; here the chain axis of the states is laid out over
the devices with ``NamedSharding(mesh, P("chains"))`` and the data are replicated (or laid out as the
caller asks), and ``jit`` propagates the layout through the scanned block. Per-chain keys come from
``split(fold_in(key, t), num_chains)`` whatever the layout, so a sharded run draws exactly what an
unsharded one does. Several hosts (``jax.distributed``, one process per host, each with the same
full host copy of data, key and states): on a mesh spanning other processes' devices ``place`` builds
global arrays with ``make_array_from_callback`` and ``to_host`` all-gathers each finished block to
every process; two CPU processes draw exactly what one process draws
(``tests/samplers/test_multiprocess.py``; ``docs/usage.md`` says what was and was not run). Sampling
replicates the data in every process; only the full-data passes can split rows between processes
(``data/shards.py``), and a row-partitioned source given to a sampler is refused at its first foreign row.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

PyTree = Any

CHAIN_AXIS = "chains"
"""Name of the mesh axis that carries the chains."""


class ChainLayout(NamedTuple):
    """Where the chains and the data live: the chain mesh and the shardings of states and data."""

    mesh: Mesh
    chains: NamedSharding
    """Leading (chain) axis split over the mesh."""
    replicated: NamedSharding
    """A full copy on every device (data, keys, per-step inputs)."""


def chain_layout(devices: Sequence[jax.Device] | int | str, num_chains: int) -> ChainLayout:
    """A 1-D ``"chains"`` mesh over ``devices`` (a list, a count of local devices, or ``"all"``)."""
    available = jax.devices()
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f"devices={devices!r}; expected None, 'all', a device count or a list of jax devices")
        devs = list(available)
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        local = jax.local_devices()  # a count means this process's devices (all hosts' devices: "all")
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices={devices} must be between 1 and the {len(local)} local device(s)")
        devs = list(local[: int(devices)])
    else:
        devs = list(devices)
        if not devs or not all(isinstance(d, jax.Device) for d in devs):
            raise ValueError(f"devices={devices!r} must be a non-empty list of jax devices (e.g. jax.devices())")
        if len({d.id for d in devs}) != len(devs):
            raise ValueError("devices lists the same device twice")
    if num_chains % len(devs):
        raise ValueError(
            f"num_chains={num_chains} is not a multiple of the {len(devs)} devices; each device runs the same number "
            f"of chains, so use num_chains in {{{len(devs)}, {2 * len(devs)}, ...}} or fewer devices"
        )
    mesh = Mesh(np.asarray(devs), (CHAIN_AXIS,))
    return ChainLayout(mesh, NamedSharding(mesh, PartitionSpec(CHAIN_AXIS)), NamedSharding(mesh, PartitionSpec()))


def _global_leaf(leaf: Any, sharding: Any) -> jax.Array:
    """One array laid out by ``sharding`` over devices of several processes, from this process's full copy."""
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        data = _global_leaf(jax.random.key_data(leaf), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
    host = np.asarray(leaf)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def place(tree: PyTree, sharding: Any) -> PyTree:
    """``device_put`` on this process's devices; on a mesh spanning other processes, one global array per leaf.

    Every process holds the same full host copy, so each process fills its own shards from it.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shardings = (
        [sharding] * len(leaves) if isinstance(sharding, jax.sharding.Sharding) else treedef.flatten_up_to(sharding)
    )
    if all(s.is_fully_addressable for s in shardings):
        return jax.device_put(tree, sharding)
    return jax.tree_util.tree_unflatten(treedef, [_global_leaf(x, s) for x, s in zip(leaves, shardings)])


def to_host(tree: PyTree) -> PyTree:
    """Every leaf as a full numpy array on this host; shards other processes hold are all-gathered."""

    def get(leaf: Any) -> np.ndarray:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return np.asarray(jax.device_get(leaf))

    return jax.tree_util.tree_map(get, tree)


def shard_chains(tree: PyTree, layout: ChainLayout) -> PyTree:
    """Put the leading (chain) axis of every leaf on the mesh."""
    return place(tree, layout.chains)


def place_data(tree: PyTree, layout: ChainLayout, sharding: Any = None) -> PyTree:
    """Replicate the data on every device, or apply the caller's sharding (a ``Sharding`` or a pytree of them)."""
    return place(tree, layout.replicated if sharding is None else sharding)
