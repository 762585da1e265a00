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


def test_experiment_options_are_not_taken_for_abbreviations_of_shared_ones():
    from minibatch_mcmc.cli import EXPERIMENT_MODULES, build_parser

    args, extra = build_parser().parse_known_args(["reproduce", "mint-gmm", "--data", "x", "--quick"])
    assert extra == ["--data", "x"] and args.quick and args.dataset == "fashion-13k"
    assert {"mint-gmm", "mint-logistic", "cmint-bnn", "mintee", "sgld-l1", "rj-selection", "ica", "irls"} <= set(EXPERIMENT_MODULES)


def test_builtin_experiments_refuse_unknown_options(capsys):
    assert main(["reproduce", "gmm", "--bogus"]) == 2
    assert "--bogus" in capsys.readouterr().err


def test_every_experiment_module_has_run_cli():
    import importlib

    from minibatch_mcmc.cli import EXPERIMENT_MODULES

    for name, module in EXPERIMENT_MODULES.items():
        assert callable(getattr(importlib.import_module(module), "run_cli", None)), f"{name}: {module}.run_cli missing"
