"""Taylor-proxy control variates for generalised linear models, with per-datum bounds on the residuals.

For logistic regression ``l_i(theta) = y_i eta_i - s(eta_i)``, ``eta_i = x_i . theta``, ``s = softplus``,
the Taylor proxy of order ``k`` around ``c`` leaves, per datum, the remainder

    R_i(theta) = -[s(eta_c + delta) - sum_{j <= k} s^(j)(eta_c) delta^j / j!],   delta = x_i . (theta - c),

(the label enters only linearly, so it drops out). The residual a test sees is
``r_i = R_i(theta') - R_i(theta)``. It is computed here from ``delta`` directly (a series in ``delta``
for small ``|delta|``, ``log1p`` otherwise), never as ``l_i(theta') - l_i(theta) - q_i``: at large ``N``
that difference of O(1e-3) numbers is O(1e-11) and float32 would return rounding noise.

Bounds. Along the segment ``phi_t = theta + t (theta' - theta)``, with a whitening matrix ``W`` (``x . v =
(W' x) . (W^-1 v)``), ``a = W^-1 (theta - c)``, ``b = W^-1 (theta' - c)`` and ``w = W^-1 (theta' - theta)``:

    order 1: |r_i| <= M2 |W' x_i|^2 |w| (|a| + |b|) / 2,                     M2 = sup s'' = 1/4,
    order 2: |r_i| <= M3 / 2 |W' x_i|^3 |w| (|a|^2 + a.b + |b|^2) / 3,        M3 = sup |s'''| = 1 / (6 sqrt 3),

both symmetric in ``(theta, theta')``. ``W`` is the Laplace covariance's Cholesky factor when the warm-up has one:
then ``|W' x_i|`` is the posterior s.d. of ``eta_i`` and ``|a|, |b|, |w|`` are O(1), which keeps the bounds small.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import ResidualBounds
from minibatch_mcmc.acceptance.correction_lp import alias_table
from minibatch_mcmc.control_variates.taylor import TaylorProxy, taylor_proxy
from minibatch_mcmc.data.arrays import as_data_source, take
from minibatch_mcmc.data.passes import full_data_max_abs, full_data_sum
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.logistic import logistic_regression

PyTree = Any

SOFTPLUS_SUP = {2: 0.25, 3: 1.0 / (6.0 * math.sqrt(3.0))}
"""``sup |s^(j)|`` of the softplus's second and third derivatives."""
ALIAS_CHUNK = 65536
"""Rows per read when the alias table's weights are computed."""
SERIES_LIMIT = 0.1
"""Below this ``|delta|`` the remainder is summed as its series (through ``delta^6``), else from ``log1p``."""


def softplus_derivatives(eta: jax.Array) -> tuple[jax.Array, ...]:
    """``s^(j)(eta)`` for ``j = 1..6`` from ``p = sigmoid(eta)``."""
    p = jax.nn.sigmoid(eta)
    pq = p * (1.0 - p)
    d3 = pq * (1.0 - 2.0 * p)
    d4 = pq * (1.0 - 6.0 * pq)
    d5 = d3 * (1.0 - 12.0 * pq)
    d6 = pq * (1.0 - 30.0 * pq + 120.0 * pq * pq)
    return p, pq, d3, d4, d5, d6


def softplus_remainder(eta_c: jax.Array, delta: jax.Array, order: int) -> jax.Array:
    """``s(eta_c + delta) - sum_{j <= order} s^(j)(eta_c) delta^j / j!``, accurate to rounding relative to itself."""
    der = softplus_derivatives(eta_c)
    series = jnp.zeros_like(delta)
    for j in range(6, order, -1):  # Horner-free: terms are tiny and all of one sign pattern
        series = series + der[j - 1] * delta**j / math.factorial(j)
    # s(eta_c + delta) - s(eta_c) = log1p(p (e^delta - 1)), accurate for any delta
    small = jnp.abs(delta) < SERIES_LIMIT
    safe = jnp.where(small, SERIES_LIMIT, delta)
    direct = jnp.log1p(der[0] * jnp.expm1(safe)) - der[0] * safe
    if order == 2:
        direct = direct - 0.5 * der[1] * safe * safe
    return jnp.where(small, series, direct)


