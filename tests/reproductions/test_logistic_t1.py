"""The temperature-1 demo experiment on a tiny logistic regression: outputs written, numbers sane, both runs agree."""

import json

import arviz as az
import numpy as np
import pytest

from reproductions.logistic_t1 import METHODS, T1Config, main, run_t1


@pytest.mark.slow  # a reproduction's end-to-end run (20-90 s): `make test-slow`
def test_control_variate_and_full_data_runs_agree(tmp_path):
    cfg = T1Config(n_data=20_000, dim=3, num_samples=1500, reference_samples=1500, seed=4)
    table = run_t1(cfg, tmp_path, progress=False)
    names = {p.name for p in tmp_path.iterdir()}
    assert {
        "t1_mhminibatch_cv.nc",
        "t1_metropolis.nc",
        "t1_posteriors.png",
        "t1_summary.json",
        "t1_summary.txt",
    } <= names
    assert all(m in table for m in METHODS) and "max |difference| / MC s.e." in table
    results = json.loads((tmp_path / "t1_results.json").read_text())
    assert results["command"] == "minibatch-mcmc reproduce logistic-t1" and results["machine"]
    rendered = results["tables"]["logistic_t1"]
    assert rendered["columns"][0] == "method" and [r[0] for r in rendered["rows"]] == list(METHODS)
    assert rendered["rows"][0][2] == f"{cfg.batch_size:,}"  # data per test of the control-variate run
    assert float(results["values"]["logistic_t1.max_mean_z"]) >= 0
    summary = json.loads((tmp_path / "t1_summary.json").read_text())
    cv, full = summary["runs"]
    assert cv["data_per_test"] == cfg.batch_size  # the proxy's residuals: the test stops after one minibatch
    assert full["data_per_test"] == cfg.n_data and full["total_hidden_data"] == 0
    assert 0.2 < cv["acceptance_rate"] < 0.5  # tuned to Barker's 0.347
    assert full["acceptance_rate"] > cv["acceptance_rate"]  # Metropolis accepts more than Barker with the same proposal
    assert cv["min_ess"] > 200 and full["min_ess"] > 100
    assert cv["warmup_data"] == full["warmup_data"] > cfg.n_data and cv["warmup_s"] > 0
    # the warm-up's phases, then the fit's setup, sampling and check (auto_sample records them in the same table)
    assert set(cv["warmup_phases"]) == {"mode", "proxy", "influence", "tuning", "setup", "sampling", "check"}
    # posterior means of the two runs agree within Monte Carlo error
    a, b = (np.asarray(r["ess"]) for r in (cv, full))
    assert a.shape == b.shape == (cfg.dim,)
    draws = {}
    for name, path in (("cv", "t1_mhminibatch_cv.nc"), ("full", "t1_metropolis.nc")):
        x = az.from_netcdf(str(tmp_path / path)).posterior["theta"].values
        draws[name] = x[:, int(cfg.burn_in * x.shape[1]) :].astype(np.float64)
    se = np.sqrt(draws["cv"].reshape(-1, cfg.dim).var(0) / a + draws["full"].reshape(-1, cfg.dim).var(0) / b)
    z = (draws["cv"].mean((0, 1)) - draws["full"].mean((0, 1))) / se
    assert np.all(np.abs(z) < 4), z
    # and both sit near the truth the data were drawn from (posterior s.d. ~ N^-1/2)
    sd = draws["full"].reshape(-1, cfg.dim).std(0)
    assert np.all(np.abs(draws["cv"].mean((0, 1)) - np.asarray(summary["theta_true"])) < 6 * sd)


def test_main_refuses_bad_options():
    with pytest.raises(ValueError, match="--batch-size"):
        main(["--batch-size", "0"])
    with pytest.raises(ValueError, match="methods"):
        run_t1(T1Config(), None, methods=("metropolis",))
