import pytest

from minibatch_mcmc.cli import main


def test_correction_command_prints_the_error(capsys):
    assert main(["correction", "--sigma", "1.0"]) == 0
    out = capsys.readouterr().out
    assert "1" in out and "error" in out.lower()


def test_correction_command_rejects_sigma_beyond_the_limit(capsys):
    assert main(["correction", "--sigma", "2.0"]) == 2
    assert "sigma" in capsys.readouterr().err


def test_demo_rejects_bad_sigma(capsys, tmp_path):
    assert main(["demo", "--quick", "--sigma", "5", "--out", str(tmp_path)]) == 2
    assert "sigma=5.0" in capsys.readouterr().err


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit):
        main(["nonsense"])


def test_reproduce_passes_every_option_after_the_name_to_the_experiment():
    from minibatch_mcmc.cli import build_parser

    args = build_parser().parse_args(["reproduce", "mint-gmm", "--data", "x", "--quick", "--help"])
    assert args.experiment == "mint-gmm" and args.experiment_args == ["--data", "x", "--quick", "--help"]


def test_builtin_experiments_refuse_unknown_options(capsys):
    assert main(["reproduce", "gmm", "--bogus"]) == 2
    assert "--bogus" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["reproduce", "gmm", "--trials", "0"], "--trials"),
        (["reproduce", "ica", "--epsilons", "0,1.5"], "epsilon"),
        (["reproduce", "rj-selection", "--quick", "--full"], "mutually exclusive"),
        (["reproduce", "mintee", "--trials", "3"], "--trials"),
        (["reproduce", "mint-gmm", "--radius", "-1"], "--radius"),
    ],
)
def test_experiments_refuse_bad_options_with_a_message(capsys, argv, match):
    assert main(argv) == 2
    assert match in capsys.readouterr().err


def test_reproduce_lists_every_registered_experiment(capsys):
    from minibatch_mcmc.experiments.registry import EXPERIMENTS

    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    names = {"gmm", "logistic", "mint-gmm", "mint-logistic", "cmint-bnn", "mintee", "sgld-l1", "rj-selection", "ica", "irls", "figure4", "logistic-t1"}
    assert set(EXPERIMENTS) == names
    assert all(name in out for name in names)


def test_reproduce_without_a_name_says_how_to_list(capsys):
    assert main(["reproduce"]) == 2
    assert "--list" in capsys.readouterr().err


def test_every_registered_experiment_has_main_and_help(capsys):
    import importlib

    from minibatch_mcmc.experiments.registry import EXPERIMENTS

    for name, entry in EXPERIMENTS.items():
        assert callable(importlib.import_module(entry.module).main), f"{name}: {entry.module}.main missing"
        with pytest.raises(SystemExit) as exit_:
            entry.main(["--help"])
        assert exit_.value.code == 0
        assert f"reproduce {name}" in capsys.readouterr().out


def test_sample_tests_build_every_named_test():
    from minibatch_mcmc.cli import SAMPLE_TESTS, sample_test

    for name in SAMPLE_TESTS:
        assert sample_test(name, 50, 1.0) is not None


def test_sample_checks_the_data_size_before_generating_the_data(capsys, monkeypatch, tmp_path):
    import minibatch_mcmc.models

    def never(*args, **kwargs):
        raise AssertionError("make_mixture_data was called before the size check")

    monkeypatch.setattr(minibatch_mcmc.models, "make_mixture_data", never)
    assert main(["sample", "--n-data", "3000000000", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "--n-data=3000000000 must be an integer in [1, 2147483647]" in capsys.readouterr().err


@pytest.mark.slow  # a subprocess importing JAX and compiling: ~25 s on a loaded machine
def test_sample_interrupted_by_sigint_saves_the_draws_and_exits_130(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import xarray as xr

    ckpt = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "minibatch_mcmc.cli", "sample", "--n-data", "1000", "--num-samples", "10000000",
           "--block-size", "20", "--no-progress", "--checkpoint", str(ckpt), "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, env=dict(os.environ, JAX_PLATFORMS="cpu"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not any(ckpt.glob("chunk-*.nc")):
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()[-2000:]
    assert "minibatch-mcmc: interrupted after" in err.decode()
    with xr.open_dataset(tmp_path / "sample" / "posterior.nc", group="posterior", engine="h5netcdf") as post:
        assert post["theta"].shape[1] >= 20 and post["theta"].shape[1] % 20 == 0
