"""Pieces of the Korattikara et al. 4.1 (sequential IRLS) and Figure 4 reproductions (no full runs here)."""

import jax
import numpy as np
import pytest

from reproductions import figure4
from reproductions import sequential_irls as irls


def test_standins_have_the_stated_shapes_and_labels():
    train, test = irls.million_song_standin(0, 3000, 500, 90)
    assert train["x"].shape == (3000, 90) and test["y"].shape == (500,)
    np.testing.assert_allclose(np.asarray(train["x"]).std(axis=0), 1.0, rtol=1e-3)
    train, _ = irls.infinite_mnist_standin(0, 20000, 10, 50)
    assert train["x"].shape == (20000, 50) and np.all(np.asarray(train["x"])[:, 0] == 1.0)
    assert 0.15 < float(np.mean(train["y"])) < 0.35  # one class against the rest
    train, test = figure4.synthetic_standin(0, 12214, 2037, 50)
    assert train["x"].shape == (12214, 50) and test["x"].shape == (2037, 50)


def test_time_to_reach_and_table():
    c = irls.Curve("m", np.array([1.0, 2.0, 3.0]), np.array([0.9, 0.5, 0.4]), np.array([10, 20, 30]))
    assert irls.time_to_reach(c, 0.5) == 2.0 and irls.time_to_reach(c, 0.1) == float("inf")
    setup = irls.QUICK["lad"]
    table = irls.format_table(setup, [c, c._replace(method="fast", times=c.times / 4)], start=1.0)
    # batch's final 0.4 is the target; 90% of the gap closed at 0.46 -> at t=3 for batch, t=0.75 for "fast"
    assert "0.25" in table.splitlines()[-1] and "3.000" in table.splitlines()[2]


def test_map_estimate_is_a_stationary_point():
    train, _ = figure4.synthetic_standin(1, 2000, 10, 5)
    theta = figure4.map_estimate(train, 10.0).astype(np.float64)
    x, y = train["x"].astype(np.float64), train["y"]
    grad = x.T @ (1 / (1 + np.exp(-x @ theta)) - y) + 10.0 * theta
    assert np.max(np.abs(grad)) < 1e-2 * np.max(np.abs(x.T @ y))


def test_audit_counts_wrong_decisions():
    cfg = figure4.Figure4Config(n_train=1000, dim=3, batch_size=50, audit_steps=300, step_sd=0.05)
    train, _ = figure4.synthetic_standin(2, cfg.n_train, 10, cfg.dim)
    theta0 = figure4.map_estimate(train, cfg.prior_precision)
    loose = figure4.audit(cfg, train, theta0, 0.2, jax.random.PRNGKey(0))
    strict = figure4.audit(cfg, train, theta0, 1e-4, jax.random.PRNGKey(0))
    assert loose.data_fraction < strict.data_fraction <= 1.0
    assert 0 < loose.wrong_fraction and strict.wrong_fraction <= loose.wrong_fraction
    assert 0.05 < loose.acceptance < 0.95
    with pytest.raises(ValueError, match="epsilon"):
        figure4.audit(cfg, train, theta0, 0.0, jax.random.PRNGKey(0))


@pytest.mark.parametrize(
    "module, extra, match",
    [
        (irls, ["--problems", "ridge"], "--problems"),
        (irls, ["--epsilon", "0.7"], "epsilon"),
        (irls, ["--n-train", "10"], "--n-train"),
        (figure4, ["--batch-size", "1"], "--batch-size"),
    ],
)
def test_cli_rejects_bad_options(module, extra, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        module.main(["--quick", "--out", str(tmp_path), *extra])
