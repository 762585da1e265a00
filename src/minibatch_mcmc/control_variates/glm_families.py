"""The families of the GLM proxies: each per-datum log-likelihood ``f(eta; y)``'s Taylor remainder in ``delta eta``
and the sup of its second and third derivatives, the constants of the per-datum bounds.

``remainder(eta_c, delta, y, order)`` is ``f(eta_c + delta) - sum_{j <= order} f^(j)(eta_c) delta^j / j!`` computed
without subtracting nearly equal numbers (``f`` itself is never formed for small ``delta``):

- logistic (``f = y eta - softplus(eta)``): minus the softplus remainder (series, or ``log1p``);
- Poisson, log link (``f = y eta - e^eta``): ``-e^eta_c (e^delta - sum_{j <= order} delta^j / j!)`` (series, or
  ``expm1``);
- Gaussian, identity link (``f = -p (y - eta)^2 / 2``): ``-p delta^2 / 2`` at order 1, exactly 0 at order 2;
- Student-t, identity link (``f = -(nu + 1)/2 log(1 + e^2 / (nu sigma^2))``, ``e = y - eta``; ``nu``, ``sigma``
  fixed): the integral form by Gauss-Legendre for ``|delta| < sigma sqrt(nu)``, the direct difference beyond;
- probit (``f = log Phi(s eta)``, ``s = 2 y - 1``): the integral form of the remainder,
  ``delta^(k+1) / k! int_0^1 f^(k+1)(eta_c + u delta) (1 - u)^k du``, by 8-node Gauss-Legendre for ``|delta| < 1``
  (no cancellation: a weighted sum of derivative values), ``f(eta_c + delta)`` minus the polynomial beyond.

``SUPS[family] = (sup |f''|, sup |f'''|)``. Logistic: ``1/4`` and ``1 / (6 sqrt 3)``. Probit: ``f'' = -lam (z + lam)``
with the inverse Mills ratio ``lam = phi(z) / Phi(z)`` lies in ``(-1, 0)``, its sup ``1`` approached as ``z -> -inf``;
``|f'''|`` peaks at ``z = 1.00237`` with ``0.29571882`` (maximised numerically in float64 over ``[-40, 40]``, where
``|f'''|`` falls like ``2 / |z|^3`` outside; the constant is rounded up). Gaussian: ``p`` and ``0``. Poisson's
derivatives are all ``-e^eta``, unbounded: its constants are ``1`` and the bound carries ``e^eta`` separately
(``EXPONENTIAL``). Student-t: with ``D = nu sigma^2 + e^2``, ``f'' = (nu + 1)(e^2 - nu sigma^2) / D^2``, largest in size
at ``e = 0``: ``(nu + 1) / (nu sigma^2)`` (its other extremum, at ``e^2 = 3 nu sigma^2``, is ``(nu + 1) / (8 nu sigma^2)``);
``f''' = 2 (nu + 1) e (e^2 - 3 nu sigma^2) / D^3``, in ``t = e / (sigma sqrt nu)``
``2 (nu + 1) t (t^2 - 3) / (nu^(3/2) sigma^3 (1 + t^2)^3)``, whose size peaks where ``t^4 - 6 t^2 + 1 = 0``, at
``t = sqrt 2 - 1``, with ``|t (3 - t^2)| / (1 + t^2)^3 = (3 + 2 sqrt 2) / 8``: ``sup |f'''| = (nu + 1)(3 + 2 sqrt 2) /
(4 nu^(3/2) sigma^3)`` (``tests/control_variates/test_student_t.py`` checks both on a float64 grid). Both hold for
``nu`` and ``sigma`` fixed. With them sampled, a bound must also take the sup over the segment's ``(nu, sigma)``
(the derivatives in ``eta`` grow as ``sigma`` falls, and ``theta`` then moves ``sigma``): the GLM proxies do not do
that, so ``student_t_regression`` fixes both, and a model that samples them declares no GLM family and the exact tests
refuse it, naming what to supply.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

SOFTPLUS_SUP = {2: 0.25, 3: 1.0 / (6.0 * math.sqrt(3.0))}
"""``sup |s^(j)|`` of the softplus's second and third derivatives."""
PROBIT_SUP3 = 0.29571882
"""``sup_z |d^3/dz^3 log Phi(z)|`` (at ``z = 1.00237``: 0.295718819193), rounded up."""
SUPS = {"logistic": (SOFTPLUS_SUP[2], SOFTPLUS_SUP[3]), "probit": (1.0, PROBIT_SUP3), "poisson": (1.0, 1.0)}
"""``(sup |f''|, sup |f'''|)`` per family (Gaussian: ``(precision, 0)``; Poisson: times ``e^eta`` on the segment)."""
EXPONENTIAL = ("poisson",)
"""Families whose derivative bound grows like ``e^eta``."""
FAMILIES = ("logistic", "probit", "poisson", "gaussian", "student_t")
STUDENT_T_PEAK = (3.0 + 2.0 * math.sqrt(2.0)) / 8.0
"""``sup_t |t (3 - t^2)| / (1 + t^2)^3``, at ``t = sqrt 2 - 1`` (module docstring)."""
SERIES_LIMIT = 0.1
"""Below this ``|delta|`` the logistic and Poisson remainders are summed as their series, else in closed form."""
FAR_LIMIT = 30.0
"""Beyond this ``|delta|`` the softplus remainder is the difference of softplus values (``expm1`` overflows in float32 past 88)."""
QUADRATURE_LIMIT = 1.0
"""Below this ``|delta|`` the probit remainder is its integral form by Gauss-Legendre, else the direct difference."""
NODES, WEIGHTS = (np.asarray(v) for v in np.polynomial.legendre.leggauss(8))


