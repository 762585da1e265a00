"""Data-parallel sampling (``samplers.data_parallel``): ``jax.distributed`` CPU processes on 127.0.0.1, each holding
only its rows of a ``.npy`` file (``open_npy_rows``), each step's minibatch stratified over them with one ``psum``.

Against two references: one process splitting the same rows over as many simulated devices (the same shards, keys and
estimator: the same decisions, positions to float32 rounding), and the conjugate Gaussian model's exact posterior.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches
from processes import run_workers

from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import exact_posterior

N, D, K = 4000, 2, 40.0
"""Rows, dimension, temperature: the tempered posterior's s.d. is about ``sqrt(K / N) = 0.1``."""

RUN = textwrap.dedent(
    """
    import json, sys
    pid, count, port, path, out, here, opts = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:8]
    opts = json.loads(opts)
    import jax
    if count:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    sys.path[:0] = [here]
    import numpy as np
    from minibatch_mcmc.data import open_npy
    from minibatch_mcmc.data.shards import open_npy_rows
    from minibatch_mcmc.models import gaussian_mean
    from minibatch_mcmc.samplers.data_parallel_run import sample_data_parallel
    from test_data_parallel_sampling import proposal_for
    data = open_npy_rows(path + "/x.npy") if count else open_npy(path + "/x.npy")
    mean, sd = np.load(path + "/posterior.npy")
    r = sample_data_parallel(gaussian_mean(), data, np.asarray(mean, np.float32), proposal=proposal_for(opts, mean, sd),
                             batch_size=opts["m"], num_samples=opts["steps"], num_chains=opts["chains"],
                             temperature=opts["K"], key=opts["key"], block_size=opts.get("block"),
                             checkpoint_dir=opts.get("dir"), resume=opts.get("resume", False))
    np.savez(f"{out}-{pid}.npz", pos=r.positions, accepted=r.records["accepted"], s2=r.records["s2"],
             m=r.records["batch_size"])
    """
)


def proposal_for(opts: dict, mean: np.ndarray, sd: np.ndarray):
    """The run's proposal: a random walk of ``opts["scale"]`` s.d.s, or an independence move from ``N(mean, (1.2 sd)^2)``."""
    import jax

    from minibatch_mcmc import random_walk
    from minibatch_mcmc.proposals.base import Proposal

    if opts["proposal"] == "rw":
        return random_walk(scale=float(opts["scale"] * sd[0]))
    mu, s = jnp.asarray(mean, jnp.float32), jnp.asarray(1.2 * sd, jnp.float32)

    def sample(key, theta):
        new = mu + s * jax.random.normal(key, mu.shape)
        log_q = lambda x: -0.5 * jnp.sum(((x - mu) / s) ** 2)  # noqa: E731
        return new, log_q(theta) - log_q(new)

    return Proposal(sample=sample, symmetric=False, name="independence", gradient_batch_size=None)


