"""Probit and Poisson (log link, optional log-exposure offset) regressions: generalised linear models with data
``{"x": (N, d), "y": (N,)}`` (``"offset": (N,)`` too when the Poisson model has one)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln, log_ndtr

from minibatch_mcmc.checks import check_positive
from minibatch_mcmc.models.base import GLMSpec, Model, flat_prior, gaussian_prior
from minibatch_mcmc.models.shapes import REGRESSION_DATA, Dims, shape_check


def probit_log_lik(theta: jax.Array, batch: dict) -> jax.Array:
    """``log p(y_i | x_i, theta)`` with ``P(y=1) = Phi(x_i . theta)``, labels in {0, 1}."""
    z = batch["x"] @ theta
    s = 2.0 * batch["y"].astype(z.dtype) - 1.0
    return log_ndtr(s * z)


def poisson_log_lik(theta: jax.Array, batch: dict) -> jax.Array:
    """``y eta - e^eta - log y!`` with ``eta = x_i . theta`` (plus ``offset_i`` when the batch has one)."""
    eta = batch["x"] @ theta
    if "offset" in batch:
        eta = eta + batch["offset"].astype(eta.dtype)
    y = batch["y"].astype(eta.dtype)
    return y * eta - jnp.exp(eta) - gammaln(y + 1.0)


def _prior(prior_scale: float | None):
    if prior_scale is not None:
        check_positive(prior_scale, "prior_scale", why="or None for the uniform prior")
    return flat_prior() if prior_scale is None else gaussian_prior(0.0, prior_scale)


def probit_regression(prior_scale: float | None = None) -> Model:
    """Probit regression; ``prior_scale=None``: uniform prior, else ``N(0, scale^2)`` on every coefficient."""
    return Model(log_prior=_prior(prior_scale), log_lik=probit_log_lik, name="probit_regression",
                 check_shapes=shape_check("probit_regression", Dims("d"), REGRESSION_DATA), glm=GLMSpec("probit"))


def poisson_regression(prior_scale: float | None = None, offset: bool = False) -> Model:
    """Poisson regression with log link; ``offset=True``: data carry ``"offset"`` (log exposure) added to ``x . theta``."""
    spec = dict(REGRESSION_DATA, offset=Dims("b")) if offset else REGRESSION_DATA
    return Model(log_prior=_prior(prior_scale), log_lik=poisson_log_lik, name="poisson_regression",
                 check_shapes=shape_check("poisson_regression", Dims("d"), spec), glm=GLMSpec("poisson", offset=bool(offset)))


def make_glm_data(key: jax.Array, n: int, d: int, family: str, theta_true: jax.Array | None = None,
                  dtype=jnp.float32) -> tuple[dict, jax.Array]:
    """Synthetic data ``{"x": (n, d), "y": (n,)}`` for ``family`` in ``("logistic", "probit", "poisson")``: standard
    normal covariates, true weights ``N(0, 1/d)`` (Poisson: ``N(0, 0.25/d)``, so counts stay moderate)."""
    if family not in ("logistic", "probit", "poisson"):
        raise ValueError(f"family={family!r}: allowed are 'logistic', 'probit', 'poisson'")
    k_theta, k_x, k_y = jax.random.split(key, 3)
    if theta_true is None:
        theta_true = jax.random.normal(k_theta, (d,), dtype) / jnp.sqrt(d) * (0.5 if family == "poisson" else 1.0)
    x = jax.random.normal(k_x, (n, d), dtype)
    eta = x @ theta_true
    if family == "poisson":
        y = jax.random.poisson(k_y, jnp.exp(eta)).astype(jnp.int32)
    else:
        p = jax.nn.sigmoid(eta) if family == "logistic" else jax.scipy.stats.norm.cdf(eta)
        y = jax.random.bernoulli(k_y, p).astype(jnp.int32)
    return {"x": x, "y": y}, theta_true
