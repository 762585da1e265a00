"""Cases with a known posterior for the coupled exact continuation (``diagnostics.posterior_error``), as small generators.

- ``linear_cauchy``: a Gaussian linear model (noise s.d. 1 known, prior N(0, 10^2)) on data whose noise is Cauchy:
  conjugate, so the posterior is the closed form, and a Taylor proxy of order 2 is exact (no test error to find).
- five Cauchy rows (``tests/control_variates/helpers_cauchy.py``): ``a``'s posterior by quadrature.
- ``student_t``: a robust Student-t regression (``nu`` and ``sigma`` estimated) on a right-skewed heavy-tailed response
  (a lognormal-exponential mixture, 1% of rows beyond 10 scale units); its truth is a long exact chain.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from minibatch_mcmc.models.base import Model, gaussian_prior

PRIOR_SCALE = 10.0


def linear_model() -> Model:
    """``y ~ N(X beta, 1)``, ``beta ~ N(0, 10^2 I)``."""

    def log_lik(theta, batch):
        r = batch["y"] - batch["X"] @ theta
        return -0.5 * r * r - 0.5 * jnp.log(2 * jnp.pi)

    return Model(gaussian_prior(0.0, PRIOR_SCALE), log_lik, "linear_known_noise")


def linear_data(n: int, seed: int = 0, cauchy: bool = True, d: int = 3) -> dict:
    """``n`` rows: an intercept and ``d - 1`` standard normal features, ``beta = (0.5, -1, 2, ...)``, Cauchy (or normal) noise."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    beta = np.resize(np.array([0.5, -1.0, 2.0]), d)
    noise = rng.standard_cauchy(n) if cauchy else rng.standard_normal(n)
    return {"X": x.astype(np.float32), "y": (x @ beta + noise).astype(np.float32)}


def linear_posterior(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form posterior mean and s.d. of ``beta`` (float64, from the float32 data the sampler reads)."""
    x, y = np.asarray(data["X"], np.float64), np.asarray(data["y"], np.float64)
    cov = np.linalg.inv(x.T @ x + np.eye(x.shape[1]) / PRIOR_SCALE**2)
    return cov @ (x.T @ y), np.sqrt(np.diag(cov))


def student_t_model(d: int = 3) -> Model:
    """``y ~ StudentT(nu, X beta, sigma)``; ``theta = (beta, log sigma, log nu)``; ``beta ~ N(0, 10^2)``,
    ``sigma ~ HalfNormal(50)``, ``nu ~ Gamma(2, 0.1)`` (densities of the logs, with their Jacobians)."""

    def log_prior(theta):
        beta, ls, ln = theta[:d], theta[d], theta[d + 1]
        s, nu = jnp.exp(ls), jnp.exp(ln)
        return -0.5 * jnp.sum((beta / PRIOR_SCALE) ** 2) - 0.5 * (s / 50.0) ** 2 + ls + 2.0 * ln - 0.1 * nu

    def log_lik(theta, batch):
        beta, ls, ln = theta[:d], theta[d], theta[d + 1]
        nu = jnp.exp(ln)
        z = (batch["y"] - batch["X"] @ beta) * jnp.exp(-ls)
        return (
            gammaln(0.5 * (nu + 1.0))
            - gammaln(0.5 * nu)
            - 0.5 * jnp.log(nu * jnp.pi)
            - ls
            - 0.5 * (nu + 1.0) * jnp.log1p(z * z / nu)
        )

    return Model(log_prior, log_lik, "student_t_regression")


def student_t_data(n: int, seed: int = 0, d: int = 3) -> dict:
    """``n`` rows, ``y = X beta + e``: ``e`` lognormal(0, 0.5) (70%), exponential with mean 2 (29%), or
    lognormal(3, 0.5) (1%: beyond 10 scale units), a long right tail."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    kind = rng.choice(3, size=n, p=[0.70, 0.29, 0.01])
    e = np.where(
        kind == 0, rng.lognormal(0.0, 0.5, n), np.where(kind == 1, rng.exponential(2.0, n), rng.lognormal(3.0, 0.5, n))
    )
    beta = np.resize(np.array([1.0, 0.5, -0.3]), d)
    return {"X": x.astype(np.float32), "y": (x @ beta + e).astype(np.float32)}
