"""The Student-t family's derivative sups (``glm_families``), checked on a float64 grid by finite differences of scipy's
log density (sharing no code with the library), the model's log-likelihood against scipy, and a model that samples
``nu`` or ``sigma`` refused for the exact tests with a message naming why."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import NU_T, SIGMA_T, make_family_data
from scipy.stats import t as student_t

from minibatch_mcmc.control_variates.glm import model_glm_proxy
from minibatch_mcmc.control_variates.glm_families import sups
from minibatch_mcmc.models import Model, gaussian_prior, student_t_regression


@pytest.mark.parametrize("nu, sigma", [(0.5, 1.0), (1.0, 0.3), (3.0, 0.7), (30.0, 2.0)])
def test_sups_on_a_float64_grid(nu, sigma):
    """Over ``e`` in +-60 sigma sqrt(nu) (a grid fine near the peaks), the largest ``|f''|`` and ``|f'''|`` by central
    differences of ``scipy.stats.t.logpdf`` in ``eta`` equal the closed-form sups to 1e-4 and never exceed them (a sup
    for the wrong ``t``, a missing ``nu^(3/2)`` or ``sigma^3``, or the other extremum taken, fails)."""
    scale = sigma * np.sqrt(nu)
    e = np.concatenate([np.linspace(-60, 60, 200_001), np.linspace(-1, 1, 200_001)]) * scale
    h = 1e-3 * scale

    def f(eta):
        return student_t.logpdf(0.0, nu, loc=eta, scale=sigma)

    eta = -e  # y = 0
    d2 = (f(eta + h) - 2 * f(eta) + f(eta - h)) / h**2
    d3 = (f(eta + 2 * h) - 2 * f(eta + h) + 2 * f(eta - h) - f(eta - 2 * h)) / (2 * h**3)
    sup2, sup3 = sups("student_t", sigma**-2, nu)
    np.testing.assert_allclose(np.max(np.abs(d2)), sup2, rtol=1e-4)
    np.testing.assert_allclose(np.max(np.abs(d3)), sup3, rtol=1e-4)


def test_log_lik_matches_scipy_and_declares_the_family():
    """``student_t_regression``'s rows equal scipy's log density in float64 (to float32 rounding), and its declared GLM
    gives the exact tests a Student-t proxy with the model's ``nu`` and ``sigma``."""
    data, centre = make_family_data("student_t", n=50)
    model = student_t_regression(NU_T, SIGMA_T)
    got = np.asarray(model.log_lik(jnp.asarray(centre), data), np.float64)
    eta = np.asarray(data["x"], np.float64) @ np.asarray(centre, np.float64)
    want = student_t.logpdf(np.asarray(data["y"], np.float64), NU_T, loc=eta, scale=SIGMA_T)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    est = model_glm_proxy(model, data, centre, order=2)
    assert est.family == "student_t" and est.nu == NU_T and est.precision == pytest.approx(SIGMA_T**-2)


def test_sampled_scale_is_refused_by_name():
    """A robust regression that samples ``sigma`` (no GLM declared) is refused for the exact tests, the message saying
    that the bounds need ``nu`` and ``sigma`` fixed; bad settings name the value."""
    data, centre = make_family_data("student_t", n=20)
    sampled = Model(
        gaussian_prior(0.0, 1.0), lambda theta, batch: -jnp.abs(batch["y"] - batch["x"] @ theta[:3]), "t_scale"
    )
    with pytest.raises(ValueError, match="student_t_regression with nu and sigma fixed"):
        model_glm_proxy(sampled, data, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="sigma"):
        student_t_regression(3.0, -1.0)
