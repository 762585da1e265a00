"""Checkpoints are never resumed silently wrong: corrupt, truncated or foreign chunks, other data, missing directories."""

import functools
import os
import shutil

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import cli, mh_minibatch, random_walk, sample
from minibatch_mcmc.data import open_npy
from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
from minibatch_mcmc.samplers import checkpoint

N = 400


@functools.cache
def mixture_data() -> jax.Array:
    """The runs' data, made on first use (not in every worker's collection)."""
    return make_mixture_data(jax.random.key(1), N)


KW = dict(
    proposal=random_walk(scale=0.15),
    test=mh_minibatch(50),
    num_samples=30,
    key=3,
    temperature=20.0,
    block_size=10,
    progress=False,
)


def _chunks(path):
    return sorted(path / p for p in os.listdir(path) if checkpoint.CHUNK_PATTERN.match(p))


def _run(path, data=None, **kw):
    data = mixture_data() if data is None else data
    return sample(gaussian_mixture(), data, jnp.zeros(2), checkpoint_dir=path, **{**KW, **kw})


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A checkpointed run of three chunks, and its draws."""
    path = tmp_path_factory.mktemp("ckpt") / "run"
    result = _run(path)
    assert len(_chunks(path)) == 3
    return path, np.asarray(result.positions)


@pytest.fixture
def copy(finished_run, tmp_path):
    """A fresh copy of the finished run's directory."""
    shutil.copytree(finished_run[0], tmp_path / "run")
    return tmp_path / "run"


def test_intact_checkpoint_resumes_to_the_same_draws(finished_run, copy):
    again = _run(copy, resume=True)
    np.testing.assert_array_equal(np.asarray(again.positions), finished_run[1])


def test_overwritten_values_are_refused_by_the_checksum(copy):
    victim = _chunks(copy)[1]
    with h5py.File(victim, "r+") as f:  # a valid netCDF file whose draws changed
        f["position_0"][3, 0, 1] += 0.5
    with pytest.raises(
        ValueError, match=rf"checkpoint chunk {victim} is corrupt: its contents do not match the checksum"
    ):
        _run(copy, resume=True)


def test_overwritten_bytes_are_refused_with_the_file_named(copy):
    victim = _chunks(copy)[2]
    with h5py.File(victim, "r") as f:  # where the draws' bytes lie (the file's middle may be unused space)
        at = f["position_0"].id.get_offset() + f["position_0"].id.get_storage_size() // 2
    raw = bytearray(victim.read_bytes())
    raw[at : at + 64] = b"\xab" * 64
    victim.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"checkpoint chunk {victim} (is corrupt|is truncated or corrupt)"):
        _run(copy, resume=True)


def test_truncated_chunk_is_refused_in_one_line(copy):
    victim = _chunks(copy)[1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"checkpoint chunk {victim} is truncated or corrupt") as info:
        _run(copy, resume=True)
    assert info.value.__cause__ is None and "\n" not in str(info.value)


def test_foreign_and_renamed_chunks_are_refused(copy, tmp_path):
    other = tmp_path / "other"
    _run(other, key=4, num_samples=10)
    shutil.copy(_chunks(other)[0], _chunks(copy)[0])  # a chunk of another run under this run's first name
    with pytest.raises(ValueError, match=rf"checkpoint chunk {_chunks(copy)[0]} belongs to another run"):
        _run(copy, resume=True)
    renamed = tmp_path / "renamed"
    shutil.copytree(other, renamed)
    os.rename(_chunks(renamed)[0], renamed / "chunk-000000000-000000011.nc")
    with pytest.raises(
        ValueError, match=r"chunk-000000000-000000011.nc holds steps \[0, 10\), not the steps its name says"
    ):
        _run(renamed, key=4, num_samples=10, resume=True)


def test_resume_on_other_data_of_the_same_size_names_the_data(copy, tmp_path):
    other = np.asarray(mixture_data())[::-1].copy()  # the same rows in another order: same N, dtype and shape
    with pytest.raises(ValueError, match=r"data.rows_sha256: checkpoint has \"[0-9a-f]{64}\", this call has") as info:
        _run(copy, data=jnp.asarray(other), resume=True)
    assert "are not the data the checkpoint was written with" in str(info.value)
    np.save(tmp_path / "x.npy", other)
    with pytest.raises(ValueError, match=rf"the data passed \(HostData\(MemmapReader\(npy file {tmp_path / 'x.npy'}"):
        _run(copy, data=open_npy(tmp_path / "x.npy"), resume=True)


def test_same_data_from_a_file_resumes(finished_run, copy, tmp_path):
    np.save(tmp_path / "x.npy", np.asarray(mixture_data()))
    again = _run(copy, data=open_npy(tmp_path / "x.npy"), resume=True, num_samples=30)
    np.testing.assert_array_equal(np.asarray(again.positions), finished_run[1])


def test_refusal_names_the_innermost_setting_and_both_values_in_full(copy):
    with pytest.raises(
        ValueError, match=r"proposal_config.sample.closure\[0\].values: checkpoint has \[0.15\], this call has \[0.2\]"
    ):
        _run(copy, proposal=random_walk(scale=0.2), resume=True)
    with pytest.raises(ValueError, match=r"test_config.batch_size: checkpoint has 50, this call has 60\)$"):
        _run(copy, test=mh_minibatch(60), resume=True)


def test_resume_on_a_missing_directory_is_an_error(tmp_path, capsys):
    with pytest.raises(ValueError, match=rf"cannot resume: checkpoint directory {tmp_path / 'nope'} does not exist"):
        _run(tmp_path / "nope", resume=True)
    assert not (tmp_path / "nope").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no run"):
        _run(tmp_path / "empty", resume=True)
    argv = ["sample", "--n-data", "100", "--num-samples", "10", "--no-progress", "--out", str(tmp_path)]
    assert cli.main([*argv, "--checkpoint", str(tmp_path / "typo"), "--resume"]) == 2
    assert f"checkpoint directory {tmp_path / 'typo'} does not exist" in capsys.readouterr().err
