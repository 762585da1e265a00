"""Bayesian logistic regression with per-datum Bernoulli log-likelihoods."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from minibatch_mcmc.checks import check_positive
from minibatch_mcmc.models.base import GLMSpec, Model, flat_prior, gaussian_prior
from minibatch_mcmc.models.shapes import REGRESSION_DATA, Dims, shape_check


def logistic_log_lik(theta: jax.Array, batch: dict) -> jax.Array:
    """``log p(y_i | x_i, theta)`` with ``P(y=1) = sigmoid(x_i . theta)``, labels in {0, 1}."""
    z = batch["x"] @ theta
    y = batch["y"].astype(z.dtype)
    return y * jax.nn.log_sigmoid(z) + (1.0 - y) * jax.nn.log_sigmoid(-z)


def logistic_regression(prior_scale: float | None = None) -> Model:
    """Logistic regression; ``prior_scale=None`` is the paper's uniform prior, else ``N(0, scale^2)``."""
    if prior_scale is not None:
        check_positive(prior_scale, "prior_scale", why="or None for the uniform prior")
    prior = flat_prior() if prior_scale is None else gaussian_prior(0.0, prior_scale)
    return Model(
        log_prior=prior, log_lik=logistic_log_lik, name="logistic_regression",
        check_shapes=shape_check("logistic_regression", Dims("d"), REGRESSION_DATA), glm=GLMSpec("logistic"),
    )


def make_logistic_data(
    key: jax.Array, n: int, d: int, theta_true: jax.Array | None = None, dtype=jnp.float32
) -> tuple[dict, jax.Array]:
    """Synthetic logistic-regression data ``{"x": (n, d), "y": (n,)}`` and the true weights."""
    k_theta, k_x, k_y = jax.random.split(key, 3)
    if theta_true is None:
        theta_true = jax.random.normal(k_theta, (d,), dtype) / jnp.sqrt(d)
    x = jax.random.normal(k_x, (n, d), dtype)
    p = jax.nn.sigmoid(x @ theta_true)
    y = jax.random.bernoulli(k_y, p).astype(jnp.int32)
    return {"x": x, "y": y}, theta_true
