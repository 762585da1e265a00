"""L1-regularised (Bayesian lasso) linear regression, the SGLD example of Korattikara et al. Section 4.2.4.

Gaussian error model ``p(y_i | x_i, theta) = sqrt(lam / (2 pi)) exp(-lam/2 (y_i - theta . x_i)^2)`` and
Laplace prior ``p0(theta) = prod_j (lam0 / 2) exp(-lam0 |theta_j|)``. The paper's toy version is
one-dimensional, ``N = 10,000``, ``y_i = 0.5 x_i + xi_i`` with ``xi_i ~ N(0, 1/3)``, ``lam = 3`` and
``lam0 = 4950``. The paper does not say how ``x_i`` is drawn; we take ``x_i ~ U(0, 1)``: with
``E x^2 = 1/3`` the data term ``lam sum_i x_i y_i ~ 5,000`` barely beats ``lam0 = 4950``, so the
posterior mode sits just right of the kink at 0 and the log density drops steeply (slope about
``lam sum x y + lam0 ~ 10^4``) to its left: the "valley" where SGLD's gradient is huge.

In one dimension the (tempered) posterior depends on the data only through
``S_xx = sum x_i^2``, ``S_xy = sum x_i y_i``; :func:`posterior_density` normalises it by quadrature.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import integrate, optimize

from minibatch_mcmc.checks import check_int, check_positive, check_real
from minibatch_mcmc.models.base import GLMSpec, Model
from minibatch_mcmc.models.shapes import REGRESSION_DATA, Dims, shape_check


class L1RegressionSettings(NamedTuple):
    """Noise precision ``lam`` of the Gaussian error model and rate ``lam0`` of the Laplace prior."""

    lam: float = 3.0
    lam0: float = 4950.0


class L1DataSettings(NamedTuple):
    """The synthetic data of Section 4.2.4: ``y = slope x + xi``, ``xi ~ N(0, noise_var)``, ``x ~ U(x_low, x_high)``."""

    n_data: int = 10_000
    slope: float = 0.5
    noise_var: float = 1.0 / 3.0
    x_low: float = 0.0
    x_high: float = 1.0


def l1_regression(settings: L1RegressionSettings = L1RegressionSettings()) -> Model:
    """The model over ``theta`` of shape ``(d,)`` and data ``{"x": (N, d), "y": (N,)}``."""
    lam = check_positive(settings.lam, "lam", why="the noise precision")
    lam0 = check_positive(settings.lam0, "lam0", why="the rate of the Laplace prior")

    def log_prior(theta: jax.Array) -> jax.Array:
        return jnp.sum(jnp.log(lam0 / 2.0) - lam0 * jnp.abs(theta))

    def log_lik(theta: jax.Array, batch: dict) -> jax.Array:
        r = batch["y"] - batch["x"] @ theta
        return 0.5 * jnp.log(lam / (2.0 * jnp.pi)) - 0.5 * lam * r * r

    return Model(
        log_prior=log_prior,
        log_lik=log_lik,
        name="l1_regression",
        check_shapes=shape_check("l1_regression", Dims("d"), REGRESSION_DATA),
        glm=GLMSpec("gaussian", precision=float(lam)),
    )


def make_l1_data(key: jax.Array, settings: L1DataSettings = L1DataSettings(), dtype=jnp.float32) -> dict:
    """One-dimensional data ``{"x": (N, 1), "y": (N,)}`` with ``y_i = slope x_i + xi_i``."""
    n = check_int(settings.n_data, "n_data", low=1)
    check_positive(settings.noise_var, "noise_var")
    x_low = check_real(settings.x_low, "x_low")
    check_real(settings.x_high, "x_high", x_low, low_open=True, why="the upper end of the range of x")
    k_x, k_xi = jax.random.split(key)
    x = jax.random.uniform(k_x, (int(n), 1), dtype, minval=settings.x_low, maxval=settings.x_high)
    xi = jax.random.normal(k_xi, (int(n),), dtype) * jnp.sqrt(jnp.asarray(settings.noise_var, dtype))
    return {"x": x, "y": settings.slope * x[:, 0] + xi}


class L1Posterior(NamedTuple):
    """The exact one-dimensional (tempered) posterior ``p0(theta) prod_i p(y_i|x_i,theta)^(1/K)`` normalised by quadrature."""

    s_xx: float
    s_xy: float
    lam: float
    lam0: float
    temperature: float
    log_norm: float
    """``log`` of the integral of ``exp(log_unnormalised(theta) - log_unnormalised(mode))``."""
    mode: float
    lower: float = -np.inf
    """Left end of the window where the density is within ``WINDOW_NATS`` of its maximum (quadrature range)."""
    upper: float = np.inf
    """Right end of that window."""

    def log_unnormalised(self, theta: np.ndarray) -> np.ndarray:
        """``-lam/(2K) (S_xx theta^2 - 2 S_xy theta) - lam0 |theta|`` (terms free of theta dropped)."""
        t = np.asarray(theta, np.float64)
        a = self.lam / self.temperature
        return -0.5 * a * (self.s_xx * t * t - 2.0 * self.s_xy * t) - self.lam0 * np.abs(t)

    def log_density(self, theta: np.ndarray) -> np.ndarray:
        """Normalised log posterior density."""
        return self.log_unnormalised(theta) - self.log_unnormalised(self.mode) - self.log_norm

    def density(self, theta: np.ndarray) -> np.ndarray:
        """Normalised posterior density."""
        return np.exp(self.log_density(theta))

    def grad_log_density(self, theta: np.ndarray) -> np.ndarray:
        """``d/dtheta`` of the log posterior (``sign(0) = 0`` at the kink)."""
        t = np.asarray(theta, np.float64)
        return self.lam / self.temperature * (self.s_xy - self.s_xx * t) - self.lam0 * np.sign(t)

    def interval_mass(self, lo: float, hi: float) -> float:
        """Posterior probability of ``[lo, hi]`` by adaptive quadrature."""
        if hi <= lo:
            return 0.0
        pts = [p for p in (0.0, self.mode) if lo < p < hi]
        val, _ = integrate.quad(self.density, lo, hi, points=pts or None, limit=200, epsabs=1e-13, epsrel=1e-10)
        return float(val)

    def bin_masses(self, edges: np.ndarray) -> np.ndarray:
        """Posterior probability of each bin ``[edges[j], edges[j+1]]``."""
        e = np.asarray(edges, np.float64)
        return np.array([self.interval_mass(lo, hi) for lo, hi in zip(e[:-1], e[1:])])

    def moments(self) -> tuple[float, float]:
        """Posterior mean and variance by quadrature."""
        lo, hi = self.lower, self.upper
        pts = [p for p in (0.0, self.mode) if lo < p < hi]
        opts = dict(points=pts or None, limit=200, epsabs=0.0, epsrel=1e-11)
        m1 = integrate.quad(lambda t: t * self.density(t), lo, hi, **opts)[0]
        m2 = integrate.quad(lambda t: (t - m1) ** 2 * self.density(t), lo, hi, **opts)[0]
        return float(m1), float(m2)

    def scale(self) -> float:
        """Scale of the likelihood term, ``sqrt(K / (lam S_xx))``."""
        return float(np.sqrt(self.temperature / (self.lam * self.s_xx)))

    def cdf(self, theta: np.ndarray) -> np.ndarray:
        """Posterior CDF by quadrature from far in the left tail."""
        t = np.atleast_1d(np.asarray(theta, np.float64))
        lo = min(float(t.min()), self.lower)
        return np.array([self.interval_mass(lo, float(v)) for v in t]).reshape(np.shape(theta))


def exact_posterior_l1(
    data: dict, temperature: float = 1.0, settings: L1RegressionSettings = L1RegressionSettings()
) -> L1Posterior:
    """The exact 1-D posterior for ``data`` (``x`` of shape ``(N, 1)`` or ``(N,)``), normalised by quadrature."""
    lam = check_positive(settings.lam, "lam", why="the noise precision")
    lam0 = check_positive(settings.lam0, "lam0", why="the rate of the Laplace prior")
    temperature = check_positive(temperature, "temperature")
    x = np.asarray(data["x"], np.float64)
    if x.ndim == 2 and x.shape[1] != 1:
        raise ValueError(f"the quadrature posterior is one-dimensional; x has shape {x.shape} (need (N,) or (N, 1))")
    x = x.reshape(-1)
    y = np.asarray(data["y"], np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
    s_xx, s_xy = float(x @ x), float(x @ y)
    if s_xx <= 0:
        raise ValueError("sum of x_i^2 is 0: the likelihood does not identify theta")
    a = lam / temperature
    # the log density is concave and piecewise quadratic: its mode is the soft-thresholded least-squares fit
    mode = float(np.sign(s_xy) * max(abs(a * s_xy) - lam0, 0.0) / (a * s_xx))
    post = L1Posterior(s_xx, s_xy, lam, lam0, float(temperature), 0.0, mode)
    lo, hi = density_window(post)
    pts = [p for p in (0.0, mode) if lo < p < hi]
    z, _ = integrate.quad(
        lambda t: np.exp(post.log_unnormalised(t) - post.log_unnormalised(mode)),
        lo,
        hi,
        points=pts or None,
        limit=200,
        epsabs=0.0,
        epsrel=1e-12,
    )
    return post._replace(log_norm=float(np.log(z)), lower=lo, upper=hi)


WINDOW_NATS = 40.0
"""Quadrature runs where the log density is within this many nats of its maximum (the rest has mass < 1e-17)."""


def density_window(post: L1Posterior, nats: float = WINDOW_NATS) -> tuple[float, float]:
    """Points left and right of the mode where the log density has dropped by ``nats`` (root finding)."""
    check_real(nats, "nats", 0.0, 1000.0, low_open=True, high_open=True)
    sd = post.scale()
    f = lambda t: post.log_unnormalised(t) - post.log_unnormalised(post.mode) + nats
    # the quadratic term alone drops by 5000 nats at 100 sd, so both brackets change sign
    return optimize.brentq(f, post.mode - 100 * sd, post.mode, xtol=1e-15), optimize.brentq(
        f, post.mode, post.mode + 100 * sd, xtol=1e-15
    )
