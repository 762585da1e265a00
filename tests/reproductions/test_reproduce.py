"""Small, fast runs of the paper reproductions: they run end to end and keep the paper's ordering."""

import json

import numpy as np
import pytest

from reproductions.gmm import GMMConfig
from reproductions.reproduce_gmm import ReproduceGMMConfig
from reproductions.reproduce_gmm import run as run_gmm
from reproductions.reproduce_logistic import LogisticConfig, accuracy_curve
from reproductions.reproduce_logistic import run as run_logistic


@pytest.mark.slow  # a reproduction's end-to-end run (20-90 s): `make test-slow`
def test_reproduce_gmm_small(tmp_path):
    cfg = ReproduceGMMConfig(base=GMMConfig(n_data=20_000, temperature=200.0, num_samples=200), trials=2)
    text = run_gmm(cfg, tmp_path, progress=False)
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert set(rows) == {"MHminibatch", "AustereMH(c)", "MHSubLhd"}
    mb = {k: v["mean_batch"][0] for k, v in rows.items()}
    assert mb["MHminibatch"] < mb["AustereMH(c)"] < mb["MHSubLhd"]
    assert rows["MHSubLhd"]["hidden_per_test"][0] == 20_000 and rows["MHminibatch"]["hidden_per_test"][0] == 0
    assert "Table 1" in text and "Table 4" in text
    assert {"samples_over_posterior.png", "minibatch_sizes.png", "tables.md"} <= {p.name for p in tmp_path.iterdir()}
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["tables"]) == {"gmm_table1", "gmm_table4"}
    t1 = res["tables"]["gmm_table1"]
    assert t1["columns"][:3] == ["method", "ours", "paper"] and [r[0] for r in t1["rows"]] == list(rows)
    # the table's cells are the run's own figures, and the paper's column its Table 1
    assert (
        t1["rows"][0][1] == f"{rows['MHminibatch']['mean_batch'][0]:.1f} +- {rows['MHminibatch']['mean_batch'][1]:.1f}"
    )
    assert t1["rows"][0][2] == "182.3 +- 11.4"
    assert res["values"]["gmm.mhminibatch_mean_batch"] == f"{mb['MHminibatch']:.1f}"
    assert res["values"]["gmm.sublhd_ratio"] == f"{mb['MHSubLhd'] / mb['MHminibatch']:.0f}"


def test_accuracy_curve_counts_correct_signs():
    test = {"x": np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]], np.float32), "y": np.array([1, 0, 1])}
    pos = np.array([[[1.0, -1.0], [-1.0, 1.0]]], np.float32)  # one chain, two samples
    np.testing.assert_allclose(accuracy_curve(pos, test), [[1.0, 0.0]])


@pytest.mark.slow  # a reproduction's end-to-end run (20-90 s): `make test-slow`
def test_reproduce_logistic_synthetic_small(tmp_path):
    cfg = LogisticConfig(dataset="synthetic", num_samples=60, trials=2, switch_after=20, step_sd=0.01)
    text = run_logistic(cfg, tmp_path, progress=False)
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert set(rows) == {"MHminibatch", "AustereMH(nc)", "AustereMH(c)", "MHSubLhd", "full-data MH"}
    assert rows["full-data MH"]["mean_batch"][0] == 13_000
    assert rows["AustereMH(nc)"]["hidden_per_test"] == 26_000
    assert rows["MHminibatch"]["mean_batch"][0] < rows["MHSubLhd"]["mean_batch"][0]
    assert "Table 2" in text and (tmp_path / "figure3_accuracy.png").exists()
    assert (tmp_path / "minibatch_sizes.png").exists()  # Figures 4 and 5
    res = json.loads((tmp_path / "results.json").read_text())
    t2 = res["tables"]["logistic_synthetic_table2"]
    assert "paper (MNIST-13k)" not in t2["columns"]  # the synthetic set stands in for no column of the paper's
    assert [r[0] for r in t2["rows"]] == list(rows)
    assert res["values"]["logistic_synthetic.mhminibatch_mean_batch"] == f"{rows['MHminibatch']['mean_batch'][0]:.1f}"


def test_logistic_results_name_the_paper_column():
    """The fashion sets' tables carry the paper's 13k or 100k column; Figure 6's table the paper's means."""
    from reproductions.logistic_report import figure6_results, results_prefix, table2_results

    cfg = LogisticConfig(dataset="fashion-100k", trials=3)
    rows = {
        "MHminibatch": {
            "mean_batch": (700.0, 10.0),
            "hidden_per_test": 0.0,
            "acceptance": 0.4,
            "final_accuracy": (0.89, 0.01),
            "wall_s": 1.0,
        },
        "AustereMH(nc)": {
            "mean_batch": (7000.0, 100.0),
            "hidden_per_test": 2e5,
            "acceptance": 0.6,
            "final_accuracy": (0.9, 0.01),
            "wall_s": 2.0,
        },
    }
    design = {
        "austere_c_choice": {"batch_size": 250, "epsilon": 0.01, "worst_error": 0.19, "data_fraction": 0.1},
        "pilot_mu_std_median": 1.0,
    }
    tables, values = table2_results(rows, cfg, design, 0.9)
    t = tables["logistic_fashion100k_table2"]
    assert t["columns"][2] == "paper (MNIST-100k)" and t["rows"][0][2] == "216.5 +- 7.9"
    assert values["logistic_fashion100k.austeremh_nc_over_mhminibatch"] == "10.0"
    assert values["logistic_fashion100k.paper_austeremh_nc_over_mhminibatch"] == "5.1"
    tables, values = figure6_results("fashion-100k", {0.005: 250.0, 0.05: 10000.0})
    assert tables["logistic_fashion100k_figure6"]["rows"][0] == ["0.005", "250.0", "116.1"]
    assert values["logistic_fashion100k_figure6.growth"] == "40" and results_prefix("mnist-5k") == "logistic_mnist5k"
