"""Section 4.2.4: the L1-regression model, its quadrature posterior against closed forms, and a small run."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.experiments.sgld_l1 import SGLDL1Config, iid_tv_floor, run, total_variation
from minibatch_mcmc.experiments.sgld_l1_probe import probe_acceptance
from minibatch_mcmc.models.l1_regression import (
    L1DataSettings,
    L1RegressionSettings,
    exact_posterior_l1,
    l1_regression,
    make_l1_data,
)


@pytest.fixture(scope="module")
def data():
    return make_l1_data(jax.random.key(2))


def _closed_form(d, temperature, settings=L1RegressionSettings()):
    """The posterior as a two-piece mixture of truncated normals (each side of the kink at 0)."""
    x, y = np.asarray(d["x"], np.float64).ravel(), np.asarray(d["y"], np.float64)
    a = settings.lam / temperature
    prec = a * (x @ x)
    s = 1.0 / np.sqrt(prec)
    pieces = []
    for sign in (1.0, -1.0):  # theta > 0, theta < 0
        m = (a * (x @ y) - sign * settings.lam0) / prec
        log_z = 0.5 * prec * m * m + stats.norm.logcdf(sign * m / s)
        lo, hi = (0.0, np.inf) if sign > 0 else (-np.inf, 0.0)
        pieces.append((log_z, stats.truncnorm((lo - m) / s, (hi - m) / s, loc=m, scale=s)))
    w = np.exp(np.array([p[0] for p in pieces]) - np.logaddexp(pieces[0][0], pieces[1][0]))
    return w, [p[1] for p in pieces]


@pytest.mark.parametrize("temperature", [1.0, 7.0])
def test_quadrature_posterior_matches_truncated_normal_mixture(data, temperature):
    post = exact_posterior_l1(data, temperature)
    (w_pos, w_neg), (right, left) = _closed_form(data, temperature)
    np.testing.assert_allclose(post.cdf(0.0), w_neg, rtol=1e-6, atol=1e-12)
    mean = w_pos * right.mean() + w_neg * left.mean()
    second = w_pos * (right.var() + right.mean() ** 2) + w_neg * (left.var() + left.mean() ** 2)
    m, v = post.moments()
    np.testing.assert_allclose(m, mean, rtol=1e-6)
    np.testing.assert_allclose(v, second - mean**2, rtol=1e-4)  # truncnorm's variance loses digits 150 sd out
    t = np.array([-0.002, -1e-4, 1e-4, 0.01, 0.03])
    pdf = np.where(t > 0, w_pos * right.pdf(t), w_neg * left.pdf(t))
    np.testing.assert_allclose(post.density(t), pdf, rtol=1e-6)
    np.testing.assert_allclose(post.cdf(np.array([0.01, 0.03])), w_neg + w_pos * right.cdf([0.01, 0.03]), rtol=1e-6)
    edges = np.linspace(-0.01, 0.2, 30)
    np.testing.assert_allclose(post.bin_masses(edges).sum(), 1.0, rtol=1e-8)


def test_model_matches_scipy_and_the_posterior(data):
    model = l1_regression()
    theta = jnp.array([0.013], jnp.float32)
    rows = {"x": data["x"][:50], "y": data["y"][:50]}
    ll = np.asarray(model.log_lik(theta, rows))
    ref = stats.norm.logpdf(np.asarray(rows["y"]), 0.013 * np.asarray(rows["x"])[:, 0], 1 / np.sqrt(3.0))
    np.testing.assert_allclose(ll, ref, rtol=1e-5)
    np.testing.assert_allclose(float(model.log_prior(theta)), stats.laplace.logpdf(0.013, scale=1 / 4950.0), rtol=1e-5)
    # the model's tempered log posterior and its gradient agree with the quadrature object's
    k = 4.0
    post = exact_posterior_l1(data, k)
    x64 = {"x": np.asarray(data["x"], np.float64), "y": np.asarray(data["y"], np.float64)}
    with jax.enable_x64(True):
        lp = lambda th: model.log_prior(th) + jnp.sum(model.log_lik(th, x64)) / k
        a, b = jnp.array([0.004], jnp.float64), jnp.array([0.021], jnp.float64)
        np.testing.assert_allclose(float(lp(b) - lp(a)), post.log_density(0.021) - post.log_density(0.004), rtol=1e-7)
        for t in (-0.003, 0.004, 0.05):
            g = float(jax.grad(lambda th: lp(th))(jnp.array([t], jnp.float64))[0])
            np.testing.assert_allclose(g, post.grad_log_density(t), rtol=1e-7)


def test_data_follow_the_paper_design(data):
    x, y = np.asarray(data["x"], np.float64)[:, 0], np.asarray(data["y"], np.float64)
    assert x.shape == (10_000,) and y.shape == (10_000,) and 0 <= x.min() and x.max() <= 1
    fit = stats.linregress(x, y)
    assert abs(fit.slope - 0.5) < 4 * fit.stderr
    resid = y - 0.5 * x
    assert abs(resid.var() - 1 / 3) < 4 * (1 / 3) * np.sqrt(2 / x.size)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda d: l1_regression(L1RegressionSettings(lam=0.0)), "lam=0.0"),
        (lambda d: l1_regression(L1RegressionSettings(lam0=-1.0)), "lam0=-1.0"),
        (lambda d: exact_posterior_l1(d, temperature=0.0), "temperature"),
        (lambda d: exact_posterior_l1({"x": np.ones((3, 2)), "y": np.ones(3)}), "one-dimensional"),
        (lambda d: make_l1_data(jax.random.key(0), L1DataSettings(n_data=0)), "n_data"),
        (lambda d: make_l1_data(jax.random.key(0), L1DataSettings(noise_var=-1.0)), "noise_var"),
        (lambda d: run(SGLDL1Config(burn_in=-1), None), "burn_in"),
    ],
)
def test_bad_settings_raise(data, call, message):
    with pytest.raises(ValueError, match=message):
        call(data)


def test_total_variation_and_its_floor():
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    masses = np.array([0.2, 0.5, 0.3])
    assert total_variation(np.full(10, 1.5), edges, masses) == pytest.approx(0.5)
    assert total_variation(np.array([0.5, 1.5, 1.5, 5.0]), edges, masses) == pytest.approx(0.5 * (0.05 + 0 + 0.3 + 0.25))
    # the floor of n exact draws shrinks like 1/sqrt(n)
    f1, f4 = iid_tv_floor(masses, 100), iid_tv_floor(masses, 400)
    assert 0.35 < f4 / f1 < 0.65


def test_small_run_shows_the_sgld_excursion_and_its_correction(tmp_path):
    """Plain SGLD against AustereMH at eps=0.5: the test decides on its first 5% minibatch every step and fixes the shift."""
    cfg = SGLDL1Config(num_samples=2000, burn_in=200)
    _, tables, values = run(cfg, tmp_path, progress=False, methods=("SGLD (no test)", "AustereMH eps=0.5"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {r["method"]: r for r in summary["rows"]}
    sgld, aus = rows["SGLD (no test)"], rows["AustereMH eps=0.5"]
    assert sgld["acceptance_rate"] == 1.0 and sgld["data_fraction_per_test"] == 0.0
    # p-value < 0.5 whenever t != 0; in float32 a |t| below ~0.005 rounds the p-value to 0.5 (rare)
    assert 0.05 <= aus["data_fraction_per_test"] < 0.0505
    assert 0.3 < aus["acceptance_rate"] < 0.95
    exact = summary["exact"]
    assert sgld["mean"] > exact["mean"] + 0.5 * exact["sd"]  # thrown right by the valley's gradient
    assert sgld["tv"] > 2 * aus["tv"]
    assert {"histograms.png", "summary.json", "table.md"} <= {p.name for p in tmp_path.iterdir()}
    # the results table and values restate the summary's figures, row by row
    assert [r[0] for r in tables["sgld_l1_table"]["rows"]] == ["SGLD (no test)", "AustereMH eps=0.5", "exact (quadrature)"]
    assert tables["sgld_l1_table"]["rows"][1][1] == f"{aus['tv']:.3f}" == values["sgld_l1.austere_0.5.tv"]
    assert values["sgld_l1.sgld.mean"] == f"{sgld['mean']:.4f}" and values["sgld_l1.exact.sd"] == f"{exact['sd']:.5f}"


def test_acceptance_probe_against_the_exact_delta(data):
    """``--probe``: Delta from the kernel's statistics equals the quadrature log-density ratio; frequencies near Barker's."""
    rows = probe_acceptance(SGLDL1Config(), pairs=((0.01, 0.013),), n_keys=1000, methods=("MHminibatch",))
    post = exact_posterior_l1(data)
    for r in rows:
        ref = post.log_density(r["theta_new"]) - post.log_density(r["theta"])
        assert r["delta"] == pytest.approx(ref, abs=2e-3)
        assert r["exact"] == pytest.approx(1.0 / (1.0 + np.exp(-ref)), abs=1e-3)
        assert abs(r["z"]) < 4 and 0 < r["data_fraction"] <= 1
