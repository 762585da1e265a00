"""``auto_sample`` run data-parallel (``warmup.auto_parallel``): when it is, what it refuses, and its draws, in one
process over in-memory rows and through ``minibatch-mcmc sample`` over two ``jax.distributed`` CPU processes on
127.0.0.1 (``--coordinator``, ``--num-processes``, ``--process-id``), each process opening only its rows of the ``.npz``
file; the draws against a logistic regression's posterior computed by quadrature in float64, and a resume of the
finished run from process 0's checkpoint directory."""

import sys
from pathlib import Path

import numpy as np
import pytest
from processes import free_port, run_commands

from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.samplers.run_options import RunOptions
from minibatch_mcmc.warmup.auto_parallel import parallel_options, runs_data_parallel

N, CHAINS, DRAWS, BURN = 4000, 16, 1000, 100
MEAN_POWER_ESS = 12_800
"""ESS at which a mean 5% of an s.d. off gives ``|z| > 4`` with probability 0.95 (``se <= 0.05 sd / (4 + 1.645)``);
a 5% error in an s.d. moves the variance 10.25%, detected with that probability from ESS 6,070."""


def write_logistic(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``d.npz`` (``x`` (N, 2), ``y`` (N,)), and its flat-prior posterior's mean and variances by quadrature."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N, 2)).astype(np.float32)
    y = (rng.uniform(size=N) < 1 / (1 + np.exp(-(x @ np.array([0.6, -0.4]))))).astype(np.float32)
    np.savez(path / "d.npz", x=x, y=y)
    return quadrature_moments(x.astype(np.float64), y.astype(np.float64))


def quadrature_moments(x: np.ndarray, y: np.ndarray, points: int = 241) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variances of ``p(theta | x, y)`` with a flat prior: the log posterior on a grid of ``points^2`` nodes
    spanning 10 Laplace s.d.s each way of the maximum likelihood estimate (Newton in float64), normalised on the grid."""
    theta = np.zeros(2)
    for _ in range(30):
        p = 1 / (1 + np.exp(-(x @ theta)))
        hess = (x * (p * (1 - p))[:, None]).T @ x
        theta = theta + np.linalg.solve(hess, x.T @ (y - p))
    sd = np.sqrt(np.diag(np.linalg.inv(hess)))
    axes = [np.linspace(theta[i] - 10 * sd[i], theta[i] + 10 * sd[i], points) for i in range(2)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
    z = x @ grid.T
    logp = (y[:, None] * z - np.logaddexp(0.0, z)).sum(axis=0)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ grid
    return mean, w @ (grid - mean) ** 2


def sample_command(tmp: Path, pid: int, port: int, *extra: str) -> list[str]:
    """Process ``pid``'s command line: the logistic regression as a ``Model``, two processes on 127.0.0.1."""
    return [
        sys.executable,
        "-m",
        "minibatch_mcmc.cli",
        "sample",
        "--model",
        "minibatch_mcmc.models:logistic_regression",
        "--dim",
        "2",
        "--data",
        str(tmp / "d.npz"),
        "--chains",
        str(CHAINS),
        "--num-samples",
        str(DRAWS),
        "--block-size",
        "500",
        "--seed",
        "4",
        "--out",
        str(tmp / f"out{pid}"),
        "--no-progress",
        "--coordinator",
        f"127.0.0.1:{port}",
        "--num-processes",
        "2",
        "--process-id",
        str(pid),
        *extra,
    ]


def launch(tmp: Path, *extra: str) -> list[str]:
    """Both processes of one run; their standard outputs (both must exit 0)."""
    port = free_port()
    got = run_commands([sample_command(tmp, i, port, *extra) for i in range(2)], timeout=900)
    for code, _, err in got:
        assert code == 0, err[-3000:]
    return [out for _, out, _ in got]


def draws(path: Path) -> np.ndarray:
    """``theta`` of a ``posterior.nc``, ``(chain, draw, 2)``."""
    import arviz as az

    return np.asarray(az.from_netcdf(str(path)).posterior["theta"])


@pytest.mark.slow  # two CLI processes warming up, compiling and sampling on the loaded two-core machine: ~2-4 minutes
def test_two_cli_processes_sample_the_posterior_and_resume(tmp_path):
    """Two ``minibatch-mcmc sample`` processes with the launch flags, each reading half the rows of ``d.npz``: the run is
    data-parallel (``method`` in the summary), process 0 alone writes ``posterior.nc``, and 16 chains x 900 kept draws
    match the quadrature posterior's means and variances within 4 Monte Carlo s.e.s with ESS at least
    ``MEAN_POWER_ESS`` (a 5% s.d. error in a mean or an s.d. fails with probability 0.95). Then both processes run again
    with ``--checkpoint`` and once more with ``--resume``: the resumed run restores process 0's saved warm-up and the
    listed blocks and returns the same draws bit for bit. Would catch flags not reaching ``jax.distributed``
    (each process would sample alone: no data-parallel method), a process reading the other's rows, the launch
    sampling the proxy instead of the posterior, every process writing the directory (the second lock is refused), or
    a resume that draws the blocks again with other keys or starts."""
    mean, var = write_logistic(tmp_path)
    outs = launch(tmp_path)
    assert "data_parallel_penalty" in outs[0] and "wrote" in outs[0], outs[0][-2000:]
    assert not (tmp_path / "out1").exists()
    got = draws(tmp_path / "out0" / "sample" / "posterior.nc")
    chk = check_moments(got[:, BURN:], mean, var)
    assert np.all(chk.ess > MEAN_POWER_ESS), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)

    ck = str(tmp_path / "ck")
    launch(tmp_path, "--checkpoint", ck, "--name", "first")
    listed = sorted(p.name for p in Path(ck).iterdir() if p.name.startswith("block-"))
    assert listed == ["block-00000000-00000500.npz", "block-00000500-00001000.npz"], listed
    launch(tmp_path, "--checkpoint", ck, "--resume", "--name", "again")
    first = draws(tmp_path / "out0" / "first" / "posterior.nc")
    np.testing.assert_array_equal(draws(tmp_path / "out0" / "again" / "posterior.nc"), first)
    np.testing.assert_array_equal(first, got)  # the checkpoint changes nothing drawn


