"""``place`` and ``to_host`` in one process: the same arrays as ``device_put`` and ``device_get``."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from minibatch_mcmc.samplers.sharding import chain_layout, place, to_host


def test_place_on_local_devices_is_device_put_and_to_host_gives_numpy():
    layout = chain_layout(1, 4)
    tree = {"x": jnp.arange(8.0).reshape(4, 2), "key": jax.random.split(jax.random.key(3), 4)}
    placed = place(tree, layout.chains)
    assert placed["x"].sharding == layout.chains and placed["key"].sharding == layout.chains
    np.testing.assert_array_equal(jax.random.key_data(placed["key"]), jax.random.key_data(tree["key"]))
    per_leaf = place(tree, {"x": layout.replicated, "key": NamedSharding(layout.mesh, PartitionSpec())})
    assert per_leaf["x"].sharding == layout.replicated
    host = to_host({"x": placed["x"]})
    assert isinstance(host["x"], np.ndarray)
    np.testing.assert_array_equal(host["x"], np.arange(8.0).reshape(4, 2))
