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
