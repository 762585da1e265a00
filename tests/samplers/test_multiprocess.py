"""Two JAX processes on this machine (CPU, ``jax.distributed`` on 127.0.0.1) run one sharded ``sample`` across both."""

import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from draws_tolerance import mismatches

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.models import gaussian_mixture, make_mixture_data

WORKER = textwrap.dedent(
    """
    import sys
    import jax
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    assert len(jax.devices()) == 2 and len(jax.local_devices()) == 1, jax.devices()
    import jax.numpy as jnp, numpy as np
    from minibatch_mcmc import mh_minibatch, random_walk, sample
    from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
    r = sample(gaussian_mixture(), make_mixture_data(jax.random.key(1), 2000), jnp.zeros(2), proposal=random_walk(scale=0.15),
               test=mh_minibatch(50), num_samples=40, key=3, num_chains=4, temperature=20.0, block_size=20, progress=False,
               devices="all")
    np.save(out, np.asarray(r.positions))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two subprocesses importing JAX and compiling: ~35 s on a loaded machine
def test_two_processes_draw_what_one_process_draws(tmp_path):
    port = _free_port()
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)  # one device a process
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(i), str(port), str(tmp_path / f"p{i}.npy")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    errs = []
    for p in procs:
        try:
            errs.append(p.communicate(timeout=180)[1])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(e[-1500:] for e in errs)
    single = sample(gaussian_mixture(), make_mixture_data(jax.random.key(1), 2000), jnp.zeros(2),
                    proposal=random_walk(scale=0.15), test=mh_minibatch(50), num_samples=40, key=3, num_chains=4,
                    temperature=20.0, block_size=20, progress=False)
    for i in range(2):  # positions to float32 rounding: the two programs are compiled apart (draws_tolerance)
        assert not (bad := mismatches({"pos": np.load(tmp_path / f"p{i}.npy")}, {"pos": np.asarray(single.positions)}, 40, 2000)), bad
