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

import numpy as np
import pytest
from draws_tolerance import mismatches
from processes import cpu_env, free_port, run_workers

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
    from minibatch_mcmc import independence_gaussian, random_walk

    if opts["proposal"] == "rw":
        return random_walk(scale=float(opts["scale"] * sd[0]))
    return independence_gaussian(np.asarray(mean, np.float32), scale=np.asarray(1.2 * sd, np.float32))


def write_problem(tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``x.npy`` and the exact tempered posterior's mean and s.d. (``posterior.npy``)."""
    x = np.random.default_rng(42).normal([1.0, -0.5], 1.0, size=(N, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mean, var = exact_posterior(x, K)
    np.save(tmp_path / "posterior.npy", np.stack([mean, np.full(D, np.sqrt(var))]))
    return mean, np.full(D, var)


def start_single(tmp_path: Path, devices: int, opts: dict, out: str) -> subprocess.Popen:
    """One process splitting the rows over ``devices`` simulated CPU devices (started, not waited for)."""
    env = cpu_env()  # the workers' XLA flags (make test's optimisation level), then the simulated devices
    env["XLA_FLAGS"] = f"{env['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}".strip()
    import json

    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUN,
            "0",
            "0",
            "0",
            str(tmp_path),
            str(tmp_path / out),
            str(Path(__file__).parent),
            json.dumps(opts),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_processes(tmp_path: Path, count: int, opts: dict, out: str = "out") -> list[dict]:
    """``count`` processes, each holding its rows; every process's result (all must agree bit for bit)."""
    import json

    run_workers(
        RUN, count, [str(tmp_path), str(tmp_path / out), str(Path(__file__).parent), json.dumps(opts)], timeout=600
    )
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


SMOKE = {"proposal": "rw", "scale": 1.2, "m": 200, "steps": 100, "chains": 4, "K": K, "key": 3, "block": 50}
SMOKE_BURN = 20


def test_two_processes_decide_as_one_process_over_two_devices(tmp_path):
    """Two processes, each holding half the rows, against one process splitting them over two simulated devices: the
    same shards, keys and estimator, so the same accept decisions at every step of every chain and the same positions
    to float32 rounding (``mismatches``); every process returns the same draws; 200 rows a step (100 a shard) in the
    records. Would catch a shard drawing with another key or the other shard's share, and processes that disagree (a
    ``psum`` left out is refused earlier, by ``shard_map``'s check that the chains' carry stays replicated: tried).
    Then the draws (4 chains x 80 kept steps, random walk) against the exact posterior: means and variances within 5
    Monte Carlo s.e.s, a check for gross errors only: ``test_processes_sample_the_exact_posterior`` (slow) has the
    power for 5% of an s.d.
    100 steps in two blocks of 50: one compiled block program, and a second block that starts from the first's
    states (300 steps cost each of the three processes about 2 CPU s more, the compilation the same)."""
    mean, var = write_problem(tmp_path)
    ref = start_single(tmp_path, 2, SMOKE, "single")
    got = run_processes(tmp_path, 2, SMOKE)[0]
    one = finish(ref, str(tmp_path / "single"))
    np.testing.assert_array_equal(got["accepted"], one["accepted"])
    assert not (bad := mismatches({"pos": got["pos"]}, {"pos": one["pos"]}, SMOKE["steps"], SMOKE["m"])), bad
    assert np.all(got["m"] == 200)
    assert 0.2 < got["accepted"].mean() < 0.9
    chk = check_moments(got["pos"][:, SMOKE_BURN:], mean, var)
    assert np.all(np.abs(chk.z_mean()) < 5), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 5), (chk.var, chk.exact_var, chk.se_var)


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
    s.d. error in a mean (or in an s.d.) would fail with probability at least 0.95, and the records show 400 rows a
    step with a median ``s2`` below 2. Would catch an estimator off by a shard's factor ``N_s`` (the decisions then
    follow the prior and the proposal: variances 1.44 times the exact ones), an ``s2`` left on the scale of the sum
    rather than of ``Delta`` (a penalty ``K^2`` times too large: nearly nothing accepted, ESS fails), and any error of
    the estimator or the penalty that moves a mean or an s.d. by 5%."""
    mean, var = write_problem(tmp_path)
    got = run_processes(tmp_path, count, POSTERIOR)[0]
    draws = got["pos"][:, BURN:]
    chk = check_moments(draws, mean, var)
    assert np.all(chk.ess > MEAN_POWER_ESS), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    assert np.all(got["m"] == 400) and float(np.median(got["s2"])) < 2.0


RESUME = textwrap.dedent(
    """
    import json, os, sys
    pid, count, port, path, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:6]
    import jax
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    import numpy as np
    from jax.experimental import multihost_utils
    from minibatch_mcmc import random_walk
    from minibatch_mcmc.data.shards import open_npy_rows
    from minibatch_mcmc.models import gaussian_mean
    from minibatch_mcmc.samplers.data_parallel_run import sample_data_parallel
    data = open_npy_rows(path + "/x.npy")
    def run(**kw):
        return sample_data_parallel(gaussian_mean(), data, np.asarray([1.0, -0.5], np.float32), proposal=random_walk(0.1),
                                    batch_size=100, num_samples=60, num_chains=3, temperature=40.0, key=5, block_size=20,
                                    **kw)
    whole = run()
    ck = path + "/ck"
    run(checkpoint_dir=ck)
    if pid == 0:  # a crash after the first block: the manifest lists it alone, the later files are gone
        m = json.load(open(ck + "/manifest.json"))
        for lo, hi in m["blocks"][1:]:
            os.remove(f"{ck}/block-{lo:08d}-{hi:08d}.npz")
        m["blocks"] = m["blocks"][:1]
        json.dump(m, open(ck + "/manifest.json", "w"))
        first = os.stat(f"{ck}/block-00000000-00000020.npz").st_mtime_ns
    multihost_utils.sync_global_devices("truncated")
    again = run(checkpoint_dir=ck, resume=True)
    kept = pid != 0 or os.stat(f"{ck}/block-00000000-00000020.npz").st_mtime_ns == first
    blocks = json.load(open(ck + "/manifest.json"))["blocks"]
    try:
        run(checkpoint_dir=ck)
        refused = ""
    except ValueError as e:
        refused = str(e)
    np.savez(f"{out}-{pid}.npz", whole=whole.positions, again=again.positions, wacc=whole.records["accepted"],
             aacc=again.records["accepted"], kept=kept, blocks=np.asarray(blocks), refused=refused)
    """
)


@pytest.mark.slow  # two subprocesses, four runs: ~1-2 minutes on the loaded two-core machine
def test_two_processes_resume_from_process_zeros_checkpoint(tmp_path):
    """Two processes sample 60 steps in blocks of 20 with a checkpoint directory (process 0 writes it); the directory is
    cut back to its first block (a crash after it), and a resumed run in both processes reads that block and draws the
    other two: positions and decisions equal an uninterrupted run's bit for bit (one program, the same keys), the first
    block's file is not rewritten, the manifest lists the three blocks again, and a new run into the same directory
    without ``resume`` is refused naming ``resume=True``. Would catch a resume that restarts the keys at step 0 (the
    draws differ), that ignores the saved states, or processes that read different blocks (they would disagree)."""
    write_problem(tmp_path)
    run_workers(RESUME, 2, [str(tmp_path), str(tmp_path / "res")], timeout=600)
    got = [dict(np.load(f"{tmp_path / 'res'}-{i}.npz")) for i in range(2)]
    for g in got:
        np.testing.assert_array_equal(g["again"], g["whole"])
        np.testing.assert_array_equal(g["aacc"], g["wacc"])
        assert bool(g["kept"]) and g["blocks"].tolist() == [[0, 20], [20, 40], [40, 60]]
        assert "pass resume=True" in str(g["refused"])
    np.testing.assert_array_equal(got[0]["again"], got[1]["again"])


UNWRITABLE = textwrap.dedent(
    """
    import sys, time
    pid, count, port, path, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:6]
    import jax
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                               heartbeat_timeout_seconds=600)
    import numpy as np
    from minibatch_mcmc import random_walk
    from minibatch_mcmc.data.shards import open_npy_rows
    from minibatch_mcmc.samplers.data_parallel_run import sample_data_parallel
    from minibatch_mcmc.models import gaussian_mean
    t0, error = time.perf_counter(), ""
    try:
        sample_data_parallel(gaussian_mean(), open_npy_rows(path + "/x.npy"), np.asarray([1.0, -0.5], np.float32),
                             proposal=random_walk(0.1), batch_size=100, num_samples=40, num_chains=2, temperature=40.0,
                             key=5, block_size=20, checkpoint_dir=path + "/ck")
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
    np.savez(f"{out}-{pid}.npz", error=error, seconds=time.perf_counter() - t0)
    """
)


@pytest.mark.slow  # two subprocesses, one short run each: ~1 minute on the loaded two-core machine
def test_a_failed_checkpoint_write_stops_every_process(tmp_path):
    """Process 0 cannot write the first block (its file's name is taken by a directory): both processes stop with an
    error naming the block's steps and the directory, within the run's time, none waiting on process 0. Would catch the
    other process waiting for the writer until the coordinator's heartbeat timeout (set to 10 minutes here, past the
    test's limit: the workers are killed and the test fails)."""
    write_problem(tmp_path)
    (tmp_path / "ck" / "block-00000000-00000020.npz" / "taken").mkdir(parents=True)
    run_workers(UNWRITABLE, 2, [str(tmp_path), str(tmp_path / "res")], timeout=240)
    got = [dict(np.load(f"{tmp_path / 'res'}-{i}.npz")) for i in range(2)]
    assert "CheckpointWriteError" in str(got[0]["error"]) and "block-00000000-00000020.npz" in str(got[0]["error"])
    assert "could not write the data-parallel checkpoint block of steps [0, 20)" in str(got[1]["error"])
    assert str(tmp_path / "ck") in str(got[1]["error"])


GROUPS = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax
    import numpy as np
    from minibatch_mcmc import random_walk, sample_data_parallel
    from minibatch_mcmc.models import gaussian_mean
    x = np.load(sys.argv[1] + "/x.npy")
    kw = dict(proposal=random_walk(0.12), batch_size=200, num_samples=100, num_chains=4, temperature=40.0, key=3,
              block_size=50)
    a = sample_data_parallel(gaussian_mean(), x, np.asarray([1.0, -0.5], np.float32), chain_groups=2, **kw)
    b = sample_data_parallel(gaussian_mean(), x, np.asarray([1.0, -0.5], np.float32), devices=jax.devices()[:2], **kw)
    np.savez(sys.argv[1] + "/groups.npz", a=a.positions, b=b.positions, aa=a.records["accepted"], ba=b.records["accepted"])
    """
)


@pytest.mark.slow  # a subprocess with four simulated devices compiling two runs: ~1 minute on the loaded machine
def test_chains_split_over_device_groups_draw_the_same(tmp_path):
    """A ``chains`` x ``data`` mesh: 4 chains over 2 chain groups x 2 shards (4 simulated devices, each shard's rows on
    both of its devices) draw what the 4 chains draw on 2 devices with one group: the same decisions, positions to
    float32 rounding. Would catch a chain group reusing the first group's keys (its chains then repeat the first
    group's draws) or a group reading another group's states."""
    write_problem(tmp_path)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", GROUPS, str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = dict(np.load(tmp_path / "groups.npz"))
    np.testing.assert_array_equal(got["aa"], got["ba"])
    assert not (bad := mismatches({"pos": got["a"]}, {"pos": got["b"]}, 100, 200)), bad
    assert not np.array_equal(got["a"][:2], got["a"][2:])  # the two groups' chains differ


GROUPS_PROCESSES = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    pid, count, port, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    import jax
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    import numpy as np
    from minibatch_mcmc import random_walk, sample_data_parallel
    from minibatch_mcmc.data.shards import open_npy_rows
    from minibatch_mcmc.models import gaussian_mean
    data = open_npy_rows(path + "/x.npy")
    kw = dict(proposal=random_walk(0.12), batch_size=200, num_samples=60, num_chains=4, temperature=40.0, key=3,
              block_size=30)
    a = sample_data_parallel(gaussian_mean(), data, np.asarray([1.0, -0.5], np.float32), chain_groups=2, **kw)
    firsts = [d for d in jax.devices() if d.id == min(e.id for e in jax.devices() if e.process_index == d.process_index)]
    b = sample_data_parallel(gaussian_mean(), data, np.asarray([1.0, -0.5], np.float32), devices=firsts, **kw)
    np.savez(f"{path}/gp-{pid}.npz", a=a.positions, b=b.positions, aa=a.records["accepted"], ba=b.records["accepted"])
    """
)


@pytest.mark.slow  # two subprocesses with two simulated devices each: ~2 minutes on the loaded machine
def test_chain_groups_over_two_processes_draw_the_same(tmp_path):
    """Two processes with two devices each, each process holding half the rows: 4 chains over 2 chain groups (a process's
    rows on both its devices) draw what one group on one device a process draws, in both processes. Would catch a
    process returning only its addressable chains, or a chain group placed on another process's rows."""
    write_problem(tmp_path)
    port = str(free_port())
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GROUPS_PROCESSES, str(i), "2", port, str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(e[-2000:] for e in errs)
    got = [dict(np.load(tmp_path / f"gp-{i}.npz")) for i in range(2)]
    for g in got:
        np.testing.assert_array_equal(g["aa"], g["ba"])
        assert not (bad := mismatches({"pos": g["a"]}, {"pos": g["b"]}, 60, 200)), bad
    np.testing.assert_array_equal(got[0]["a"], got[1]["a"])
