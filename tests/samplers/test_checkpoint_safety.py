"""A checkpoint directory under stress: links planted at temporary names, re-formatted settings, a second run started on
it, a directory that cannot be written, a full disk. Each is one clear outcome, nothing outside the directory changes, and
what was finished survives."""

import errno
import functools
import hashlib
import importlib
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
from minibatch_mcmc.samplers import checkpoint
from minibatch_mcmc.samplers.safe_files import LOCK_FILE, CheckpointWriteError

N = 400


@functools.cache
def mixture_rows() -> jax.Array:
    """The ``N`` rows every run here samples, made on first use: at import they cost every pytest-xdist worker 1.3 CPU s
    while collecting, also the one that does not run this file."""
    return make_mixture_data(jax.random.key(1), N)


KW = dict(
    proposal=random_walk(scale=0.15), test=mh_minibatch(50), key=3, temperature=20.0, block_size=10, progress=False
)


def _chunks(path):
    return sorted(p for p in os.listdir(path) if checkpoint.CHUNK_PATTERN.match(p))


def _run(path, num_samples=30, **kw):
    return sample(
        gaussian_mixture(), mixture_rows(), jnp.zeros(2), num_samples=num_samples, checkpoint_dir=path, **{**KW, **kw}
    )


@pytest.fixture(scope="module")
def straight():
    """The draws of an uninterrupted run of 30 steps without a checkpoint."""
    return np.asarray(sample(gaussian_mixture(), mixture_rows(), jnp.zeros(2), num_samples=30, **KW).positions)


def test_links_planted_at_every_temporary_name_are_never_followed(tmp_path, straight):
    """Before: settings.json was written through ``.settings.json.tmp`` (and chunks through ``.chunk-*.tmp``), following a
    link planted there, so a fresh run overwrote a file outside its directory. Now nothing outside changes."""
    outside, ckpt = tmp_path / "outside", tmp_path / "ckpt"
    outside.mkdir()
    ckpt.mkdir()
    names = [".settings.json.tmp", ".warmup.pkl.tmp", ".warmup.json.tmp"] + [
        f".chunk-{a:09d}-{a + 10:09d}.nc.tmp" for a in (0, 10, 20)
    ]
    for name in names:
        (outside / name).write_text("precious")
        (ckpt / name).symlink_to(outside / name)
    result = _run(ckpt)
    assert all((outside / n).read_text() == "precious" for n in names)
    np.testing.assert_array_equal(np.asarray(result.positions), straight)
    assert len(_chunks(ckpt)) == 3 and not any(p.endswith(".tmp") for p in os.listdir(ckpt))


def test_a_link_planted_at_the_lock_is_refused(tmp_path):
    outside, ckpt = tmp_path / "outside", tmp_path / "ckpt"
    ckpt.mkdir()
    outside.write_text("precious")
    (ckpt / LOCK_FILE).symlink_to(outside)
    with pytest.raises(ValueError, match=rf"{ckpt / LOCK_FILE} is a symbolic link"):
        _run(ckpt)
    assert outside.read_text() == "precious" and not (ckpt / checkpoint.SETTINGS_FILE).exists()


@pytest.mark.slow
def test_reformatted_settings_resume_to_the_same_draws(tmp_path, straight):
    """Before: the run id was the hash of settings.json's bytes, so re-saving the same settings with other formatting
    orphaned every chunk ('belongs to another run'). Now the id hashes the parsed content."""
    _run(tmp_path, num_samples=20)
    settings = tmp_path / checkpoint.SETTINGS_FILE
    content = json.loads(settings.read_text())
    settings.write_text(json.dumps(dict(reversed(list(content.items()))), indent=4) + "\n")
    assert settings.read_text() != json.dumps(content, indent=1, sort_keys=True)
    resumed = _run(tmp_path, resume=True)
    np.testing.assert_array_equal(np.asarray(resumed.positions), straight)


@pytest.mark.slow
def test_format_3_chunks_with_the_byte_hash_are_still_read(tmp_path, straight):
    """A chunk written before this change carries the hash of settings.json's bytes: it is still resumed."""
    _run(tmp_path, num_samples=10)
    chunk = tmp_path / _chunks(tmp_path)[0]
    with xr.open_dataset(chunk, engine="h5netcdf") as opened:
        ds = opened.load()
    raw = hashlib.sha256((tmp_path / checkpoint.SETTINGS_FILE).read_bytes()).hexdigest()
    arrays = {k: ds[k].values for k in ds.data_vars}
    ds.attrs.update(run=raw, sha256=checkpoint.content_checksum(arrays, 0, 10, raw))
    ds.to_netcdf(chunk, engine="h5netcdf")
    np.testing.assert_array_equal(np.asarray(_run(tmp_path, resume=True).positions), straight)


