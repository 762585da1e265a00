"""Chains over devices: a 1-D ``Mesh`` whose ``"chains"`` axis splits the chain axis of every state.

The driver vmaps one MH transition over chains; here the chain axis of the states is laid out over
the devices with ``NamedSharding(mesh, P("chains"))`` and the data are replicated (or laid out as the
caller asks), and ``jit`` propagates the layout through the scanned block. Per-chain keys come from
``split(fold_in(key, t), num_chains)`` whatever the layout, so a sharded run draws exactly what an
unsharded one does. Several hosts are not supported yet: with ``jax.distributed`` the data and
states are placed with ``device_put`` on devices another process owns, which JAX refuses
(``tests/samplers/test_multiprocess.py`` records the error; ``docs/usage.md`` says what was run).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import numpy as np
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

    @property
    def num_devices(self) -> int:
        """Number of devices in the mesh."""
        return int(self.mesh.devices.size)


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


def shard_chains(tree: PyTree, layout: ChainLayout) -> PyTree:
    """Put the leading (chain) axis of every leaf on the mesh."""
    return jax.device_put(tree, layout.chains)


def place_data(tree: PyTree, layout: ChainLayout, sharding: Any = None) -> PyTree:
    """Replicate the data on every device, or apply the caller's sharding (a ``Sharding`` or a pytree of them)."""
    return jax.device_put(tree, layout.replicated if sharding is None else sharding)
