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
