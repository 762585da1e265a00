"""Probit, Poisson (log link, optional log-exposure offset) and Student-t (robust) regressions: generalised linear models with data
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


def student_t_log_lik(theta: jax.Array, batch: dict, nu: float = 4.0, sigma: float = 1.0) -> jax.Array:
    """``log StudentT(y_i | nu, x_i . theta, sigma)``: a robust regression's per-row log-likelihood."""
    e = (batch["y"].astype(theta.dtype) - batch["x"] @ theta) / sigma
    const = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * jnp.log(nu * jnp.pi) - jnp.log(sigma)
    return const - 0.5 * (nu + 1.0) * jnp.log1p(e * e / nu)


def _prior(prior_scale: float | None):
    if prior_scale is not None:
        check_positive(prior_scale, "prior_scale", why="or None for the uniform prior")
    return flat_prior() if prior_scale is None else gaussian_prior(0.0, prior_scale)


def probit_regression(prior_scale: float | None = None) -> Model:
    """Probit regression; ``prior_scale=None``: uniform prior, else ``N(0, scale^2)`` on every coefficient."""
    return Model(
        log_prior=_prior(prior_scale),
        log_lik=probit_log_lik,
        name="probit_regression",
        check_shapes=shape_check("probit_regression", Dims("d"), REGRESSION_DATA),
        glm=GLMSpec("probit"),
    )


def poisson_regression(prior_scale: float | None = None, offset: bool = False) -> Model:
    """Poisson regression with log link; ``offset=True``: data carry ``"offset"`` (log exposure) added to ``x . theta``."""
    spec = dict(REGRESSION_DATA, offset=Dims("b")) if offset else REGRESSION_DATA
    return Model(
        log_prior=_prior(prior_scale),
        log_lik=poisson_log_lik,
        name="poisson_regression",
        check_shapes=shape_check("poisson_regression", Dims("d"), spec),
        glm=GLMSpec("poisson", offset=bool(offset)),
    )


def student_t_regression(nu: float = 4.0, sigma: float = 1.0, prior_scale: float | None = None) -> Model:
    """Robust regression ``y_i ~ StudentT(nu, x_i . theta, sigma)`` with ``nu`` and ``sigma`` fixed: a GLM (identity
    link), so the exact tests' per-row bounds exist (``control_variates.glm_families``); a model that samples ``nu`` or
    ``sigma`` is no GLM of this kind (its bounds would need the sup over them too)."""
    nu = check_positive(nu, "nu", why="the Student-t degrees of freedom")
    sigma = check_positive(sigma, "sigma", why="the Student-t scale")
    return Model(
        log_prior=_prior(prior_scale),
        log_lik=lambda theta, batch: student_t_log_lik(theta, batch, nu, sigma),
        name="student_t_regression",
        check_shapes=shape_check("student_t_regression", Dims("d"), REGRESSION_DATA),
        glm=GLMSpec("student_t", precision=sigma**-2, nu=nu),
    )


def make_glm_data(
    key: jax.Array, n: int, d: int, family: str, theta_true: jax.Array | None = None, dtype=jnp.float32
) -> tuple[dict, jax.Array]:
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
