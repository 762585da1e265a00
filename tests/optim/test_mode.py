"""find_mode against closed forms and scipy in float64; laplace_covariance and the errors of both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize
from scipy.special import expit, log_expit

from minibatch_mcmc import models
from minibatch_mcmc.control_variates import MAX_DENSE_DIM as CONTROL_VARIATE_LIMIT
from minibatch_mcmc.models.base import Model, flat_prior
from minibatch_mcmc.optim import mode
from minibatch_mcmc.optim.mode import MAX_DENSE_DIM, find_mode, laplace_covariance


def gaussian_data(n=3000, d=3, seed=1):
    x = np.asarray(jax.random.normal(jax.random.key(seed), (n, d)), np.float64)
    return (x + np.array([1.0, -2.0, 0.5])[:d]).astype(np.float32)


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_gaussian_mean_mode_and_hessian_are_exact(temperature):
    settings = models.GaussianMeanSettings(prior_mean=0.5, prior_scale=2.0, noise_scale=1.5)
    x = gaussian_data()
    r = find_mode(
        models.gaussian_mean(settings),
        x,
        jnp.zeros(3),
        key=0,
        temperature=temperature,
        adam_steps=100,
        batch_size=200,
        chunk=1000,
    )
    mean, var = models.exact_posterior(x, temperature, settings)
    np.testing.assert_allclose(np.asarray(r.theta_hat, np.float64), mean, rtol=1e-4)
    np.testing.assert_allclose(r.hessian, -np.eye(3) / var, rtol=1e-4)
    assert r.hessian.dtype == np.float64 and r.converged
    assert r.grad_norm <= 1e-6 * (1 + x.shape[0])
    # Adam's minibatches, then a whole number (>= 1) of full passes
    passes, rem = divmod(r.data_used - 100 * 200, x.shape[0])
    assert rem == 0 and passes >= 1 and r.seconds > 0


def logistic_objective(x, y, prior_scale):
    """Negative log posterior, its gradient and Hessian in float64."""

    def f(theta):
        z = x @ theta
        return -(np.sum(y * log_expit(z) + (1 - y) * log_expit(-z)) - 0.5 * theta @ theta / prior_scale**2)

    def grad(theta):
        return -(x.T @ (y - expit(x @ theta)) - theta / prior_scale**2)

    def hess(theta):
        p = expit(x @ theta)
        return (x * (p * (1 - p))[:, None]).T @ x + np.eye(x.shape[1]) / prior_scale**2

    return f, grad, hess


def float64_mode(f, grad, hess, dim: int) -> np.ndarray:
    """The mode in float64: scipy's trust-exact, then exact Newton steps (trust-exact can stop early, status 2, near
    the optimum; Newton from there converges quadratically to the rounding level, ~1e-12 in gradient norm here)."""
    theta = optimize.minimize(f, np.zeros(dim), jac=grad, hess=hess, method="trust-exact", options={"gtol": 1e-9}).x
    for _ in range(3):
        theta = theta - np.linalg.solve(hess(theta), grad(theta))
    return theta


def test_logistic_regression_matches_scipy_float64():
    data, _ = models.make_logistic_data(jax.random.key(2), 4000, 5, theta_true=jnp.array([1.5, -1.0, 0.5, 0.0, 2.0]))
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    f, grad, hess = logistic_objective(x, y, prior_scale=1.0)
    ref_x = float64_mode(f, grad, hess, 5)
    assert np.linalg.norm(grad(ref_x)) < 1e-6  # the float64 reference is the mode to rounding
    r = find_mode(
        models.logistic_regression(prior_scale=1.0),
        data,
        jnp.zeros(5),
        key=1,
        adam_steps=200,
        batch_size=500,
        chunk=1500,
    )
    theta_hat = np.asarray(r.theta_hat, np.float64)
    assert np.linalg.norm(theta_hat - ref_x) <= 1e-3 * np.linalg.norm(ref_x)
    h_ref = -hess(ref_x)
    assert np.linalg.norm(r.hessian - h_ref) <= 1e-2 * np.linalg.norm(h_ref)
    np.testing.assert_allclose(
        r.log_posterior, -f(ref_x) - 2.5 * np.log(2 * np.pi), rtol=1e-5
    )  # gaussian_prior is normalised
    np.testing.assert_allclose(laplace_covariance(r.hessian), np.linalg.inv(-h_ref), rtol=2e-2, atol=1e-6)
    assert r.converged and 1 <= r.newton_steps_taken <= 10


def test_lbfgs_path_above_the_dense_limit(monkeypatch):
    data, _ = models.make_logistic_data(jax.random.key(3), 2000, 4)
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    f, grad, hess = logistic_objective(x, y, prior_scale=2.0)
    ref_x = float64_mode(f, grad, hess, 4)
    monkeypatch.setattr(mode, "MAX_DENSE_DIM", 3)
    r = find_mode(
        models.logistic_regression(prior_scale=2.0),
        data,
        jnp.zeros(4),
        key=0,
        adam_steps=50,
        batch_size=200,
        newton_steps=50,
    )
    assert r.hessian is None and r.converged
    assert np.linalg.norm(np.asarray(r.theta_hat, np.float64) - ref_x) <= 1e-3 * np.linalg.norm(ref_x)
    assert (r.data_used - 50 * 200) % 2000 == 0 and r.data_used > 50 * 200
    assert MAX_DENSE_DIM == CONTROL_VARIATE_LIMIT  # one dense-Hessian limit for the mode and the proxy


def normal_location_scale() -> Model:
    """``x_i ~ N(mu, exp(log_sigma)^2)`` with a pytree ``{"mu": (2,), "log_sigma": ()}`` and a flat prior."""

    def log_lik(theta, batch):
        z = (batch - theta["mu"]) / jnp.exp(theta["log_sigma"])
        return -0.5 * jnp.sum(z * z, axis=-1) - batch.shape[-1] * theta["log_sigma"]

    return Model(log_prior=flat_prior(), log_lik=log_lik, name="location_scale")


def test_pytree_theta_finds_the_maximum_likelihood_estimate():
    x = gaussian_data(n=2000, d=2, seed=4) * np.float32(0.7)
    theta0 = {"mu": jnp.zeros(2), "log_sigma": jnp.zeros(())}
    r = find_mode(normal_location_scale(), x, theta0, key=2, adam_steps=300, batch_size=100)
    xd = x.astype(np.float64)
    mu = xd.mean(axis=0)
    sigma2 = np.mean((xd - mu) ** 2)  # MLE of a common variance over both coordinates
    assert set(r.theta_hat) == {"mu", "log_sigma"} and r.theta_hat["mu"].shape == (2,)
    np.testing.assert_allclose(np.asarray(r.theta_hat["mu"]), mu, rtol=1e-4)
    np.testing.assert_allclose(float(r.theta_hat["log_sigma"]), 0.5 * np.log(sigma2), rtol=1e-4)
    # flattened order: log_sigma, mu (dict keys sorted); Fisher information of (log_sigma, mu) at the MLE
    n = x.shape[0]
    expected = -np.diag([4.0 * n, n / sigma2, n / sigma2])
    np.testing.assert_allclose(r.hessian, expected, rtol=1e-3, atol=1e-2 * n)


def test_laplace_covariance_is_the_inverse_negative_hessian():
    h = -np.array([[2.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(laplace_covariance(h), np.linalg.inv(-h), rtol=1e-12)


@pytest.mark.parametrize(
    "hessian, match",
    [
        (np.diag([-1.0, 0.0]), "not negative definite: its largest eigenvalue is 0"),
        (np.diag([1.0, 2.0]), "largest eigenvalue is 2"),
        (np.array([[-1.0, np.nan], [np.nan, -1.0]]), "non-finite entry nan at \\(0, 1\\)"),
        (np.ones(3), "square matrix"),
    ],
)
def test_laplace_covariance_rejects_bad_hessians(hessian, match):
    with pytest.raises(ValueError, match=match):
        laplace_covariance(hessian)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"adam_steps": -1}, "adam_steps=-1"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"learning_rate": 0.0}, "learning_rate=0.0"),
        ({"newton_steps": 1.5}, "newton_steps=1.5"),
        ({"tol": -1.0}, "tol=-1.0"),
        ({"temperature": float("nan")}, "temperature=nan"),
        ({"chunk": 0}, "chunk=0"),
    ],
)
def test_bad_settings_name_the_setting(kwargs, name):
    with pytest.raises(ValueError, match=name):
        find_mode(models.gaussian_mean(), gaussian_data(n=10), jnp.zeros(3), key=0, **kwargs)


def log_scale_model() -> Model:
    """``x_i ~ N(0, theta^2)`` written with ``log(theta)``: non-finite for ``theta <= 0``."""

    def log_lik(theta, batch):
        return -0.5 * jnp.sum((batch / theta) ** 2, axis=-1) - jnp.log(theta[0])

    return Model(log_prior=flat_prior(), log_lik=log_lik, name="log_scale")


def test_non_finite_start_is_an_error_naming_the_phase():
    x = gaussian_data(n=50, d=1)
    with pytest.raises(ValueError, match="theta0 has a non-finite value nan"):
        find_mode(log_scale_model(), x, jnp.array([jnp.nan]), key=0)
    with pytest.raises(ValueError, match="Adam phase.*at the start theta0"):
        find_mode(log_scale_model(), x, jnp.array([-1.0]), key=0, batch_size=10)
    with pytest.raises(ValueError, match="Newton phase.*log posterior nan"):
        find_mode(log_scale_model(), x, jnp.array([-1.0]), key=0, adam_steps=0)
    with pytest.raises(ValueError, match="floating-point"):
        find_mode(log_scale_model(), x, jnp.array([1]), key=0)
