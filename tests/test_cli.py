import importlib
import pathlib

import pytest

from minibatch_mcmc.cli import main


def test_correction_command_prints_the_error(capsys):
    assert main(["correction", "--sigma", "1.0"]) == 0
    out = capsys.readouterr().out
    assert "1" in out and "error" in out.lower()


def test_correction_command_rejects_sigma_beyond_the_limit(capsys):
    assert main(["correction", "--sigma", "2.0"]) == 2
    assert "sigma" in capsys.readouterr().err


def test_demo_rejects_too_many_rows(capsys, tmp_path):
    assert main(["demo", "--n-data", str(2**40), "--out", str(tmp_path)]) == 2
    assert "--n-data" in capsys.readouterr().err


def test_demo_runs_auto_sample_with_its_defaults_at_tall_n(monkeypatch, tmp_path):
    """The demo shows the default the README recommends (``auto_sample``: no proposal or test named) on 10^6 rows;
    it would catch a demo that still ran the earlier default (MHminibatch beside Barker on the mixture). The rows are
    zeros of the shape the demo asks ``make_logistic_data`` for: generating the real 10^6 rows took 3 CPU s, and
    ``auto_sample`` is stopped before it reads them."""
    import numpy as np

    calls = []

    class Stop(Exception):
        pass

    def spy(model, data, start, **options):
        calls.append((model.name, data["y"].shape[0], start.shape, options))
        raise Stop

    def rows(key, n, d):  # make_logistic_data's shapes and dtypes, without generating the rows
        return {"x": np.zeros((n, d), np.float32), "y": np.zeros(n, np.int32)}, np.zeros(d, np.float32)

    monkeypatch.setattr(importlib.import_module("minibatch_mcmc.warmup"), "auto_sample", spy)
    monkeypatch.setattr(importlib.import_module("minibatch_mcmc.models"), "make_logistic_data", rows)
    with pytest.raises(Stop):
        main(["demo", "--out", str(tmp_path), "--no-progress"])
    ((name, n, shape, options),) = calls
    assert n == 1_000_000 and shape == (10,) and "logistic" in name
    assert not {"proposal", "test", "estimator"} & set(options), options


