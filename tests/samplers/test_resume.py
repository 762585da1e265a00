"""A run killed with SIGKILL and resumed from its checkpoint draws exactly what an uninterrupted run draws."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

from minibatch_mcmc import cli, mh_minibatch, random_walk, sample
from minibatch_mcmc.models import MixtureSettings, gaussian_mixture, make_mixture_data
from minibatch_mcmc.samplers import checkpoint

BLOCK = 20
COMMON = [
    "sample",
    "--n-data",
    "2000",
    "--temperature",
    "50",
    "--chains",
    "2",
    "--block-size",
    str(BLOCK),
    "--seed",
    "4",
    "--no-progress",
]


def _chunks(path):
    return sorted(p for p in os.listdir(path) if checkpoint.CHUNK_PATTERN.match(p))


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """Start the CLI with checkpoints in a subprocess, SIGKILL it once two chunks are on disk."""
    root = tmp_path_factory.mktemp("resume")
    ckpt = root / "ckpt"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [
        sys.executable,
        "-m",
        "minibatch_mcmc.cli",
        *COMMON,
        "--num-samples",
        "1000000",
        "--checkpoint",
        str(ckpt),
        "--out",
        str(root),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.exists() and len(_chunks(ckpt)) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return root, ckpt, proc.returncode


def test_killed_run_resumes_draw_for_draw(killed_run):
    root, ckpt, code = killed_run
    assert code == -signal.SIGKILL
    saved = _chunks(ckpt)
    assert len(saved) >= 2
    done = checkpoint.read_chunk(ckpt / saved[-1]).end
    total = done + 2 * BLOCK
    assert (
        cli.main(
            [
                *COMMON,
                "--num-samples",
                str(total),
                "--checkpoint",
                str(ckpt),
                "--resume",
                "--out",
                str(root),
                "--name",
                "resumed",
            ]
        )
        == 0
    )
    assert cli.main([*COMMON, "--num-samples", str(total), "--out", str(root), "--name", "straight"]) == 0
    a = xr.open_dataset(root / "resumed" / "posterior.nc", group="posterior", engine="h5netcdf").load()
    b = xr.open_dataset(root / "straight" / "posterior.nc", group="posterior", engine="h5netcdf").load()
    assert a["theta"].shape == (2, total, 2)
    np.testing.assert_array_equal(a["theta"].values, b["theta"].values)
    sa = xr.open_dataset(root / "resumed" / "posterior.nc", group="sample_stats", engine="h5netcdf").load()
    sb = xr.open_dataset(root / "straight" / "posterior.nc", group="sample_stats", engine="h5netcdf").load()
    for k in ("accepted", "batch_size", "delta_star", "s2"):
        np.testing.assert_array_equal(sa[k].values, sb[k].values)
    assert 0.05 < sa["accepted"].values.mean() < 0.95  # the chains move: identity is not vacuous
    assert len(_chunks(ckpt)) == total // BLOCK


def test_resume_refuses_other_settings_and_cleans_partial_chunks(killed_run, tmp_path):
    _, ckpt, _ = killed_run
    data = make_mixture_data(jax.random.key(4), 2000)
    kw = dict(
        proposal=random_walk(scale=0.15),
        test=mh_minibatch(50),
        num_samples=10_000,
        key=5,
        num_chains=2,
        temperature=50.0,
        progress=False,
        checkpoint_dir=ckpt,
        resume=True,
    )
    (ckpt / ".chunk-000000999-000001019.nc.tmp").write_bytes(b"half-written")
    with pytest.raises(ValueError, match=r"different settings \(seed: checkpoint has \[0, 5\], this call has \[0, 6\]"):
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "key": 6})
    assert not any(p.endswith(".tmp") for p in os.listdir(ckpt))
    with pytest.raises(ValueError, match="num_chains: checkpoint has 2, this call has 4"):
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "num_chains": 4})
    with pytest.raises(ValueError, match="n_data: checkpoint has 2000, this call has 1000"):
        sample(gaussian_mixture(), data[:1000], jnp.zeros(2), **kw)
    with pytest.raises(ValueError, match="test_config"):
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "test": mh_minibatch(60)})
    with pytest.raises(ValueError, match="proposal_config"):  # a step size lives in the proposal's closure
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "proposal": random_walk(scale=0.2)})
    with pytest.raises(ValueError, match="model_config"):
        sample(gaussian_mixture(MixtureSettings(sigma_x_sq=3.0)), data, jnp.zeros(2), **kw)
    with pytest.raises(ValueError, match="temperature at step 0 was 50.0 in the checkpoint but is 40.0"):
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "temperature": 40.0})
    with pytest.raises(ValueError, match="already holds .* pass resume=True"):
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "resume": False})
    with pytest.raises(ValueError, match="resume=True needs checkpoint_dir"):
        sample(gaussian_mixture(), data, jnp.zeros(2), **{**kw, "checkpoint_dir": None})
    settings = json.loads((ckpt / checkpoint.SETTINGS_FILE).read_text())
    assert settings["model"] == gaussian_mixture().name and settings["num_chains"] == 2
    assert cli.main(["sample", "--resume", "--no-progress"]) == 2
