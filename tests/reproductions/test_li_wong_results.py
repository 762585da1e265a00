"""The Li and Wong experiments write the results files the docs quote: tiny runs, then the tables and values checked.

Each test would catch a run that stops writing ``results.json``, a renamed table or value the docs
quote, a table whose cells disagree with the run's own summary, or (for the wall-clock figure) elapsed
times that are not the sampling time pro rata.
"""

import json

import numpy as np
import pytest

from reproductions import mint_gmm, mint_logistic, mintee, mintee_report


def _results(path):
    return json.loads(path.read_text())


@pytest.mark.slow  # a reproduction's end-to-end run (20-90 s): `make test-slow`
def test_mint_gmm_tiny_run_writes_its_table_and_values(tmp_path):
    cfg = mint_gmm.MintGMMConfig(n_data=3000, batch_size=100, num_samples=400, runs=2, radius=0.3, sgld_steps=50)
    mint_gmm.run(cfg, tmp_path / "run", progress=False, command="cmd", results=str(tmp_path / "mint_gmm.json"))
    res = _results(tmp_path / "mint_gmm.json")
    assert res == _results(tmp_path / "run" / "results.json") and res["command"] == "cmd"
    tab = res["tables"]["mint_gmm_figure1"]
    assert tab["columns"] == ["quantity", "paper", "ours"] and [r[0] for r in tab["rows"]] == [
        "both modes visited",
        "ratio of ball probabilities",
        "SGLD",
    ]
    summary = _results(tmp_path / "run" / "summary.json")
    assert res["values"]["mint_gmm.exact_ratio"] == f"{summary['exact_ratio']:.3f}"
    assert res["values"]["mint_gmm.chi_squared_dof"] == str(summary["chi_squared_dof"])
    assert f"{summary['hits_mode1']} vs {summary['hits_mode2']} hits" in tab["rows"][1][2]


def test_mint_logistic_tables_and_wall_clock_figure(tmp_path):
    """The table cells come from the per-sampler rows; the wall-clock figure is written; first_reaching is exact."""
    x = np.array([1.0, 2.0, 4.0])
    acc = np.array([[0.5, 0.79, 0.9], [0.5, 0.83, 0.9]])
    assert mint_logistic.first_reaching(x, acc, 0.8) == 2.0 and mint_logistic.first_reaching(x, acc, 0.95) is None
    row = {
        "temperature": 1200.0,
        "step_sd": 0.05,
        "acceptance_rate": 0.4681,
        "data_per_step": 100.0,
        "epochs": 200.0,
        "final_predictive_accuracy": 0.8171,
        "final_predictive_accuracy_se": 0.0049,
        "last_draw_accuracy": 0.71,
        "epochs_to_0.8": 138.0,
        "seconds_to_0.8": None,
        "wall_time_s": 86.2,
        "mean_accepted_jump": 1.403,
    }
    rows = {"MINT": row, "tempered MCMC": row, "MCMC": row}
    norm = {"ks_distance": 0.0261, "ks_pvalue": 0.002, "skewness": -0.361, "excess_kurtosis": 0.372}
    settings = mint_logistic.mint(batch_size=100, alpha=0.5).settings(12_000)
    tables, values = mint_logistic.results_tables(rows, norm, settings, mint_logistic.MintLogisticConfig())
    cells = tables["mint_logistic_samplers"]["rows"][0]
    assert cells[:7] == ["MINT", "1,200", "0.05", "0.468", "100", "200", "0.817 +- 0.005"]
    assert cells[8:] == ["138", "not reached", "86", "1.40 (1.71)"]
    assert tables["mint_logistic_table1"]["rows"][0][:2] == ["MINT", "100 (constant)"]
    assert values["mint_logistic.ks_distance"] == "0.026" and values["mint_logistic.mint_wall_s"] == "86"
    curves = {name: (x, acc) for name in rows}
    path = mint_logistic.plot_wall_clock({name: x * 3 for name in rows}, curves, tmp_path)
    assert path.name == "mint_logistic_figure5_wallclock.png" and path.stat().st_size > 0


@pytest.mark.slow  # about 25 s of CPU (MINTEE's compile)
def test_mintee_tiny_run_writes_table3_with_the_paper_rows(tmp_path):
    argv = [
        "--quick",
        "--n-data",
        "2000",
        "--num-samples",
        "120",
        "--burn-in",
        "40",
        "--plain-samples",
        "30",
        "--out",
        str(tmp_path),
        "--name",
        "t",
        "--no-progress",
        "--results",
        str(tmp_path / "mintee_tiny.json"),
    ]
    assert mintee.main(argv) == 0
    res = _results(tmp_path / "mintee_tiny.json")
    assert res["command"].startswith("minibatch-mcmc reproduce mintee --quick")
    tab = res["tables"]["mintee_tiny_table3"]
    assert tab["columns"][:4] == ["chain", "", "T_k", "m_k"] and len(tab["rows"]) == 4  # 4 chains, no paper rows
    occupancy = np.array([[float(c) for c in r[4:]] for r in tab["rows"]])
    np.testing.assert_allclose(occupancy.sum(1), 100.0, atol=0.05)
    summary = _results(tmp_path / "t" / "summary.json")
    assert res["values"]["mintee_tiny.kmeans_elbow"] == str(summary["mintee"]["kmeans_elbow"])
    assert res["values"]["mintee_tiny.plain_basins_visited"] == str(summary["plain_mcmc"]["basins_visited"])
    assert len(mintee_report.PAPER_TABLE3) == len(mintee_report.PAPER_LADDER) == 7
    np.testing.assert_allclose(np.sum(mintee_report.PAPER_TABLE3, axis=1), 100.0, atol=0.05)
