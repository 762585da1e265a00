"""Conjugate Gaussian mean model: the exact (tempered) posterior is known in closed form.

``theta ~ N(prior_mean, prior_scale^2 I_d)`` and ``x_i ~ N(theta, noise_scale^2 I_d)``. At
temperature ``K`` the likelihood is raised to ``1/K`` and the posterior stays Gaussian.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_positive, check_real
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.shapes import Dims, shape_check


class GaussianMeanSettings(NamedTuple):
    """Prior mean and scale, and the known observation noise scale."""

    prior_mean: float = 0.0
    prior_scale: float = 10.0
    noise_scale: float = 1.0


def gaussian_mean(settings: GaussianMeanSettings = GaussianMeanSettings()) -> Model:
    """The conjugate model over ``theta`` of shape ``(d,)`` and data rows ``x_i`` of shape ``(d,)``."""
    mu0 = check_real(float(settings.prior_mean), "prior_mean")
    tau = check_positive(float(settings.prior_scale), "prior_scale")
    s = check_positive(float(settings.noise_scale), "noise_scale")

    def log_prior(theta: jax.Array) -> jax.Array:
        z = (theta - mu0) / tau
        return -0.5 * jnp.sum(z * z) - theta.size * (jnp.log(tau) + 0.5 * jnp.log(2 * jnp.pi))

    def log_lik(theta: jax.Array, batch: jax.Array) -> jax.Array:
        z = (batch - theta) / s
        return -0.5 * jnp.sum(z * z, axis=-1) - batch.shape[-1] * (jnp.log(s) + 0.5 * jnp.log(2 * jnp.pi))

    return Model(
        log_prior=log_prior,
        log_lik=log_lik,
        name="gaussian_mean",
        check_shapes=shape_check("gaussian_mean", Dims("d"), Dims("b", "d")),
    )


def exact_posterior(
    data: np.ndarray, temperature: float = 1.0, settings: GaussianMeanSettings = GaussianMeanSettings()
) -> tuple[np.ndarray, float]:
    """Posterior mean (shape ``(d,)``) and per-coordinate variance of the tempered posterior."""
    x = np.asarray(data, dtype=np.float64)
    n = x.shape[0]
    mu0, tau, s = settings
    precision = 1.0 / tau**2 + n / (temperature * s**2)
    mean = (mu0 / tau**2 + x.sum(axis=0) / (temperature * s**2)) / precision
    return mean, 1.0 / precision
