"""The automatic warm-up: from a poor start it finds the mode, a Laplace covariance and a tuned proposal, and
``auto_sample`` then matches a quadrature posterior at temperature 1 with small minibatches, its warm-up cost
reported apart."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.warmup import TARGET_ACCEPT, auto_sample, decision_rule, warmup


def _glm(n: int) -> dict:
    rng = np.random.default_rng(8)
    x = np.column_stack([np.ones(n), rng.standard_normal(n)]).astype(np.float32)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x @ np.array([0.3, -0.8]))))).astype(np.int32)
    return {"x": x, "y": y}


def _log_lik_rows(thetas: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Full-data log-likelihood at each of a few parameter values (float64), a block of the grid at a time."""
    z = thetas @ x.T
    return (y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z)).sum(1)


def _quadrature(data: dict, prior_scale: float):
    """Posterior mean and variance on a 301 x 301 grid around the Newton mode (float64), and the mode."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    th = np.zeros(2)
    for _ in range(30):
        p = 1 / (1 + np.exp(-x @ th))
        h = -(x.T * (p * (1 - p))) @ x - np.eye(2) / prior_scale**2
        th = th - np.linalg.solve(h, x.T @ (y - p) - th / prior_scale**2)
    half = 7 * np.sqrt(np.diag(np.linalg.inv(-h)))
    g = [np.linspace(th[j] - half[j], th[j] + half[j], 301) for j in range(2)]
    grid = np.stack([a.ravel() for a in np.meshgrid(*g, indexing="ij")], 1)
    logp = np.concatenate([_log_lik_rows(rows, x, y) for rows in np.array_split(grid, 301)]) - 0.5 * (grid**2).sum(1) / prior_scale**2
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ grid
    return mean, w @ (grid - mean) ** 2, th


@pytest.fixture(scope="module")
def glm():
    data = _glm(30_000)
    return data, *_quadrature(data, 5.0)


def test_warmup_finds_mode_and_reports_cost(glm):
    """From theta0 = (3, 3), many posterior s.d.s away, the warm-up's centre is the Newton mode to 1e-3 s.d.,
    the tuned acceptance is near the Barker-MALA optimum, and every phase reports data and seconds."""
    data, mean, var, mode = glm
    w = warmup(logistic_regression(prior_scale=5.0), data, jnp.asarray([3.0, 3.0]), key=0)
    assert np.max(np.abs(np.asarray(w.centre) - mode) / np.sqrt(var)) < 1e-3
    assert abs(w.acceptance - TARGET_ACCEPT[("barker", "langevin")]) < 0.15
    assert set(w.cost) == {"mode", "proxy", "tuning"}
    assert w.cost["proxy"].data == 30_000 and w.total_data > 30_000 and w.total_seconds > 0


def test_auto_sample_matches_quadrature(glm):
    """auto_sample (MHminibatch m=40, proxy-gradient MALA) matches the quadrature posterior means and variances
    within |z| < 4 at ESS > 3200 (so a 5% s.d. error would show), reading 40 points per test."""
    data, mean, var, _ = glm
    res, w = auto_sample(logistic_regression(prior_scale=5.0), data, jnp.asarray([3.0, 3.0]), num_samples=4000,
                         num_chains=4, key=2, test=mh_minibatch(batch_size=40), progress=False, block_size=2000)
    chk = check_moments(np.asarray(res.positions)[:, 200:], mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
    assert res.summary()["data_per_test"] == 40


def test_targets_follow_the_decision_rule():
    """MHminibatch approximates Barker's rule (acceptance <= 1/2 for small moves), so it gets Barker's targets."""
    assert decision_rule(mh_minibatch()) == "barker" and decision_rule(MetropolisTest()) == "metropolis"
    assert TARGET_ACCEPT[("barker", "langevin")] < 0.5 < TARGET_ACCEPT[("metropolis", "langevin")]


def test_bad_settings_raise(glm):
    data = glm[0]
    with pytest.raises(ValueError, match="proposal='hmc' must be one of 'langevin', 'random_walk'"):
        warmup(logistic_regression(), data, jnp.zeros(2), proposal="hmc")
    with pytest.raises(ValueError, match="recentre=1 must be True or False"):
        warmup(logistic_regression(), data, jnp.zeros(2), recentre=1)
