"""Chains split over 4 (simulated) CPU devices draw what the unsharded run draws: every decision and batch
size exactly, positions and statistics to float32 rounding (``draws_tolerance``), since XLA compiles the
sharded and the unsharded programs apart and may vectorise their arithmetic differently on another CPU."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches

from minibatch_mcmc import random_walk, sample
from minibatch_mcmc.acceptance import BarkerTest
from minibatch_mcmc.models import gaussian_mixture

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from minibatch_mcmc import mh_minibatch, random_walk, sample
    from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
    from minibatch_mcmc.samplers import driver
    from minibatch_mcmc.samplers.sharding import chain_layout

    def keeping_states(make):  # make_block_runner whose runners also keep the states each block returns
        def made(*args, **kwargs):
            run = make(*args, **kwargs)
            def block(*block_args):
                out = run(*block_args)
                kept.append(out[0])
                return out
            return block
        return made

    data = make_mixture_data(jax.random.key(0), 3000)
    out = {"devices": len(jax.devices())}
    kept = []
    for name, test in (("mhminibatch", mh_minibatch(50)),):
        kw = dict(proposal=random_walk(scale=0.25), test=test, num_samples=40, temperature=30.0,
                  progress=False, block_size=40, num_chains=8, key=11)
        plain = sample(gaussian_mixture(), data, jnp.zeros(2), **kw)
        driver.make_block_runner = keeping_states(driver.make_block_runner)  # the sharded run's own block states
        split = sample(gaussian_mixture(), data, jnp.zeros(2), devices="all", **kw)
        arrays = {"pos": plain.positions, **{f"rec_{k}": v for k, v in plain.records.items()}}
        arrays.update({f"split/pos": split.positions, **{f"split/rec_{k}": v for k, v in split.records.items()}})
        np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in arrays.items()})
        out[name] = {"accept": float(plain.records["accepted"].mean())}
    # the chain axis of the states stays split over the mesh inside the jitted block (the sharded run's last block)
    layout = chain_layout("all", 8)
    out["blocks"] = len(kept)
    out["state_sharded"] = bool(kept[-1].position.sharding.is_equivalent_to(layout.chains, 2))
    out["shards"] = len(kept[-1].position.addressable_shards)
    try:
        sample(gaussian_mixture(), data, jnp.zeros(2), proposal=random_walk(scale=0.25), test=mh_minibatch(50),
               num_samples=2, num_chains=6, devices=4, progress=False)
    except ValueError as err:
        out["error"] = str(err)
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    draws = tmp_path_factory.mktemp("sharding") / "draws.npz"
    flags = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=4"]).strip()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(draws)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    with np.load(draws) as f:
        arrays = {k: f[k] for k in f.files}
    return {**json.loads(line[len("RESULT") :]), "arrays": arrays}


def test_sharded_draws_are_identical_to_unsharded(four_devices):
    assert four_devices["devices"] == 4
    arrays = four_devices["arrays"]
    plain = {k: v for k, v in arrays.items() if not k.startswith("split/")}
    split = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("split/")}
    assert set(plain) == set(split) and "rec_accepted" in plain
    assert not (bad := mismatches(split, plain)), "; ".join(bad)
    assert 0.05 < four_devices["mhminibatch"]["accept"] < 0.95  # chains move, so equality is not vacuous


def test_chain_axis_stays_split_over_the_mesh(four_devices):
    assert four_devices["blocks"] == 1  # the states the sharded run's one block returned
    assert four_devices["state_sharded"]
    assert four_devices["shards"] == 4


def test_chains_not_divisible_by_devices_is_a_clear_error(four_devices):
    assert "num_chains=6 is not a multiple of the 4 devices" in four_devices["error"]


def test_bad_devices_argument():
    x = jnp.linspace(-1.0, 1.0, 64)
    kw = dict(proposal=random_walk(scale=0.1), test=BarkerTest(), num_samples=2, progress=False)
    with pytest.raises(ValueError, match="between 1 and the 1 local device"):
        sample(gaussian_mixture(), x, jnp.zeros(2), devices=len(jax.devices()) + 1, **kw)
    with pytest.raises(ValueError, match="devices='gpu'"):
        sample(gaussian_mixture(), x, jnp.zeros(2), devices="gpu", **kw)
    with pytest.raises(ValueError, match="data_sharding needs devices"):
        sample(gaussian_mixture(), x, jnp.zeros(2), data_sharding=object(), **kw)
    with pytest.raises(ValueError, match="non-empty list of jax devices"):
        sample(gaussian_mixture(), x, jnp.zeros(2), devices=[], **kw)
