"""ICA model: the 4 cosh^2 likelihood, the Amari distance, and exact MH on SO(2) against quadrature."""

import math
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.models.ica import amari_distance, ica, ica_log_lik, logistic_source_log_density, make_ica_data
from minibatch_mcmc.proposals.stiefel import stiefel_random_walk
from minibatch_mcmc.samplers import sample


def test_source_density_is_normalised_4cosh2():
    s = np.linspace(-30, 30, 13)
    np.testing.assert_allclose(
        logistic_source_log_density(jnp.asarray(s, jnp.float32)), -np.log(4 * np.cosh(s / 2) ** 2), rtol=1e-5
    )
    total = integrate.quad(lambda v: math.exp(float(logistic_source_log_density(jnp.float32(v)))), -60, 60)[0]
    assert total == pytest.approx(1.0, abs=1e-5)


def test_log_lik_matches_formula_including_det():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3))
    x = rng.standard_normal((5, 3))
    direct = np.log(abs(np.linalg.det(w))) - np.log(4 * np.cosh(x @ w.T / 2) ** 2).sum(1)
    np.testing.assert_allclose(ica_log_lik(jnp.asarray(w), {"x": jnp.asarray(x)}), direct, rtol=1e-5)


def test_prior_is_uniform_on_the_manifold_only():
    model = ica()
    q, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((4, 4)))
    assert float(model.log_prior(jnp.asarray(q, jnp.float32))) == 0.0
    assert float(model.log_prior(jnp.asarray(1.01 * q, jnp.float32))) == -np.inf
    with pytest.raises(ValueError, match="tolerance"):
        ica(tolerance=0.0)


def test_amari_distance():
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((4, 4))
    perm_scale = np.diag([2.0, -1.0, 0.5, 3.0])[[2, 0, 3, 1]]
    assert amari_distance(perm_scale @ w0, w0) == pytest.approx(0.0, abs=1e-12)
    # P = [[1, 1], [0, 1]]: rows give (1 + 0), columns (0 + 1): (1 + 1) / (2 * 2 * 1)
    w0 = np.eye(2)
    assert amari_distance(np.array([[1.0, 1.0], [0.0, 1.0]]), w0) == pytest.approx(0.5)
    batch = amari_distance(rng.standard_normal((6, 4, 4)), rng.standard_normal((4, 4)))
    assert batch.shape == (6,) and np.all((batch > 0) & (batch <= 1))
    with pytest.raises(ValueError, match="square"):
        amari_distance(np.eye(3), np.eye(2))


def test_make_ica_data_unmixes_to_the_sources():
    d = make_ica_data(seed=0, n=5000)
    x = np.asarray(d.data["x"], float)
    np.testing.assert_allclose(np.cov(x, rowvar=False), np.eye(4), atol=1e-4)
    np.testing.assert_allclose(x @ d.w_true.T, d.sources - d.sources.mean(0), atol=1e-3)


def test_exact_mh_on_so2_matches_quadrature():
    """D = 2: W = R(theta) with Haar = uniform theta; E[cos 4 theta], E[sin 4 theta] (the posterior has period pi/2)."""
    import arviz as az

    rng = np.random.default_rng(5)
    s = rng.laplace(size=(150, 2)) / math.sqrt(2)
    t0 = 0.3
    rot = lambda t: np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])  # noqa: E731
    x = s @ rot(t0)  # x = R(t0)^T s, so W0 = R(t0)
    grid = np.linspace(0, 2 * np.pi, 4001)[:-1]
    logp = np.array([-np.log(4 * np.cosh(x @ rot(t).T / 2) ** 2).sum() for t in grid])
    p = np.exp(logp - logp.max())
    p /= p.sum()
    exact = np.array([p @ np.cos(4 * grid), p @ np.sin(4 * grid)])
    assert 0.3 < np.hypot(*exact) < 0.95  # spread out enough for the test to be informative
    res = sample(
        ica(),
        {"x": jnp.asarray(x, jnp.float32)},
        jnp.eye(2),
        proposal=stiefel_random_walk(0.25),
        test=MetropolisTest(),
        num_samples=6000,
        num_chains=4,
        key=1,
        progress=False,
        block_size=3000,
    )
    w = np.asarray(res.positions, float)
    theta = np.arctan2(w[..., 0, 1], w[..., 0, 0])
    z = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f, ref in zip((np.cos(4 * theta), np.sin(4 * theta)), exact):
            z.append((f.mean() - ref) / (f.std() / math.sqrt(float(az.ess(f)))))
    assert np.max(np.abs(z)) < 4.0, np.round(z, 2)
    assert np.max(np.abs(np.swapaxes(w, -1, -2) @ w - np.eye(2))) < 1e-6