class GLMProxy(NamedTuple):
    """A Taylor proxy of a logistic regression with residuals computed in ``delta eta`` and per-datum bounds."""

    proxy: TaylorProxy
    """The Taylor proxy (centre, order, full-data gradient and Hessian sums)."""
    whiten: jax.Array
    """``W`` (d x d, lower triangular): norms are ``|W' x_i|`` and ``|W^-1 v|``."""
    norm_sum: float
    """``sum_i |W' x_i|^(order + 1)``."""
    norm_max: float
    """``max_i |W' x_i|``."""
    alias: tuple[jax.Array, jax.Array] | None = None
    """Alias table (keep-probability, alias row) over rows with weights ``|W' x_i|^(order + 1)``; None: uniform rows."""
    name: str = "glm_logistic"

    def remainders(self, batch: PyTree, current: PyTree, candidate: PyTree) -> jax.Array:
        """``r_i = R_i(theta') - R_i(theta)`` for each row, from ``delta = x_i . (theta - c)``."""
        c = self.proxy.centre
        x = batch["x"]
        eta_c = x @ c
        rem0 = softplus_remainder(eta_c, x @ (current - c), self.proxy.order)
        rem1 = softplus_remainder(eta_c, x @ (candidate - c), self.proxy.order)
        return rem0 - rem1

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """Residuals ``l_i(theta') - l_i(theta) - q_i`` row by row, computed from the remainders."""
        del model
        return lambda batch: self.remainders(batch, current, candidate)

    def known_sum(self, current: PyTree, candidate: PyTree) -> jax.Array:
        """The proxy's exact difference ``sum_i q_i``."""
        return self.proxy.known_sum(current, candidate)

    def population(self, data: PyTree) -> PyTree:
        """Every row: the proxy leaves no row out."""
        return data

    def population_size(self, n_data: int) -> int:
        """``N``."""
        return n_data

    def bound_factor(self, current: PyTree, candidate: PyTree) -> jax.Array:
        """The data-free factor ``M(theta, theta')`` of the bound ``|r_i| <= |W' x_i|^(order + 1) M``."""
        solve = lambda v: jax.scipy.linalg.solve_triangular(self.whiten, v, lower=True)  # noqa: E731
        a, b = solve(current - self.proxy.centre), solve(candidate - self.proxy.centre)
        w = jnp.linalg.norm(b - a)
        if self.proxy.order == 1:
            return SOFTPLUS_SUP[2] * w * 0.5 * (jnp.linalg.norm(a) + jnp.linalg.norm(b))
        return 0.5 * SOFTPLUS_SUP[3] * w * (jnp.dot(a, a) + jnp.dot(a, b) + jnp.dot(b, b)) / 3.0

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> ResidualBounds:
        """``|W' x_i|^(order + 1) M(theta, theta')`` per row, their sum and their largest value."""
        del model
        m = self.bound_factor(current, candidate)
        k = self.proxy.order + 1

        def per_datum(batch: PyTree) -> jax.Array:
            return jnp.linalg.norm(batch["x"] @ self.whiten, axis=-1) ** k * m

        return ResidualBounds(per_datum=per_datum, total=self.norm_sum * m, largest=self.norm_max**k * m,
                              draw=None if self.alias is None else self.draw)

    def draw(self, key: jax.Array, count: int) -> jax.Array:
        """``count`` rows drawn with probability proportional to ``|W' x_i|^(order + 1)`` (the alias table; ``alias`` set)."""
        keep, other = self.alias
        k_cell, k_coin = jax.random.split(key)
        cell = jax.random.randint(k_cell, (count,), 0, keep.shape[0], jnp.int32)
        coin = jax.random.uniform(k_coin, (count,), keep.dtype)
        return jnp.where(coin < keep[cell], cell, other[cell])

    def log_lik_sum(self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int):
        """The Taylor proxy's (exact for ``batch_size=0``, else the control-variate estimate)."""
        return self.proxy.log_lik_sum(model, key, data, n_data, batch_size)


def logistic_proxy(
    data: Any, centre: jax.Array, order: int = 2, whiten: np.ndarray | None = None, alias: bool = True
) -> GLMProxy:
    """A logistic regression's Taylor proxy around ``centre`` with per-datum bounds (``whiten``: e.g. the Laplace
    Cholesky factor); ``alias=True`` keeps an alias table of the rows' bound weights (8 bytes a row) so an exact
    test draws rows in proportion to their bounds."""
    centre = jnp.asarray(centre)
    if centre.ndim != 1:
        raise ValueError(f"logistic_proxy needs a flat parameter vector; got shape {centre.shape}")
    d = centre.shape[0]
    w = np.eye(d) if whiten is None else np.asarray(whiten, np.float64)
    if w.shape != (d, d) or not np.allclose(w, np.tril(w)) or np.any(np.diag(w) <= 0):
        raise ValueError(f"whiten must be a ({d}, {d}) lower-triangular matrix with a positive diagonal (a Cholesky factor)")
    source = as_data_source(data)
    proxy = taylor_proxy(logistic_regression(), source, centre, order=order)
    wj = jnp.asarray(w, centre.dtype)
    arrays = source.arrays()

    def norms(rows: PyTree) -> jax.Array:
        return jnp.linalg.norm(rows["x"] @ wj, axis=-1)

    total, bad = full_data_sum(lambda rows: norms(rows) ** (order + 1), arrays, source.n)
    largest, bad_max = full_data_max_abs(norms, arrays, source.n)
    if bool(bad) or bool(bad_max):
        raise ValueError("the covariates have NaN or inf entries: the per-datum bounds are not finite")
    table = None
    if alias:
        weights = np.concatenate([
            np.asarray(norms(take(arrays, jnp.arange(s, min(s + ALIAS_CHUNK, source.n), dtype=jnp.int32))), np.float64)
            for s in range(0, source.n, ALIAS_CHUNK)
        ]) ** (order + 1)
        keep, other = alias_table(weights)
        table = (jnp.asarray(keep, jnp.float32), jnp.asarray(other, jnp.int32))
        total = float(weights.sum())  # the sum the table is normalised by
    return GLMProxy(proxy=proxy, whiten=wj, norm_sum=float(total), norm_max=float(largest), alias=table)
