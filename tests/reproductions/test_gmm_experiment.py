import json

import numpy as np
import pytest

from reproductions.gmm import GMMConfig, exact_grid, make_data, run_demo, sample_quality


@pytest.mark.slow  # a reproduction's end-to-end run (20-90 s): `make test-slow`
def test_demo_writes_inference_data_figures_and_summary(tmp_path):
    cfg = GMMConfig(n_data=20_000, temperature=200.0, num_samples=400)
    table = run_demo(cfg, tmp_path, progress=False)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"mhminibatch.nc", "barker.nc", "samples_over_posterior.png", "minibatch_sizes.png", "summary.json"} <= names
    summary = json.loads((tmp_path / "summary.json").read_text())
    mb, full = summary["runs"]
    assert full["mean_batch_size"] == 20_000
    assert mb["mean_batch_size"] < 2_000
    assert "mhminibatch" in table and "barker" in table


def test_quality_metrics_prefer_exact_draws_over_shifted_ones():
    """Draws from the exact grid beat the same draws shifted by 0.4 on both metrics; chi-squared near its d.o.f.

    N = 2,000 at K = 20: the experiment's N / K = 100, so the same posterior widths (about ten times cheaper a grid)."""
    cfg = GMMConfig(n_data=2_000, temperature=20.0)
    data = np.asarray(make_data(cfg))
    grid = exact_grid(cfg, data, bins=30)
    rng = np.random.default_rng(0)
    flat = grid.probs.ravel()
    cells = rng.choice(flat.size, size=3000, p=flat)
    i, j = np.unravel_index(cells, grid.probs.shape)
    c1 = 0.5 * (grid.edges1[i] + grid.edges1[i + 1])
    c2 = 0.5 * (grid.edges2[j] + grid.edges2[j + 1])
    exact = np.stack([c1, c2], 1)
    shifted = exact + np.array([0.4, 0.0])
    good, bad = sample_quality(exact, grid), sample_quality(shifted, grid)
    assert good["poisson_loglik_eq40"] > bad["poisson_loglik_eq40"]
    assert good["chi_squared"] < bad["chi_squared"]
    # exact i.i.d. draws: the chi-squared statistic is near its degrees of freedom
    assert good["chi_squared"] < good["chi_squared_dof"] + 5 * np.sqrt(2 * good["chi_squared_dof"])