def softplus_derivatives(eta: jax.Array) -> tuple[jax.Array, ...]:
    """``s^(j)(eta)`` for ``j = 1..6`` from ``p = sigmoid(eta)``."""
    p = jax.nn.sigmoid(eta)
    pq = p * (1.0 - p)
    d3 = pq * (1.0 - 2.0 * p)
    d4 = pq * (1.0 - 6.0 * pq)
    d5 = d3 * (1.0 - 12.0 * pq)
    d6 = pq * (1.0 - 30.0 * pq + 120.0 * pq * pq)
    return p, pq, d3, d4, d5, d6


def softplus_series(der: tuple[jax.Array, ...], delta: jax.Array, order: int) -> jax.Array:
    """The softplus remainder's series through ``delta^6`` (``der``: ``softplus_derivatives``), for ``|delta| < SERIES_LIMIT``."""
    series = jnp.zeros_like(delta)
    for j in range(6, order, -1):  # Horner-free: terms are tiny and all of one sign pattern
        series = series + der[j - 1] * delta**j / math.factorial(j)
    return series


def softplus_remainder(eta_c: jax.Array, delta: jax.Array, order: int) -> jax.Array:
    """``s(eta_c + delta) - sum_{j <= order} s^(j)(eta_c) delta^j / j!``, accurate to rounding relative to itself."""
    der = softplus_derivatives(eta_c)
    series = softplus_series(der, delta, order)
    # s(eta_c + delta) - s(eta_c) = log1p(p (e^delta - 1)), accurate for any delta
    small = jnp.abs(delta) < SERIES_LIMIT
    safe = jnp.where(small, SERIES_LIMIT, delta)
    far = jnp.abs(safe) > FAR_LIMIT  # expm1 would overflow: the softplus difference, no cancellation this far out
    near = jnp.where(far, SERIES_LIMIT, safe)
    direct = (
        jnp.where(far, jax.nn.softplus(eta_c + safe) - jax.nn.softplus(eta_c), jnp.log1p(der[0] * jnp.expm1(near)))
        - der[0] * safe
    )
    if order == 2:
        direct = direct - 0.5 * der[1] * safe * safe
    return jnp.where(small, series, direct)


def exp_series(delta: jax.Array, order: int) -> jax.Array:
    """``sum_{order < j <= order + 7} delta^j / j!``: ``exp_remainder`` for ``|delta| < SERIES_LIMIT``."""
    series = jnp.zeros_like(delta)
    for j in range(order + 7, order, -1):
        series = series + delta**j / math.factorial(j)
    return series


