"""``minibatch-mcmc sample``'s launch flags (``cli_launch``): what reaches ``jax.distributed.initialize``, from the flags
or the environment (a Kubernetes indexed job's ``JOB_COMPLETION_INDEX``), and what is refused. The run itself over two
processes: ``tests/samplers/test_data_parallel_auto.py`` (slow)."""

import argparse
import importlib

import numpy as np
import pytest

from minibatch_mcmc.cli import main
from minibatch_mcmc.cli_inputs import load_data
from minibatch_mcmc.cli_launch import launch_settings


def flags(coordinator=None, num_processes=None, process_id=None, distributed=False) -> argparse.Namespace:
    """The launch flags as ``sample``'s parser leaves them."""
    return argparse.Namespace(
        coordinator=coordinator, num_processes=num_processes, process_id=process_id, distributed=distributed
    )


def test_no_flag_is_one_process_whatever_the_environment():
    """Without a launch flag the run is one process even where the variables are set (a shell that exports them for
    another job); would catch a command that joins a cluster nobody asked for."""
    assert launch_settings(flags(), {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}) is None


def test_flags_go_to_jax_with_its_detection_off():
    """The three flags become ``initialize``'s keywords, with JAX's cluster detection off (nothing left to detect)."""
    assert launch_settings(flags("127.0.0.1:1234", 2, 1), {}) == {
        "coordinator_address": "127.0.0.1:1234",
        "num_processes": 2,
        "process_id": 1,
        "cluster_detection_method": "deactivate",
    }


def test_the_environment_fills_what_the_flags_leave():
    """``--distributed`` reads the coordinator and count from ``JAX_*`` and a Kubernetes indexed job's pod index as the
    process id; with nothing set, every keyword is None for JAX's own detection (SLURM). Would catch an indexed job
    whose pods all claim process 0."""
    env = {"JAX_COORDINATOR_ADDRESS": "job-0.svc:6000", "JAX_NUM_PROCESSES": "4", "JOB_COMPLETION_INDEX": "3"}
    got = launch_settings(flags(distributed=True), env)
    assert got == {
        "coordinator_address": "job-0.svc:6000",
        "num_processes": 4,
        "process_id": 3,
        "cluster_detection_method": "deactivate",
    }
    assert launch_settings(flags(distributed=True), {}) == dict.fromkeys(
        ["coordinator_address", "num_processes", "process_id"]
    )
    assert launch_settings(flags(process_id=0, distributed=True), {"JOB_COMPLETION_INDEX": "3"})["process_id"] == 0


@pytest.mark.parametrize(
    "given, env, message",
    [
        (flags("127.0.0.1", 2, 0), {}, "expected HOST:PORT"),
        (flags("127.0.0.1:99", 2, 2), {}, "--process-id 2: expected 0 to 1"),
        (flags("127.0.0.1:99", 0, 0), {}, "--num-processes 0"),
        (flags(distributed=True), {"JAX_PROCESS_ID": "one"}, r"\$JAX_PROCESS_ID='one'"),
    ],
)
def test_bad_launch_settings_are_refused_naming_them(given, env, message):
    with pytest.raises(ValueError, match=message):
        launch_settings(given, env)


def test_sample_starts_jax_distributed_first_with_the_flags(monkeypatch, tmp_path, capsys):
    """``sample --model ... --coordinator ... --num-processes 2 --process-id 1`` calls ``jax.distributed.initialize``
    with them before reading the data; without ``--model`` the flags are refused (the mixture is not split)."""
    import jax

    calls = []

    class Stop(Exception):
        pass

    def spy(**kwargs):
        calls.append(kwargs)
        raise Stop

    monkeypatch.setattr(importlib.import_module("jax.distributed"), "initialize", spy)
    np.save(tmp_path / "x.npy", np.zeros((8, 2), np.float32))
    argv = ["sample", "--model", "minibatch_mcmc.models:gaussian_mean", "--dim", "2", "--data", str(tmp_path / "x.npy")]
    with pytest.raises(Stop):
        main(argv + ["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "1"])
    assert calls == [
        {
            "coordinator_address": "127.0.0.1:1234",
            "num_processes": 2,
            "process_id": 1,
            "cluster_detection_method": "deactivate",
        }
    ]
    assert jax.process_count() == 1
    assert main(["sample", "--num-processes", "2", "--out", str(tmp_path)]) == 2
    assert "they need --model" in capsys.readouterr().err


def test_split_data_opens_this_process_rows(tmp_path):
    """With several processes ``--data`` is opened per process (in one process, all rows are its own); a compressed
    ``.npz``, which cannot be read by row range, is refused. Would catch every process opening the whole table."""
    from minibatch_mcmc.data.shards import partition_of

    np.savez(tmp_path / "d.npz", x=np.ones((6, 2), np.float32), y=np.zeros(6, np.float32))
    np.savez_compressed(tmp_path / "c.npz", x=np.ones((6, 2), np.float32))
    part = partition_of(load_data(str(tmp_path / "d.npz"), out_of_core=True, split=True))
    assert (part.lo, part.hi, part.count) == (0, 6, 1)
    with pytest.raises(ValueError, match="uncompressed .npz"):
        load_data(str(tmp_path / "c.npz"), out_of_core=True, split=True)


def test_a_numpyro_model_is_refused_over_several_processes(tmp_path):
    """Over several processes ``--model`` must be a ``Model``: a NumPyro model function is converted on whole arrays,
    which every process would read; refused naming the model before any row is read."""
    from minibatch_mcmc.cli_inputs import user_model

    (tmp_path / "m.py").write_text("def model(x):\n    pass\n")
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    args = argparse.Namespace(model=f"{tmp_path / 'm.py'}:model", data=str(tmp_path / "x.npy"), dim=None, columns=None)
    with pytest.raises(ValueError, match="m.py:model is a NumPyro model.*give a minibatch_mcmc Model"):
        user_model(args, split=True)