@pytest.mark.slow
def test_demo_end_to_end_small(capsys, tmp_path):
    assert (
        main(
            [
                "demo",
                "--n-data",
                "20000",
                "--num-samples",
                "100",
                "--chains",
                "2",
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "proposal" in out and "theta[9]" in out and (tmp_path / "demo" / "posterior.nc").exists()


def test_reproduce_outside_a_checkout_says_where_the_reproductions_are(tmp_path):
    """An installed wheel (no reproductions/ above the working directory or beside the source) gets one clear error."""
    from minibatch_mcmc.cli import reproductions_root

    installed = tmp_path / "venv" / "lib" / "site-packages" / "minibatch_mcmc" / "cli.py"
    with pytest.raises(ValueError, match="ship with the repository, not the installed package"):
        reproductions_root(tmp_path / "work", installed)
    repo = pathlib.Path(__file__).resolve().parents[1]
    assert reproductions_root(repo / "docs" / "results", installed) == repo


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
    from reproductions.registry import EXPERIMENTS

    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    names = {
        "gmm",
        "logistic",
        "mint-gmm",
        "mint-logistic",
        "cmint-bnn",
        "mintee",
        "sgld-l1",
        "rj-selection",
        "ica",
        "irls",
        "figure4",
        "logistic-t1",
    }
    assert set(EXPERIMENTS) == names
    assert all(name in out for name in names)


def test_reproduce_without_a_name_says_how_to_list(capsys):
    assert main(["reproduce"]) == 2
    assert "--list" in capsys.readouterr().err


def test_every_registered_experiment_has_main_and_help(capsys):
    import importlib

    from reproductions.registry import EXPERIMENTS

    for name, entry in EXPERIMENTS.items():
        assert callable(importlib.import_module(entry.module).main), f"{name}: {entry.module}.main missing"
        with pytest.raises(SystemExit) as exit_:
            entry.main(["--help"])
        assert exit_.value.code == 0
        assert f"reproduce {name}" in capsys.readouterr().out


def test_sample_tests_build_every_named_test():
    from minibatch_mcmc.acceptance.registry import TESTS
    from minibatch_mcmc.cli_inputs import sample_test

    for name, row in TESTS.items():
        assert type(sample_test(name, 50, 1.0)) is row.kind
    test = sample_test("penalty", 80, 0.5)
    assert (test.batch_size, test.sigma_max) == (80, 0.5)  # from --batch-size and --sigma


def test_sample_choices_are_the_registries(capsys):
    """``--test`` and ``--proposal`` offer exactly the registered tests and the warm-up's proposals (written out here),
    and an unknown one is refused before anything runs, listing them (``--proposal`` took any string before)."""
    from minibatch_mcmc.acceptance.registry import TESTS
    from minibatch_mcmc.warmup.laplace_moves import KINDS

    tests = ("mhminibatch", "penalty", "smh", "mhss", "tunamh", "austere", "mhsublhd", "naive", "barker", "metropolis")
    proposals = ("langevin", "random_walk", "independence", "independence_t", "proxy_hmc", "mixture", "auto")
    assert tuple(TESTS) == tests and tuple(KINDS) + ("auto",) == proposals
    for option, names in (("--test", tests), ("--proposal", proposals)):
        with pytest.raises(SystemExit) as exit_:
            main(["sample", "--model", "m:f", "--data", "x.npy", option, "nonsense"])
        assert exit_.value.code == 2
        listed = ", ".join(repr(n) for n in names)
        assert f"argument {option}: invalid choice: 'nonsense' (choose from {listed})" in capsys.readouterr().err


def test_sample_model_takes_the_warmups_default_test_unless_one_is_named(capsys, tmp_path):
    """``sample --model`` passes no test (``auto_sample``'s default for its N, the penalty test) unless ``--test``,
    ``--batch-size`` or ``--sigma`` is given (``--batch-size`` alone: the default test with that m); the mixture keeps
    MHminibatch; ``--proposal`` without ``--model`` is refused."""
    from minibatch_mcmc.cli import build_parser
    from minibatch_mcmc.cli_inputs import model_test
    from minibatch_mcmc.warmup import DEFAULT_TEST

    parse = lambda *a: build_parser().parse_args(["sample", "--model", "m:f", "--data", "x.npy", *a])  # noqa: E731
    assert model_test(parse()) is None
    test = model_test(parse("--batch-size", "80"))
    assert (test.name, test.batch_size) == (DEFAULT_TEST, 80)
    assert model_test(parse("--test", "mhminibatch")).name == "mhminibatch"
    assert main(["sample", "--proposal", "langevin", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "--proposal langevin applies to --model" in capsys.readouterr().err


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
    cmd = [
        sys.executable,
        "-m",
        "minibatch_mcmc.cli",
        "sample",
        "--n-data",
        "1000",
        "--num-samples",
        "10000000",
        "--block-size",
        "20",
        "--no-progress",
        "--checkpoint",
        str(ckpt),
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd, env=dict(os.environ, JAX_PLATFORMS="cpu"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
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


USER_MODEL = """
import numpyro
import numpyro.distributions as dist


def regression(x, y):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x, s), obs=y)
"""


@pytest.mark.slow  # the warm-up's compilations: ~20 s idle, ~50 s on a loaded machine
def test_sample_runs_a_users_numpyro_model_from_a_file_on_parquet_data(tmp_path, capsys):
    """End to end at temperature 1: the draws written are constrained (``s`` near the noise s.d. 0.7, not its log).

    Posterior s.d. of ``s`` at N = 3000 is ~0.009 and of ``w`` ~0.013: a tolerance of 0.06 catches a tempered or
    unconstrained result, or the wrong data column."""
    pytest.importorskip("numpyro")
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(0)
    x = rng.normal(size=3000).astype(np.float32)
    y = (0.5 * x + 0.7 * rng.normal(size=3000)).astype(np.float32)
    pq.write_table(pa.table({"x": x, "y": y}), tmp_path / "rows.parquet")
    (tmp_path / "my_model.py").write_text(USER_MODEL)
    argv = [
        "sample",
        "--model",
        f"{tmp_path / 'my_model.py'}:regression",
        "--data",
        str(tmp_path / "rows.parquet"),
        "--num-samples",
        "200",
        "--chains",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "K=1," in out and "r_hat" in out and "ess_bulk" in out
    phases = [line.split()[0] for line in out.splitlines() if line.startswith("  ") and len(line.split()) == 5]
    assert {"load", "mode", "sampling", "check", "total"} <= set(phases), out  # the whole fit's cost table
    with xr.open_dataset(tmp_path / "sample" / "posterior.nc", group="posterior", engine="h5netcdf") as post:
        assert post["s"].shape == (2, 200) and float(post["s"].min()) > 0
        assert float(post["s"].mean()) == pytest.approx(0.7, abs=0.06)
        assert float(post["w"].mean()) == pytest.approx(0.5, abs=0.06)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--model", "no_colon", "--data", "x.npy"], "expected MODULE:NAME"),
        (["--model", "no_such_module_here:f", "--data", "x.npy"], "cannot import no_such_module_here"),
        (["--model", "minibatch_mcmc.models:gaussian_mean", "--data", "x.npy"], "needs --dim D"),
        (["--model", "minibatch_mcmc.models:gaussian_mean", "--data", "x.csv"], "expected a .npy, .npz or .parquet"),
        (["--model", "minibatch_mcmc.models:nothing_here", "--data", "x.npy"], "has no attribute 'nothing_here'"),
        (["--model", "minibatch_mcmc.models:gaussian_mean"], "needs --data"),
        (
            ["--model", "minibatch_mcmc.models:gaussian_mean", "--data", "x.npy", "--dim", "2", "--columns", "x=a"],
            "--columns applies to a NumPyro model",
        ),
    ],
)
def test_sample_names_what_is_wrong_with_a_user_model(capsys, tmp_path, argv, match):
    import numpy as np

    np.save(tmp_path / "x.npy", np.zeros((10, 2)))
    (tmp_path / "x.csv").write_text("0\n")
    argv = [str(tmp_path / a) if a in ("x.npy", "x.csv") else a for a in argv]
    assert main(["sample", *argv, "--no-progress", "--out", str(tmp_path)]) == 2
    assert match in capsys.readouterr().err


def test_help_has_no_markup(capsys):
    from minibatch_mcmc.cli import build_parser

    parser = build_parser()
    texts = [parser.format_help()]
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse keeps sub-parsers only here
        texts += [p.format_help() for p in action.choices.values()]
    for text in texts:
        assert "`" not in text and "^" not in text, text


def test_data_for_a_model_is_opened_out_of_core(tmp_path, capsys):
    """A ``Model`` gets .npy/.npz/Parquet as host sources (memory-mapped or streamed), not arrays in memory; a NumPyro
    model (and a compressed .npz, with a note) gets them read into memory."""
    import argparse

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from minibatch_mcmc.cli_inputs import load_data, user_model
    from minibatch_mcmc.data.host import HostData

    rows = np.arange(20, dtype=np.float32).reshape(10, 2)
    np.save(tmp_path / "x.npy", rows)
    np.savez(tmp_path / "x.npz", a=rows, b=rows[:, 0])
    np.savez_compressed(tmp_path / "z.npz", a=rows)
    pq.write_table(pa.table({"a": rows[:, 0], "b": rows[:, 1]}), tmp_path / "x.parquet")
    for name in ("x.npy", "x.npz", "x.parquet"):
        source = load_data(str(tmp_path / name), out_of_core=True)
        assert isinstance(source, HostData) and source.n == 10, name
        assert not isinstance(load_data(str(tmp_path / name)), HostData)
    np.testing.assert_array_equal(
        np.asarray(load_data(str(tmp_path / "x.npz"), out_of_core=True).take(np.array([3]))["a"]), rows[[3]]
    )
    compressed = load_data(str(tmp_path / "z.npz"), out_of_core=True)
    assert isinstance(compressed["a"], np.ndarray) and "cannot be memory-mapped" in capsys.readouterr().err
    args = argparse.Namespace(model="minibatch_mcmc.models:gaussian_mean", data=str(tmp_path / "x.npy"), dim=2)
    model, data, start = user_model(args)
    assert isinstance(data, HostData) and start.shape == (2,)


@pytest.mark.slow  # the warm-up's compilations: ~20 s idle
def test_sample_runs_a_model_on_a_memory_mapped_npy(tmp_path, capsys):
    """End to end with a ``Model`` reading a memory-mapped .npy: conjugate Gaussian mean (noise s.d. 1, N = 3000), so
    the posterior mean is within 0.02 (one posterior s.d.) of the data mean; 0.08 catches the wrong column or a
    tempered run (K = 1000 would give a s.d. of 0.58)."""
    import numpy as np
    import xarray as xr

    rows = np.random.default_rng(0).normal([1.0, -2.0], 1.0, size=(3000, 2)).astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    argv = [
        "sample",
        "--model",
        "minibatch_mcmc.models:gaussian_mean",
        "--dim",
        "2",
        "--data",
        str(tmp_path / "rows.npy"),
        "--num-samples",
        "300",
        "--chains",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0, capsys.readouterr().err
    with xr.open_dataset(tmp_path / "sample" / "posterior.nc", group="posterior", engine="h5netcdf") as post:
        theta = post["theta"].values
    np.testing.assert_allclose(theta.mean(axis=(0, 1)), rows.mean(axis=0), atol=0.08)
    assert 0.005 < float(theta[..., 0].std()) < 0.06


COVARIATE_MODEL = """
import numpyro
import numpyro.distributions as dist


def regression(X, y):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))  # a sampled scale: not a recognised GLM, so X and y stay as named
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ w, sigma), obs=y)
"""


def covariate_table(tmp_path):
    """A 40-row Parquet table with one column per covariate (a, b, c) and the response d, and a model file taking (X, y)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = np.random.default_rng(1).normal(size=(40, 4)).astype(np.float32)
    pq.write_table(pa.table({k: rows[:, j] for j, k in enumerate("abcd")}), tmp_path / "t.parquet")
    (tmp_path / "m.py").write_text(COVARIATE_MODEL)
    return rows, [
        "sample",
        "--model",
        f"{tmp_path / 'm.py'}:regression",
        "--data",
        str(tmp_path / "t.parquet"),
        "--no-progress",
        "--out",
        str(tmp_path),
    ]


def test_sample_maps_table_columns_to_the_models_arguments(tmp_path, monkeypatch, capsys):
    """``--columns X=a,b,c y=d`` stacks a, b, c into the (N, 3) X in that order and passes d as the (N,) y; before,
    a table with one column per covariate ended in ``TypeError: missing a required argument: 'X'``."""
    pytest.importorskip("numpyro")
    import numpy as np

    rows, argv = covariate_table(tmp_path)
    seen = []

    class Stop(Exception):
        pass

    def spy(model, data, start, **options):
        seen.append((data, start))
        raise Stop

    monkeypatch.setattr(importlib.import_module("minibatch_mcmc.warmup"), "auto_sample", spy)
    with pytest.raises(Stop):
        main([*argv, "--columns", "X=c,a,b", "y=d"])
    ((data, start),) = seen
    np.testing.assert_array_equal(np.asarray(data["X"]), rows[:, [2, 0, 1]])
    np.testing.assert_array_equal(np.asarray(data["y"]), rows[:, 3])
    assert np.asarray(data["X"]).dtype == np.float32 and np.shape(start["w"]) == (3,)


@pytest.mark.parametrize(
    "extra, match",
    [
        ([], "the columns found: a, b, c, d"),
        (["--columns", "X=a,b,z", "y=d"], "no column(s) z"),
        (["--columns", "X=a,b,c"], "no column for the required argument(s) y"),
        (["--columns", "X"], "expected ARG=COLUMN"),
    ],
)
def test_sample_without_a_column_mapping_lists_arguments_and_columns(tmp_path, capsys, extra, match):
    """Names that do not match (X, y against a, b, c, d), or a mapping naming a missing column or leaving an argument
    out, are one error listing the model's arguments, the columns found and an example ``--columns`` line."""
    pytest.importorskip("numpyro")
    _, argv = covariate_table(tmp_path)
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert match in err and "TypeError" not in err
    if not extra or "=" in extra[-1]:
        assert "the model's arguments: X, y" in err and "--columns X=" in err, err


def test_columns_are_bound_by_name_when_they_match():
    """Without ``--columns``, columns named like the arguments are bound (a stray column is reported, not passed)."""
    import inspect

    import numpy as np

    from minibatch_mcmc.data.columns import model_arguments

    def f(x, y=None):
        pass

    table = {"y": np.zeros(3), "x": np.ones(3), "id": np.arange(3)}
    bound, unused = model_arguments(table, inspect.signature(f))
    assert sorted(bound) == ["x", "y"] and unused == ["id"]
    bound, unused = model_arguments(table, inspect.signature(f), ["x=x,id"])
    assert bound["x"].shape == (3, 2) and bound["x"].dtype == np.float64 and unused == ["y"]
    with pytest.raises(ValueError, match="one array"):
        model_arguments(np.zeros(3), inspect.signature(f), ["x=a"])
