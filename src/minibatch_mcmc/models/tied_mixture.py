"""The tied-mean Gaussian mixture of Li and Wong Section 5.3: ``x ~ (1/C) sum_j N(theta_j, sigma^2)``.

``theta`` in ``R^C`` holds the ``C`` component means (equal weights, known variance). The model is
symmetric under permutations of ``theta``, so data drawn at ``theta* = 2 e_1`` give a posterior with
``C`` modes near ``2 e_j``, ``j = 1..C``: one of them has ``theta_1 ~ 2`` and ``C - 1`` have
``theta_1 ~ 0`` (the 1:(C-1) height ratio of the paper's Figure 4). The prior is flat (the paper's
"uniform prior").
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.models.base import Model, flat_prior
from minibatch_mcmc.models.shapes import Dims, shape_check


def tied_mixture(num_components: int = 50, sigma_sq: float = 1.0) -> Model:
    """Equal-weight mixture of ``C`` unit-variance normals with means ``theta`` (shape ``(C,)``), flat prior."""
    c = check_int(num_components, "num_components", low=1)
    s2 = check_positive(sigma_sq, "sigma_sq", why="the component variance")
    const = -math.log(c) - 0.5 * math.log(2 * math.pi * s2)

    def log_lik(theta: jax.Array, batch: jax.Array) -> jax.Array:
        z = batch[:, None] - theta[None, :]
        return jax.nn.logsumexp(-0.5 * z * z / s2, axis=1) + const

    return Model(
        log_prior=flat_prior(),
        log_lik=log_lik,
        name="tied_mixture",
        check_shapes=shape_check("tied_mixture", Dims(c), Dims("b")),
    )


def tied_mixture_truth(num_components: int = 50, spike: float = 2.0) -> np.ndarray:
    """The paper's data-generating parameter ``theta* = spike * e_1`` (``2 e_1`` in ``R^50``)."""
    c = check_int(num_components, "num_components", low=1)
    theta = np.zeros(c, np.float32)
    theta[0] = spike
    return theta


def make_tied_mixture_data(
    key: jax.Array, n: int, theta: np.ndarray, sigma_sq: float = 1.0, dtype=jnp.float32
) -> jax.Array:
    """Draw ``n`` points from the mixture with means ``theta`` (each component with probability ``1/C``)."""
    theta = jnp.asarray(theta, dtype)
    c = check_int(int(theta.shape[0]), "num_components", low=1)
    s2 = check_positive(sigma_sq, "sigma_sq", why="the component variance")
    n = check_int(n, "n", low=1)
    k_comp, k_noise = jax.random.split(key)
    comp = jax.random.randint(k_comp, (n,), 0, c)
    return theta[comp] + math.sqrt(s2) * jax.random.normal(k_noise, (n,), dtype)


def nearest_mode(draws: np.ndarray, spike: float = 2.0, radius: float | None = None) -> np.ndarray:
    """Index ``j`` of the mode ``spike * e_j`` within ``radius`` of each draw (``-1`` if none); draws ``(s, C)``.

    The default radius is half the distance ``spike * sqrt(2)`` between two modes, so every draw is
    given to at most one mode.
    """
    radius = spike / math.sqrt(2.0) if radius is None else float(radius)
    x = np.asarray(draws, np.float64)
    modes = spike * np.eye(x.shape[-1])
    d2 = (x * x).sum(-1)[:, None] - 2.0 * x @ modes.T + (modes * modes).sum(-1)[None, :]
    j = np.argmin(d2, axis=1)
    near = np.sqrt(np.maximum(d2[np.arange(x.shape[0]), j], 0.0)) < radius
    return np.where(near, j, -1)