def write_problem(tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``x.npy`` and the exact tempered posterior's mean and s.d. (``posterior.npy``)."""
    x = np.random.default_rng(42).normal([1.0, -0.5], 1.0, size=(N, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mean, var = exact_posterior(x, K)
    np.save(tmp_path / "posterior.npy", np.stack([mean, np.full(D, np.sqrt(var))]))
    return mean, np.full(D, var)


def start_single(tmp_path: Path, devices: int, opts: dict, out: str) -> subprocess.Popen:
    """One process splitting the rows over ``devices`` simulated CPU devices (started, not waited for)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    import json
    return subprocess.Popen([sys.executable, "-c", RUN, "0", "0", "0", str(tmp_path), str(tmp_path / out),
                             str(Path(__file__).parent), json.dumps(opts)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_processes(tmp_path: Path, count: int, opts: dict, out: str = "out") -> list[dict]:
    """``count`` processes, each holding its rows; every process's result (all must agree bit for bit)."""
    import json
    run_workers(RUN, count, [str(tmp_path), str(tmp_path / out), str(Path(__file__).parent), json.dumps(opts)], timeout=600)
    got = [dict(np.load(f"{tmp_path / out}-{i}.npz")) for i in range(count)]
    for other in got[1:]:
        for k in got[0]:
            np.testing.assert_array_equal(other[k], got[0][k])
    return got


def finish(proc: subprocess.Popen, path: str) -> dict:
    """Wait for a ``start_single`` process; its result."""
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return dict(np.load(f"{path}-0.npz"))


SMOKE = {"proposal": "rw", "scale": 1.2, "m": 200, "steps": 300, "chains": 4, "K": K, "key": 3, "block": 150}


def test_two_processes_decide_as_one_process_over_two_devices(tmp_path):
    """Two processes, each holding half the rows, against one process splitting them over two simulated devices: the
    same shards, keys and estimator, so the same accept decisions at every step of every chain and the same positions
    to float32 rounding (``mismatches``); every process returns the same draws; 200 rows a step (100 a shard) in the
    records. Would catch a shard drawing with another key or the other shard's share, a ``psum`` missing (a shard
    deciding on half the sum accepts differently within a few steps), processes that disagree. Then the draws (4 chains
    x 300 steps, random walk) against the exact posterior: means within 5 Monte Carlo s.e., which a run deciding on one
    shard's rows scaled by 2 would miss by far (its target is that half's posterior, 0.7 s.d.s away here)."""
    mean, var = write_problem(tmp_path)
    ref = start_single(tmp_path, 2, SMOKE, "single")
    got = run_processes(tmp_path, 2, SMOKE)[0]
    one = finish(ref, str(tmp_path / "single"))
    np.testing.assert_array_equal(got["accepted"], one["accepted"])
    assert not (bad := mismatches({"pos": got["pos"]}, {"pos": one["pos"]}, SMOKE["steps"], SMOKE["m"])), bad
    assert np.all(got["m"] == 200)
    assert 0.2 < got["accepted"].mean() < 0.9
    chk = check_moments(got["pos"][:, 50:], mean, var)
    assert np.all(np.abs(chk.z_mean()) < 5), (chk.mean, chk.exact_mean, chk.se_mean)


POSTERIOR = {"proposal": "independence", "m": 400, "steps": 700, "chains": 64, "K": K, "key": 11, "block": 350}
BURN = 100
MEAN_POWER_ESS = 12_800
"""ESS at which a mean 5% of an s.d. off gives ``|z| > 4`` with probability 0.95: ``se = sd / sqrt(ESS) <= 0.05 sd /
(4 + 1.645)``; the s.d. test then has more (a 5% s.d. error moves the variance 10.25%, ``se_var = var sqrt(2 / ESS)``:
``|z| > 4`` with probability 0.95 from ESS 6,070)."""


@pytest.mark.slow  # 2 and 4 processes on two cores: ~1-2 minutes
@pytest.mark.parametrize("count", [2, 4])
def test_processes_sample_the_exact_posterior(tmp_path, count):
    """``count`` processes, each holding ``N / count`` rows, 400 rows a step stratified over them, an independence
    proposal from the posterior widened 1.2x, 64 chains x 600 kept steps: means and variances of both coordinates
    against the exact tempered posterior within 4 Monte Carlo s.e.s, with ESS at least ``MEAN_POWER_ESS``, so a 5%
    s.d. error in a mean (or in an s.d.) would fail with probability at least 0.95. Would catch a biased estimator
    (a shard weighted by ``N / m`` with unequal shards: 4 processes over 4000 rows split evenly, but the test of a
    wrong weight shows in ``test_strata``), a penalty at the wrong variance (``s2`` not divided by ``K^2``: the chains
    barely move, ESS fails), and decisions taken on part of the data."""
    mean, var = write_problem(tmp_path)
    got = run_processes(tmp_path, count, POSTERIOR)[0]
    draws = got["pos"][:, BURN:]
    chk = check_moments(draws, mean, var)
    assert np.all(chk.ess > MEAN_POWER_ESS), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    assert np.all(got["m"] == 400) and float(np.median(got["s2"])) < 2.0