@pytest.mark.slow  # two CLI processes start, open their rows and stop before the warm-up: ~30 s on the loaded machine
def test_a_checkpoint_directory_process_zero_cannot_lock_stops_both_processes(tmp_path):
    """Another run holds the checkpoint directory's lock: process 0 is refused it, and process 1 (which only reads the
    directory) stops as well, at once, its error naming process 0 and the directory. Would catch process 1 going on into
    the warm-up's collective passes without process 0: on the old code it stopped there 30 s later with the runtime's
    "Gloo context initialization failed: DEADLINE_EXCEEDED", naming neither the directory nor the lock."""
    import fcntl

    write_logistic(tmp_path)
    ck = tmp_path / "ck"
    ck.mkdir()
    port = free_port()
    with open(ck / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another run, alive
        got = run_commands([sample_command(tmp_path, i, port, "--checkpoint", str(ck)) for i in range(2)], timeout=240)
    assert all(code not in (0, None) for code, _, _ in got), [code for code, _, _ in got]
    errs = [err for _, _, err in got]
    assert "lock" in errs[0].lower(), errs[0][-2000:]
    assert f"process [0] could not use the checkpoint directory {ck}" in errs[1], errs[1][-2000:]


def test_data_parallel_is_chosen_by_the_source_or_by_name(tmp_path):
    """In one process: in-memory rows and a source split over one process run as before unless ``data_parallel=True``;
    a value that is no bool is refused naming it. Would catch ``auto_sample`` switching every split source (a single
    process gains nothing) or taking a truthy string for True."""
    from minibatch_mcmc.data.shards import open_npy_rows

    np.save(tmp_path / "x.npy", np.zeros((10, 2), np.float32))
    rows = {"x": np.zeros((10, 2), np.float32)}
    assert not runs_data_parallel(rows, None) and runs_data_parallel(rows, True) and not runs_data_parallel(rows, False)
    assert not runs_data_parallel(open_npy_rows(tmp_path / "x.npy"), None)
    with pytest.raises(ValueError, match="data_parallel='yes'"):
        runs_data_parallel(rows, "yes")


def test_data_parallel_warm_up_takes_the_penalty_test_without_a_stratum():
    """The warm-up's options for data-parallel sampling: the penalty test by default and no exact stratum; another test,
    a device count or a data sharding refused naming them. Would catch a warm-up that sized another test's minibatch or
    built a stratum the stratified estimator cannot draw."""
    base = {"test": None, "stratum": True, "order": 2}
    assert parallel_options(base, RunOptions()) == {"test": "penalty", "stratum": False, "order": 2}
    with pytest.raises(ValueError, match="'barker'.*penalty test"):
        parallel_options({**base, "test": "barker"}, RunOptions())
    with pytest.raises(ValueError, match="devices=2"):
        parallel_options(base, RunOptions(devices=2))
    with pytest.raises(ValueError, match="data_sharding"):
        parallel_options(base, RunOptions(data_sharding="rows"))


def test_batched_starts_must_have_one_per_chain():
    """``sample_data_parallel(batched_init=True)`` refuses starts whose leading axis is not ``num_chains``, naming both,
    before compiling anything; would catch starts silently broadcast to the wrong chains."""
    from minibatch_mcmc import random_walk, sample_data_parallel
    from minibatch_mcmc.models import gaussian_mean

    x = np.zeros((40, 2), np.float32)
    with pytest.raises(ValueError, match=r"leading axes \[3\], expected num_chains=4"):
        sample_data_parallel(
            gaussian_mean(),
            x,
            np.zeros((3, 2), np.float32),
            proposal=random_walk(0.1),
            batch_size=4,
            num_samples=2,
            num_chains=4,
            batched_init=True,
        )


@pytest.mark.slow  # the warm-up and the data-parallel runner compile in this process: ~30-60 s on the loaded machine
def test_auto_sample_data_parallel_in_one_process_samples_the_posterior(tmp_path):
    """``auto_sample(..., data_parallel=True)`` on in-memory rows in one process: the warm-up, then the stratified
    sampler (``method``), 32 chains from dispersed Laplace starts, against the quadrature posterior (means and variances
    within 4 Monte Carlo s.e.s, ESS at least ``MEAN_POWER_ESS``); the proxy's check ran. Would catch starts, proposal or
    proxy passed wrongly from the warm-up to the sampler (the draws move)."""
    import jax.numpy as jnp

    from minibatch_mcmc.models import logistic_regression
    from minibatch_mcmc.warmup import auto_sample

    mean, var = write_logistic(tmp_path)
    with np.load(tmp_path / "d.npz") as f:
        rows = {"x": f["x"], "y": f["y"]}
    res, w = auto_sample(
        logistic_regression(),
        rows,
        jnp.zeros(2),
        num_samples=600,
        num_chains=32,
        key=5,
        progress=False,
        data_parallel=True,
    )
    assert res.method == "data_parallel_penalty" and w.test.name == "penalty" and w.proxy_check is not None
    chk = check_moments(np.asarray(res.positions)[:, BURN:], mean, var)
    assert np.all(chk.ess > MEAN_POWER_ESS), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)


def test_data_parallel_is_never_routed_to_level_by_level_gibbs(monkeypatch):
    """A data-parallel ``auto_sample`` skips the GLMM route (``warmup.gibbs_route``, whose sweeps read every row in one
    process) and goes to the warm-up with the penalty test and no stratum; would catch a GLMM over split rows sent there."""
    import importlib

    auto = importlib.import_module("minibatch_mcmc.warmup.auto")
    seen = []

    class Stop(Exception):
        pass

    def warm_and_sample(model, data, theta0, keys, options, *rest):
        seen.append(options)
        raise Stop

    monkeypatch.setattr(auto, "gibbs_reason", lambda model, data, named: "every level has 2 rows")
    monkeypatch.setattr(auto, "_warm_and_sample", warm_and_sample)
    rows = {"x": np.zeros((10, 2), np.float32), "y": np.zeros(10, np.float32)}
    from minibatch_mcmc.models import logistic_regression

    with pytest.raises(Stop):
        auto.auto_sample(logistic_regression(), rows, np.zeros(2), num_samples=1, data_parallel=True)
    ((options,),) = [seen]
    assert options["test"] == "penalty" and options["stratum"] is False and "num_chains" not in options
