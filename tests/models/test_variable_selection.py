"""Variable-selection model: prior against numerical integration, and exact RJ-MH against enumeration + quadrature."""

import math
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.models.variable_selection import (
    SelectionPrior,
    coefficient_log_prior,
    make_selection_data,
    model_posterior_by_quadrature,
    selection_log_lik,
    selection_state,
    variable_selection,
)
from minibatch_mcmc.proposals.reversible_jump import reversible_jump
from minibatch_mcmc.samplers import sample


def test_coefficient_prior_is_a_normalised_density():
    """``p(beta | gamma)`` depends on ``L = ||beta||_1`` only; ``{||beta||_1 = L}`` has measure ``2^k L^(k-1) / (k-1)!``."""
    prior = SelectionPrior(3, 1.0, psi_shape=1.5, psi_scale=0.7)
    for k in (1, 2, 3):
        f = lambda el: (
            math.exp(float(coefficient_log_prior(jnp.float32(el), k, prior)))
            * 2**k
            * el ** (k - 1)
            / math.factorial(k - 1)
        )  # noqa: E731
        assert integrate.quad(f, 0, np.inf, epsrel=1e-7)[0] == pytest.approx(1.0, rel=2e-4)


def test_log_prior_support_and_paper_form():
    model = variable_selection(4, lam=3.0)
    ok = selection_state(np.array([0.5, -1.0, 0.0, 0.0]), np.array([1, 1, 0, 0]))
    assert np.isfinite(float(model.log_prior(ok)))
    # Equation 17 (times 2^-k): ||beta||_1^-k lam^k B(k, D - k + 1) up to a constant
    beta2 = selection_state(np.array([0.5, -1.0, 2.0, 0.0]), np.array([1, 1, 1, 0]))
    paper = lambda l1, k: (
        -k * math.log(l1) + k * math.log(3.0 / 2) + math.lgamma(k) + math.lgamma(5 - k) - math.lgamma(5)
    )  # noqa: E731
    diff = float(model.log_prior(beta2) - model.log_prior(ok))
    assert diff == pytest.approx(paper(3.5, 3) - paper(1.5, 2), abs=1e-5)
    bad = [
        {"beta": ok["beta"], "gamma": jnp.zeros(4)},  # k = 0
        {"beta": ok["beta"].at[2].set(0.3), "gamma": ok["gamma"]},  # excluded coefficient not 0
        {"beta": ok["beta"], "gamma": ok["gamma"].at[2].set(0.5)},  # not a 0/1 mask
    ]
    for theta in bad:
        assert float(model.log_prior(theta)) == -np.inf


def test_log_lik_uses_only_included_coefficients():
    rng = np.random.default_rng(0)
    batch = {"x": jnp.asarray(rng.standard_normal((7, 3)), jnp.float32), "y": jnp.asarray(rng.integers(0, 2, 7))}
    theta = {"beta": jnp.array([0.5, 9.0, -1.0]), "gamma": jnp.array([1.0, 0.0, 1.0])}
    z = np.asarray(batch["x"]) @ np.array([0.5, 0.0, -1.0])
    y = np.asarray(batch["y"])
    np.testing.assert_allclose(selection_log_lik(theta, batch), -np.logaddexp(0, -(2 * y - 1) * z), rtol=1e-5)


def test_minibooNE_shaped_data():
    data, beta = make_selection_data(seed=1, n=20_000, d=10, n_active=3)
    assert data["x"].shape == (20_000, 11) and data["y"].shape == (20_000,)
    assert np.all(data["x"][:, 0] == 1.0) and np.count_nonzero(beta[1:]) == 3
    assert abs(data["y"].mean() - 0.28) < 0.015


def test_bad_hyperparameters_are_rejected():
    with pytest.raises(ValueError, match="lam"):
        variable_selection(3, lam=0.0)
    with pytest.raises(ValueError, match="psi_shape"):
        variable_selection(3, lam=1.0, psi_shape=1.0, psi_scale=0.0)
    with pytest.raises(ValueError, match="n_features"):
        variable_selection(0, lam=1.0)
    with pytest.raises(ValueError, match="0/1"):
        selection_state(np.ones(3), np.array([1, 2, 0]))
    with pytest.raises(ValueError, match="psi_scale > 0"):
        model_posterior_by_quadrature({"x": np.ones((2, 2)), "y": np.ones(2)}, SelectionPrior(2, 1.0))


@pytest.mark.slow  # 24-52 s on the loaded 2-core machine: `make test-slow` (the fast suite's 10-minute budget)
def test_exact_rj_mh_reproduces_model_posterior_by_enumeration():
    """Exact RJ-MH on D = 3 (intercept + 2 features): inclusion probabilities and E[beta] vs quadrature."""
    import arviz as az

    rng = np.random.default_rng(3)
    n = 30
    x = np.concatenate([np.ones((n, 1)), rng.standard_normal((n, 2))], 1).astype(np.float32)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(x @ np.array([0.3, 0.8, 0.0]))))).astype(np.int32)
    data = {"x": x, "y": y}
    prior = SelectionPrior(3, 1.0, psi_shape=2.0, psi_scale=1.0)
    exact = model_posterior_by_quadrature(data, prior, half_width=4.5, num_points=81)
    assert 0.2 < exact.inclusion.min() and exact.inclusion.max() < 0.8  # a non-trivial posterior over models
    res = sample(
        variable_selection(*prior),
        data,
        selection_state(np.full(3, 0.1), np.ones(3)),
        proposal=reversible_jump(3, update_sd=0.6, birth_sd=0.8),
        test=MetropolisTest(),
        num_samples=10_000,
        num_chains=4,
        key=0,
        progress=False,
        block_size=5000,
    )
    g, b = np.asarray(res.positions["gamma"], float), np.asarray(res.positions["beta"], float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = []
        for j in range(3):
            p = g[..., j].mean()
            z.append((p - exact.inclusion[j]) / math.sqrt(p * (1 - p) / float(az.ess(g[..., j]))))
            z.append((b[..., j].mean() - exact.beta_mean[j]) / (b[..., j].std() / math.sqrt(float(az.ess(b[..., j])))))
    assert np.max(np.abs(z)) < 4.0, np.round(z, 2)
