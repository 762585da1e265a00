"""The two-parameter Gaussian mixture of Welling and Teh (2011), as scaled up in Seita et al. Section 6.1.

``theta ~ N(0, diag(sigma1_sq, sigma2_sq))`` and
``x_i ~ 0.5 N(theta_1, sigma_x_sq) + 0.5 N(theta_1 + theta_2, sigma_x_sq)``. The posterior
is bimodal; the paper samples it at temperature ``K`` (likelihood raised to ``1/K``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_positive
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.shapes import Dims, shape_check


class MixtureSettings(NamedTuple):
    """Prior and noise variances of the mixture model (paper: 10, 1, 2)."""

    sigma1_sq: float = 10.0
    sigma2_sq: float = 1.0
    sigma_x_sq: float = 2.0


def gaussian_mixture(settings: MixtureSettings = MixtureSettings()) -> Model:
    """The Welling-Teh mixture model over ``theta`` of shape ``(2,)`` and scalar data ``x``."""
    s1, s2, sx = (check_positive(float(v), name, why="a variance") for name, v in zip(settings._fields, settings))

    def log_prior(theta: jax.Array) -> jax.Array:
        return -0.5 * (theta[0] ** 2 / s1 + theta[1] ** 2 / s2) - 0.5 * jnp.log(s1 * s2) - jnp.log(2 * jnp.pi)

    def log_lik(theta: jax.Array, batch: jax.Array) -> jax.Array:
        x = batch
        c = -0.5 * jnp.log(2 * jnp.pi * sx) + jnp.log(0.5)
        a = c - 0.5 * (x - theta[0]) ** 2 / sx
        b = c - 0.5 * (x - theta[0] - theta[1]) ** 2 / sx
        return jnp.logaddexp(a, b)

    return Model(
        log_prior=log_prior,
        log_lik=log_lik,
        name="gaussian_mixture",
        check_shapes=shape_check("gaussian_mixture", Dims(2), Dims("b")),
    )


def make_mixture_data(
    key: jax.Array,
    n: int,
    theta: tuple[float, float] = (0.0, 1.0),
    settings: MixtureSettings = MixtureSettings(),
    dtype=jnp.float32,
) -> jax.Array:
    """Draw ``n`` points from the mixture at a fixed ``theta`` (paper: ``(0, 1)``)."""
    k_comp, k_noise = jax.random.split(key)
    comp = jax.random.bernoulli(k_comp, 0.5, (n,)).astype(dtype)
    mean = theta[0] + comp * theta[1]
    return mean + jnp.sqrt(settings.sigma_x_sq) * jax.random.normal(k_noise, (n,), dtype)


def log_posterior_grid(
    data: np.ndarray,
    t1: np.ndarray,
    t2: np.ndarray,
    temperature: float,
    settings: MixtureSettings = MixtureSettings(),
    n_bins: int = 20000,
) -> np.ndarray:
    """Unnormalised tempered log posterior on the grid ``t1 x t2`` (shape ``(len(t1), len(t2))``).

    The data enter through a fine histogram (``n_bins`` equal bins, each datum replaced by
    its bin centre), so the cost is ``O(grid * n_bins)`` instead of ``O(grid * N)``; with the
    default the change in ``log p`` per datum is below ``1e-6`` for the paper's data.
    """
    data = np.asarray(data, dtype=np.float64)
    counts, edges = np.histogram(data, bins=n_bins)
    centres = 0.5 * (edges[:-1] + edges[1:])
    keep = counts > 0
    counts, centres = counts[keep], centres[keep]
    s1, s2, sx = settings
    T1, T2 = np.meshgrid(np.asarray(t1, float), np.asarray(t2, float), indexing="ij")
    out = np.empty(T1.shape)
    c = -0.5 * np.log(2 * np.pi * sx) + np.log(0.5)
    for i in range(T1.shape[0]):
        a = c - 0.5 * (centres[None, :] - T1[i][:, None]) ** 2 / sx
        b = c - 0.5 * (centres[None, :] - T1[i][:, None] - T2[i][:, None]) ** 2 / sx
        ll = np.logaddexp(a, b) @ counts
        out[i] = ll / temperature
    prior = -0.5 * (T1**2 / s1 + T2**2 / s2)
    return out + prior
