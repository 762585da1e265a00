"""Small, fast runs of the paper reproductions: they run end to end and keep the paper's ordering."""

import json

import numpy as np

from minibatch_mcmc.experiments.gmm import GMMConfig
from minibatch_mcmc.experiments.reproduce_gmm import ReproduceGMMConfig
from minibatch_mcmc.experiments.reproduce_gmm import run as run_gmm
from minibatch_mcmc.experiments.reproduce_logistic import LogisticConfig, accuracy_curve
from minibatch_mcmc.experiments.reproduce_logistic import run as run_logistic


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


def test_accuracy_curve_counts_correct_signs():
    test = {"x": np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]], np.float32), "y": np.array([1, 0, 1])}
    pos = np.array([[[1.0, -1.0], [-1.0, 1.0]]], np.float32)  # one chain, two samples
    np.testing.assert_allclose(accuracy_curve(pos, test), [[1.0, 0.0]])


def test_reproduce_logistic_synthetic_small(tmp_path):
    cfg = LogisticConfig(dataset="synthetic", num_samples=60, trials=2, switch_after=20, step_sd=0.01)
    text = run_logistic(cfg, tmp_path, progress=False)
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert set(rows) == {"MHminibatch", "AustereMH(nc)", "AustereMH(c)", "MHSubLhd", "full-data MH"}
    assert rows["full-data MH"]["mean_batch"][0] == 13_000
    assert rows["AustereMH(nc)"]["hidden_per_test"] == 26_000
    assert rows["MHminibatch"]["mean_batch"][0] < rows["MHSubLhd"]["mean_batch"][0]
    assert "Table 2" in text and (tmp_path / "figure3_accuracy.png").exists()