def exp_remainder(delta: jax.Array, order: int) -> jax.Array:
    """``e^delta - sum_{j <= order} delta^j / j!`` (series through ``delta^(order + 7)`` for small ``|delta|``)."""
    series = exp_series(delta, order)
    small = jnp.abs(delta) < SERIES_LIMIT
    safe = jnp.where(small, SERIES_LIMIT, delta)
    direct = jnp.expm1(safe) - safe
    if order == 2:
        direct = direct - 0.5 * safe * safe
    return jnp.where(small, series, direct)


def log_ndtr_derivatives(z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """First three derivatives of ``log Phi(z)``: ``lam``, ``-lam (z + lam)``, ``lam ((z + 2 lam)(z + lam) - 1)``."""
    lam = jnp.exp(-0.5 * z * z - 0.5 * math.log(2.0 * math.pi) - log_ndtr(z))
    return lam, -lam * (z + lam), lam * ((z + 2.0 * lam) * (z + lam) - 1.0)


def probit_remainder(eta_c: jax.Array, delta: jax.Array, s: jax.Array, order: int) -> jax.Array:
    """``log Phi(s (eta_c + delta))`` minus its Taylor polynomial of ``order`` at ``eta_c`` (``s = +-1``)."""
    small = jnp.abs(delta) < QUADRATURE_LIMIT
    d = jnp.where(small, delta, 0.0)
    u = jnp.asarray(0.5 * (NODES + 1.0), delta.dtype)
    w = jnp.asarray(0.5 * WEIGHTS * (1.0 - 0.5 * (NODES + 1.0)) ** order, delta.dtype)
    z = s[..., None] * (eta_c[..., None] + u * d[..., None])
    top = log_ndtr_derivatives(z)[order]  # f^(order+1)(z) of log Phi, times s^(order+1) below
    integral = jnp.sum(w * top, axis=-1) * s ** (order + 1)
    quad = integral * d ** (order + 1) / math.factorial(order)
    big = jnp.where(small, 1.0, delta)
    der = log_ndtr_derivatives(s * eta_c)
    direct = log_ndtr(s * (eta_c + big)) - log_ndtr(s * eta_c) - s * der[0] * big
    if order == 2:
        direct = direct - 0.5 * der[1] * big * big
    return jnp.where(small, quad, direct)


def student_t_log_density(e: jax.Array, nu: float, precision: float) -> jax.Array:
    """``-(nu + 1)/2 log(1 + e^2 precision / nu)``: the Student-t log density of the residual ``e``, less its constant."""
    return -0.5 * (nu + 1.0) * jnp.log1p(e * e * (precision / nu))


def student_t_derivatives(e: jax.Array, nu: float, precision: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The first three derivatives in ``eta`` of ``student_t_log_density(y - eta)`` at the residual ``e = y - eta``."""
    d = nu / precision + e * e
    return (
        (nu + 1.0) * e / d,
        (nu + 1.0) * (e * e - nu / precision) / (d * d),
        2.0 * (nu + 1.0) * e * (e * e - 3.0 * nu / precision) / (d * d * d),
    )


def student_t_remainder(
    eta_c: jax.Array, delta: jax.Array, y: jax.Array, order: int, nu: float, precision: float
) -> jax.Array:
    """The Student-t family's ``f(eta_c + delta) - sum_{j <= order} f^(j)(eta_c) delta^j / j!`` (``precision = 1/sigma^2``)."""
    limit = QUADRATURE_LIMIT * math.sqrt(nu / precision)
    small = jnp.abs(delta) < limit
    d = jnp.where(small, delta, 0.0)
    e_c = y.astype(delta.dtype) - eta_c
    u = jnp.asarray(0.5 * (NODES + 1.0), delta.dtype)
    w = jnp.asarray(0.5 * WEIGHTS * (1.0 - 0.5 * (NODES + 1.0)) ** order, delta.dtype)
    top = student_t_derivatives(e_c[..., None] - u * d[..., None], nu, precision)[order]
    quad = jnp.sum(w * top, axis=-1) * d ** (order + 1) / math.factorial(order)
    big = jnp.where(small, limit, delta)
    der = student_t_derivatives(e_c, nu, precision)
    direct = student_t_log_density(e_c - big, nu, precision) - student_t_log_density(e_c, nu, precision) - der[0] * big
    if order == 2:
        direct = direct - 0.5 * der[1] * big * big
    return jnp.where(small, quad, direct)


def remainder_fn(
    family: str, precision: float = 1.0, nu: float = 1.0
) -> Callable[[jax.Array, jax.Array, jax.Array, int], jax.Array]:
    """``(eta_c, delta, y, order) -> f(eta_c + delta; y) - Taylor_order`` of ``family``'s log-likelihood (``nu``: the
    Student-t's degrees of freedom)."""
    if family == "student_t":
        return lambda eta_c, delta, y, order: student_t_remainder(eta_c, delta, y, order, nu, precision)
    if family == "logistic":
        return lambda eta_c, delta, y, order: -softplus_remainder(eta_c, delta, order)
    if family == "poisson":
        return lambda eta_c, delta, y, order: -jnp.exp(eta_c) * exp_remainder(delta, order)
    if family == "gaussian":
        return lambda eta_c, delta, y, order: -0.5 * precision * delta * delta if order == 1 else jnp.zeros_like(delta)
    if family == "probit":
        return lambda eta_c, delta, y, order: probit_remainder(eta_c, delta, 2.0 * y.astype(delta.dtype) - 1.0, order)
    raise ValueError(f"family={family!r}: the GLM proxies know {FAMILIES}")


def series_remainder(family: str) -> Callable[[jax.Array, jax.Array, jax.Array, int], jax.Array] | None:
    """``remainder_fn(family)`` for ``|delta| < SERIES_LIMIT`` alone, as its series (no transcendental per ``delta``):
    logistic and Poisson; None for the other families."""
    if family == "logistic":
        return lambda eta_c, delta, y, order: -softplus_series(softplus_derivatives(eta_c), delta, order)
    if family == "poisson":
        return lambda eta_c, delta, y, order: -jnp.exp(eta_c) * exp_series(delta, order)
    return None


def logistic_eta_derivatives(eta: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``f' = y - p`` and ``f'' = -p (1 - p)`` of ``f = y eta - softplus(eta)``, ``p = sigmoid(eta)``."""
    p = jax.nn.sigmoid(eta)
    return y - p, -p * (1.0 - p)


def probit_eta_derivatives(eta: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``f' = s lam(s eta)`` and ``f''`` of ``f = log Phi(s eta)``, ``s = 2 y - 1`` (``s^2 = 1``)."""
    s = 2.0 * y - 1.0
    d1, d2, _ = log_ndtr_derivatives(s * eta)
    return s * d1, d2


def poisson_eta_derivatives(eta: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``f' = y - e^eta`` and ``f'' = -e^eta`` of ``f = y eta - e^eta``."""
    mu = jnp.exp(eta)
    return y - mu, -mu


def eta_derivatives(
    family: str, precision: float = 1.0, nu: float = 1.0
) -> Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """``(eta, y) -> (f'(eta; y), f''(eta; y))`` of ``family``'s per-row log-likelihood, row by row (``precision``: the
    Gaussian's, or the Student-t's ``1 / sigma^2``; ``nu``: the Student-t's degrees of freedom; ``y`` in ``eta``'s dtype)."""
    if family == "logistic":
        return logistic_eta_derivatives
    if family == "probit":
        return probit_eta_derivatives
    if family == "poisson":
        return poisson_eta_derivatives
    if family == "gaussian":
        return lambda eta, y: (precision * (y - eta), jnp.full_like(eta, -precision))
    if family == "student_t":
        return lambda eta, y: student_t_derivatives(y - eta, nu, precision)[:2]
    raise ValueError(f"family={family!r}: the GLM proxies know {FAMILIES}")


def sups(family: str, precision: float = 1.0, nu: float = 1.0) -> tuple[float, float]:
    """``(sup |f''|, sup |f'''|)`` of ``family`` (Poisson: the factors in front of ``e^eta``; Student-t: ``nu`` and
    ``precision = 1 / sigma^2``)."""
    if family == "gaussian":
        return float(precision), 0.0
    if family == "student_t":
        return (nu + 1.0) * precision / nu, 2.0 * (nu + 1.0) * STUDENT_T_PEAK * (precision / nu) ** 1.5
    if family not in SUPS:
        raise ValueError(f"family={family!r}: the GLM proxies know {FAMILIES}")
    return SUPS[family]