@pytest.mark.slow
def test_a_second_run_on_a_directory_in_use_is_refused_before_writing(tmp_path, straight):
    """Before: two runs started on one directory both wrote to it (and left it unresumable). Now the second is refused at
    once while the first holds the lock, and a lock left by a dead process blocks nothing."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d 1' % os.getpid()); print('locked', flush=True); time.sleep(120)",
            str(ckpt / LOCK_FILE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            ValueError, match=rf"checkpoint directory {ckpt} is in use by another run \(process {holder.pid} "
        ):
            _run(ckpt)
        assert sorted(os.listdir(ckpt)) == [LOCK_FILE]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    np.testing.assert_array_equal(np.asarray(_run(ckpt).positions), straight)  # the dead holder's lock is gone with it


def test_an_unwritable_directory_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """Before: a checkpoint directory that could not be written failed only when the first file was written (after the
    whole warm-up in auto_sample). Now it is refused at once, naming the directory."""
    warmup_module = importlib.import_module(
        "minibatch_mcmc.warmup.auto"
    )  # the module defining auto_sample (the names it looks up are patched there)
    from minibatch_mcmc.models import gaussian_mean

    def no_warmup(*args, **kwargs):
        raise AssertionError("the warm-up ran")

    monkeypatch.setattr(warmup_module, "warmup", no_warmup)
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "ckpt"
    with pytest.raises(ValueError, match=rf"checkpoint directory {target} is not writable"):
        warmup_module.auto_sample(
            gaussian_mean(),
            np.zeros((100, 2), np.float32),
            jnp.zeros(2),
            num_samples=10,
            checkpoint_dir=target,
            progress=False,
        )
    if os.geteuid() != 0:  # root writes to a read-only directory
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        with pytest.raises(ValueError, match=rf"checkpoint directory {ro} is not writable"):
            warmup_module.auto_sample(
                gaussian_mean(),
                np.zeros((100, 2), np.float32),
                jnp.zeros(2),
                num_samples=10,
                checkpoint_dir=ro,
                progress=False,
            )


@pytest.mark.slow
def test_a_full_disk_is_one_clear_error_and_the_finished_chunks_resume(tmp_path, monkeypatch, straight):
    """ENOSPC while writing the second chunk: one error naming ENOSPC, the file and the finished chunk, no temporary
    left, the first chunk intact; the resumed run then draws what an uninterrupted one draws."""
    write = xr.Dataset.to_netcdf
    calls = []

    def full_on_second(self, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            open(path, "wb").write(b"\x89HDF partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, path, *args, **kwargs)

    monkeypatch.setattr(xr.Dataset, "to_netcdf", full_on_second)
    with pytest.raises(
        CheckpointWriteError,
        match=rf"could not write checkpoint chunk {tmp_path}/chunk-000000010-000000020.nc "
        r"\(ENOSPC: the disk is full\); the 1 finished chunk\(s\) before it are intact",
    ):
        _run(tmp_path)
    assert _chunks(tmp_path) == ["chunk-000000000-000000010.nc"]
    assert not any(p.endswith(".tmp") for p in os.listdir(tmp_path))
    monkeypatch.setattr(xr.Dataset, "to_netcdf", write)
    np.testing.assert_array_equal(np.asarray(_run(tmp_path, resume=True).positions), straight)


@pytest.mark.slow
def test_a_run_killed_in_its_warmup_resumes_with_the_saved_warmup(tmp_path, monkeypatch):
    """Before: a run killed after its warm-up was saved but before its first chunk could not be resumed ('holds no run')
    and a new run threw the saved warm-up away. Now the resume restores it (the warm-up is not run again) and draws what
    an uninterrupted run draws; a run killed before the warm-up was saved resumes by doing it."""
    warmup_module = importlib.import_module(
        "minibatch_mcmc.warmup.auto"
    )  # the module defining auto_sample (the names it looks up are patched there)
    from minibatch_mcmc.models import gaussian_mean

    x = (np.random.default_rng(3).standard_normal((2000, 2)) + 1.0).astype(np.float32)
    kw = dict(num_chains=2, key=4, progress=False, block_size=50, num_starts=0, num_samples=100)
    whole, _ = warmup_module.auto_sample(gaussian_mean(), x, jnp.zeros(2), checkpoint_dir=tmp_path / "a", **kw)
    real_sample, real_warmup, warmups = warmup_module.sample_compiled, warmup_module.warmup, []

    def killed(*args, **kwargs):
        raise RuntimeError("killed before sampling began")  # as SIGKILL would, after the warm-up was saved

    monkeypatch.setattr(warmup_module, "warmup", lambda *a, **k: warmups.append(1) or real_warmup(*a, **k))
    monkeypatch.setattr(warmup_module, "sample_compiled", killed)
    with pytest.raises(RuntimeError, match="killed"):
        warmup_module.auto_sample(gaussian_mean(), x, jnp.zeros(2), checkpoint_dir=tmp_path / "b", **kw)
    assert not (tmp_path / "b" / checkpoint.SETTINGS_FILE).exists() and len(warmups) == 1
    with pytest.raises(
        ValueError, match="already holds a run .*warmup.json.* pass resume=True"
    ):  # refused before a second warm-up
        warmup_module.auto_sample(gaussian_mean(), x, jnp.zeros(2), checkpoint_dir=tmp_path / "b", **kw)
    monkeypatch.setattr(warmup_module, "sample_compiled", real_sample)
    resumed, _ = warmup_module.auto_sample(
        gaussian_mean(), x, jnp.zeros(2), checkpoint_dir=tmp_path / "b", resume=True, **kw
    )
    assert len(warmups) == 1  # restored, not redone
    np.testing.assert_array_equal(np.asarray(resumed.positions), np.asarray(whole.positions))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / LOCK_FILE).touch()  # all a run killed during its warm-up leaves
    resumed, _ = warmup_module.auto_sample(
        gaussian_mean(), x, jnp.zeros(2), checkpoint_dir=tmp_path / "c", resume=True, **kw
    )
    assert len(warmups) == 2
    np.testing.assert_array_equal(np.asarray(resumed.positions), np.asarray(whole.positions))


@pytest.mark.slow
def test_a_multimode_warmup_is_saved_and_its_groups_resume(tmp_path, monkeypatch):
    """Before: a warm-up whose estimator holds the model (a stratified proxy: the 6.1 mixture's two modes) could not be
    pickled, so a resume redid it, and a run killed before its chain groups' directories existed could not be resumed.
    Now the model is saved as a reference the resuming call supplies, the warm-up is restored, and the draws equal an
    uninterrupted run's."""
    warmup_module = importlib.import_module(
        "minibatch_mcmc.warmup.auto"
    )  # the module defining auto_sample (the names it looks up are patched there)

    data = make_mixture_data(jax.random.key(4), 2000)
    kw = dict(num_samples=40, num_chains=2, key=1, progress=False, block_size=20, num_starts=8)
    whole, w = warmup_module.auto_sample(gaussian_mixture(), data, jnp.zeros(2), checkpoint_dir=tmp_path / "a", **kw)
    assert len(w.modes) == 2 and (tmp_path / "a" / "warmup.npz").exists()
    real_groups, real_warmup, warmups = warmup_module.sample_groups, warmup_module.warmup, []

    def killed(*args, **kwargs):
        raise RuntimeError("killed before sampling began")

    monkeypatch.setattr(warmup_module, "sample_groups", killed)
    with pytest.raises(RuntimeError, match="killed"):
        warmup_module.auto_sample(gaussian_mixture(), data, jnp.zeros(2), checkpoint_dir=tmp_path / "b", **kw)
    monkeypatch.setattr(warmup_module, "sample_groups", real_groups)
    monkeypatch.setattr(warmup_module, "warmup", lambda *a, **k: warmups.append(1) or real_warmup(*a, **k))
    resumed, _ = warmup_module.auto_sample(
        gaussian_mixture(), data, jnp.zeros(2), checkpoint_dir=tmp_path / "b", resume=True, **kw
    )
    assert warmups == []
    np.testing.assert_array_equal(np.asarray(resumed.positions), np.asarray(whole.positions))


def test_the_lock_is_reentrant_in_its_thread_only(tmp_path):
    """``auto_sample`` holds the lock and calls ``sample``, which takes it again: a no-op in the same thread; another
    thread of the same process is refused like another process; once released the lock blocks nobody."""
    import threading

    from minibatch_mcmc.samplers.safe_files import run_lock

    errors = []

    def other():
        try:
            with run_lock(tmp_path):
                errors.append(None)
        except ValueError as err:
            errors.append(err)

    with run_lock(tmp_path):
        with run_lock(tmp_path):
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
    assert isinstance(errors[0], ValueError) and "in use by another run" in str(errors[0])
    other()
    assert errors[1] is None
