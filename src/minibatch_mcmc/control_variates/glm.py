"""Taylor-proxy control variates for generalised linear models, with per-datum bounds on the residuals.

A GLM's per-datum log-likelihood is ``l_i(theta) = f(eta_i; y_i)``, ``eta_i = x_i . theta (+ offset_i)``, for a
family ``f`` (``glm_families``: logistic, probit, Poisson with log link, Gaussian, Student-t with ``nu`` and ``sigma`` fixed). The Taylor proxy of order ``k``
around ``c`` leaves, per datum, the remainder

    R_i(theta) = f(eta_c + delta) - sum_{j <= k} f^(j)(eta_c) delta^j / j!,   delta = x_i . (theta - c),

and the residual a test sees is ``r_i = R_i(theta') - R_i(theta)``. It is computed here from ``delta`` directly
(``glm_families.remainder_fn``), never as ``l_i(theta') - l_i(theta) - q_i``: at large ``N`` that difference of
O(1e-3) numbers is O(1e-11) and float32 would return rounding noise.

Bounds. Along the segment ``phi_t = theta + t (theta' - theta)``, ``dR_i/dt`` is the order-``(k-1)`` remainder of
``f'`` times ``x_i . (theta' - theta)``, so with ``M_j`` a bound on ``|f^(j)|`` between ``eta_c`` and ``eta_i(phi_t)``,
a whitening matrix ``W`` (``x . v = (W' x) . (W^-1 v)``), ``a = W^-1 (theta - c)``, ``b = W^-1 (theta' - c)`` and
``w = W^-1 (theta' - theta)``:

    order 1: |r_i| <= M2 |W' x_i|^2 |w| (|a| + |b|) / 2,
    order 2: |r_i| <= M3 / 2 |W' x_i|^3 |w| (|a|^2 + a.b + |b|^2) / 3,

both symmetric in ``(theta, theta')``. ``M_j`` is the family's sup (``glm_families.sups``), except for Poisson,
whose derivatives are ``-e^eta``: between ``eta_c`` and the segment ``eta <= eta_c + |W' x_i| max(|a|, |b|)``, so
``M_j = e^(eta_c,i) e^(L max(|a|, |b|))`` with ``L = max_i |W' x_i|``: the row weight gains ``e^(eta_c,i)`` and the
data-free factor ``e^(L max(|a|, |b|))`` (a per-row maximum would make the total depend on the data).
``W`` is the Laplace covariance's Cholesky factor when the warm-up has one: then ``|W' x_i|`` is the posterior s.d.
of ``eta_i`` and ``|a|, |b|, |w|`` are O(1), which keeps the bounds small.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import ResidualBounds
from minibatch_mcmc.acceptance.correction_lp import alias_table
from minibatch_mcmc.control_variates.base import integrated_rows
from minibatch_mcmc.control_variates.glm_families import EXPONENTIAL, FAMILIES, remainder_fn, sups
from minibatch_mcmc.control_variates.taylor import TaylorProxy, taylor_proxy
from minibatch_mcmc.data.arrays import as_data_source, take
from minibatch_mcmc.models.base import GLMSpec, Model
from minibatch_mcmc.models.glm import poisson_regression, probit_regression, student_t_regression
from minibatch_mcmc.models.l1_regression import L1RegressionSettings, l1_regression
from minibatch_mcmc.models.logistic import logistic_regression

PyTree = Any

ALIAS_CHUNK = 65536
"""Rows per read when the rows' bound weights are computed."""


class GLMProxy(NamedTuple):
    """A Taylor proxy of a GLM with residuals computed in ``delta eta`` and per-datum bounds."""

    proxy: TaylorProxy
    """The Taylor proxy (centre, order, full-data gradient and Hessian sums)."""
    whiten: jax.Array
    """``W`` (d x d, lower triangular): norms are ``|W' x_i|`` and ``|W^-1 v|``."""
    norm_sum: float
    """``sum_i`` of the row weights ``|W' x_i|^(order + 1)`` (Poisson: times ``e^(eta_c,i)``)."""
    norm_max: float
    """``L = max_i |W' x_i|``."""
    alias: tuple[jax.Array, jax.Array] | None = None
    """Alias table (keep-probability, alias row) over rows with the row weights; None: uniform rows."""
    name: str = "glm_logistic"
    family: str = "logistic"
    """One of ``glm_families.FAMILIES``."""
    precision: float = 1.0
    """The Gaussian family's noise precision (the Student-t's ``1 / sigma^2``)."""
    nu: float = 1.0
    """The Student-t family's degrees of freedom."""
    weight_max: float | None = None
    """The largest row weight (None: ``norm_max^(order + 1)``)."""
    subtracts_rows = staticmethod(integrated_rows)  # ``remainders`` from ``delta``: accurate relative to themselves

    def eta_centre(self, batch: PyTree) -> jax.Array:
        """``x_i . c`` plus the batch's offset, if the family is Poisson and the batch has one."""
        eta = batch["x"] @ self.proxy.centre
        if self.family == "poisson" and "offset" in batch:
            eta = eta + batch["offset"].astype(eta.dtype)
        return eta

    def remainders(self, batch: PyTree, current: PyTree, candidate: PyTree) -> jax.Array:
        """``r_i = R_i(theta') - R_i(theta)`` for each row, from ``delta = x_i . (theta - c)``."""
        c, x, order = self.proxy.centre, batch["x"], self.proxy.order
        eta_c = self.eta_centre(batch)
        remainder = remainder_fn(self.family, self.precision, self.nu)
        rem0 = remainder(eta_c, x @ (current - c), batch["y"], order)
        rem1 = remainder(eta_c, x @ (candidate - c), batch["y"], order)
        return rem1 - rem0

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
        """The data-free factor ``M(theta, theta')`` of the bound ``|r_i| <= weight_i M``."""
        solve = lambda v: jax.scipy.linalg.solve_triangular(self.whiten, v, lower=True)  # noqa: E731
        a, b = solve(current - self.proxy.centre), solve(candidate - self.proxy.centre)
        w = jnp.linalg.norm(b - a)
        sup2, sup3 = sups(self.family, self.precision, self.nu)
        if self.proxy.order == 1:
            m = sup2 * w * 0.5 * (jnp.linalg.norm(a) + jnp.linalg.norm(b))
        else:
            m = 0.5 * sup3 * w * (jnp.dot(a, a) + jnp.dot(a, b) + jnp.dot(b, b)) / 3.0
        if self.family in EXPONENTIAL:
            m = m * jnp.exp(self.norm_max * jnp.maximum(jnp.linalg.norm(a), jnp.linalg.norm(b)))
        return m

    def row_weights(self, batch: PyTree) -> jax.Array:
        """``|W' x_i|^(order + 1)``, times ``e^(eta_c,i)`` for Poisson."""
        weights = jnp.linalg.norm(batch["x"] @ self.whiten, axis=-1) ** (self.proxy.order + 1)
        return weights * jnp.exp(self.eta_centre(batch)) if self.family in EXPONENTIAL else weights

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> ResidualBounds:
        """``weight_i M(theta, theta')`` per row, their sum and their largest value."""
        del model
        m = self.bound_factor(current, candidate)
        largest = self.norm_max ** (self.proxy.order + 1) if self.weight_max is None else self.weight_max
        return ResidualBounds(
            per_datum=lambda batch: self.row_weights(batch) * m,
            total=self.norm_sum * m,
            largest=largest * m,
            draw=self.row_draw(),
        )

    def row_draw(self) -> Callable[[jax.Array, int], jax.Array] | None:
        """``draw`` with an alias table (the row weights do not depend on ``(theta, theta')``), else None: uniform rows."""
        return None if self.alias is None else self.draw

    def draw(self, key: jax.Array, count: int) -> jax.Array:
        """``count`` rows drawn with probability proportional to their weights (the alias table; ``alias`` set)."""
        keep, other = self.alias
        k_cell, k_coin = jax.random.split(key)
        cell = jax.random.randint(k_cell, (count,), 0, keep.shape[0], jnp.int32)
        coin = jax.random.uniform(k_coin, (count,), keep.dtype)
        return jnp.where(coin < keep[cell], cell, other[cell])

    def log_lik_sum(self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int):
        """The Taylor proxy's (exact for ``batch_size=0``, else the control-variate estimate)."""
        return self.proxy.log_lik_sum(model, key, data, n_data, batch_size)


def family_model(spec: GLMSpec) -> Model:
    """A model with ``spec``'s log-likelihood (the prior does not enter the proxy's sums)."""
    if spec.family == "logistic":
        return logistic_regression()
    if spec.family == "probit":
        return probit_regression()
    if spec.family == "poisson":
        return poisson_regression(offset=spec.offset)
    if spec.family == "gaussian":
        return l1_regression(L1RegressionSettings(lam=spec.precision))
    if spec.family == "student_t":
        return student_t_regression(nu=spec.nu, sigma=spec.precision**-0.5)
    raise ValueError(f"family={spec.family!r}: the GLM proxies know {FAMILIES}")


def glm_proxy(
    data: Any,
    centre: jax.Array,
    family: str = "logistic",
    order: int = 2,
    whiten: np.ndarray | None = None,
    alias: bool = True,
    precision: float = 1.0,
    proxy: TaylorProxy | None = None,
    nu: float = 1.0,
) -> GLMProxy:
    """A GLM's Taylor proxy around ``centre`` with per-datum bounds, for ``family`` in ``glm_families.FAMILIES``.

    Args:
        data: ``{"x": (N, d), "y": (N,)}`` (and a Poisson ``"offset"`` column, used when present), or any source of them.
        centre: the expansion point (a flat vector), usually the mode.
        family: one of ``glm_families.FAMILIES``.
        order: the proxy's order, 1 or 2.
        whiten: ``W``, e.g. the Laplace covariance's Cholesky factor (None: the identity).
        alias: keep an alias table of the rows' bound weights (8 bytes a row), so an exact test draws rows in
            proportion to their bounds.
        precision: the Gaussian noise precision, or the Student-t's ``1 / sigma^2``.
        proxy: the Taylor proxy of the same likelihood at ``centre`` and ``order`` if one is built already (its
            full-data pass is then not repeated).
        nu: the Student-t family's degrees of freedom.
    """
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}: allowed are {FAMILIES}")
    centre = jnp.asarray(centre)
    if centre.ndim != 1:
        raise ValueError(f"glm_proxy needs a flat parameter vector; got shape {centre.shape}")
    d = centre.shape[0]
    w = np.eye(d) if whiten is None else np.asarray(whiten, np.float64)
    if w.shape != (d, d) or not np.allclose(w, np.tril(w)) or np.any(np.diag(w) <= 0):
        raise ValueError(
            f"whiten must be a ({d}, {d}) lower-triangular matrix with a positive diagonal (a Cholesky factor)"
        )
    source = as_data_source(data)
    arrays = source.arrays()
    spec = GLMSpec(family, float(precision), offset=family == "poisson" and "offset" in arrays, nu=float(nu))
    if proxy is None:
        proxy = taylor_proxy(family_model(spec), source, centre, order=order)
    elif proxy.order != order or not np.array_equal(np.asarray(proxy.centre), np.asarray(centre)):
        raise ValueError(
            f"proxy has order {proxy.order} and another centre; glm_proxy was asked for order {order} at {centre}"
        )
    est = GLMProxy(
        proxy=proxy,
        whiten=jnp.asarray(w, centre.dtype),
        norm_sum=0.0,
        norm_max=0.0,
        name=f"glm_{family}",
        family=family,
        precision=float(precision),
        nu=float(nu),
    )
    norms, etas = [], []
    for s in range(0, source.n, ALIAS_CHUNK):  # one pass: norms (and the centre's eta), weights in float64
        rows = take(arrays, jnp.arange(s, min(s + ALIAS_CHUNK, source.n), dtype=jnp.int32))
        norms.append(np.asarray(jnp.linalg.norm(rows["x"] @ est.whiten, axis=-1), np.float64))
        if family in EXPONENTIAL:
            etas.append(np.asarray(est.eta_centre(rows), np.float64))
    norms = np.concatenate(norms)
    weights = norms ** (order + 1) * (np.exp(np.concatenate(etas)) if family in EXPONENTIAL else 1.0)
    if not (np.all(np.isfinite(norms)) and np.all(np.isfinite(weights))):
        raise ValueError(
            "the covariates (or the centre's Poisson rates) are not finite: the per-datum bounds are not finite"
        )
    table = None
    if alias:
        keep, other = alias_table(weights)
        table = (jnp.asarray(keep, jnp.float32), jnp.asarray(other, jnp.int32))
    return est._replace(
        norm_sum=float(weights.sum()),
        norm_max=float(norms.max()),
        alias=table,
        weight_max=float(weights.max()) if family in EXPONENTIAL else None,
    )


def logistic_proxy(
    data: Any, centre: jax.Array, order: int = 2, whiten: np.ndarray | None = None, alias: bool = True
) -> GLMProxy:
    """``glm_proxy(data, centre, "logistic", order, whiten, alias)``.

    Args:
        data: ``{"x": (N, d), "y": (N,)}`` with labels in {0, 1}.
        centre: the expansion point.
        order: the proxy's order, 1 or 2.
        whiten: ``W`` (None: the identity).
        alias: keep the alias table of the rows' bound weights.
    """
    return glm_proxy(data, centre, "logistic", order=order, whiten=whiten, alias=alias)


def model_glm_proxy(
    model: Model,
    data: Any,
    centre: jax.Array,
    order: int = 2,
    whiten: np.ndarray | None = None,
    alias: bool = True,
    proxy: TaylorProxy | None = None,
) -> GLMProxy:
    """``glm_proxy`` for a model that declares its GLM family (``model.glm``); refuses one that does not.

    Args:
        model: a model with ``model.glm`` set (its family, precision, degrees of freedom).
        data: its data.
        centre: the expansion point.
        order: the proxy's order, 1 or 2.
        whiten: ``W`` (None: the identity).
        alias: keep the alias table of the rows' bound weights.
        proxy: the Taylor proxy at ``centre`` and ``order`` if one is built already.
    """
    if model.glm is None:
        raise ValueError(
            f"model {model.name!r} does not declare a GLM family (model.glm is None), so no per-datum bounds can be "
            "built for an exact test: use a GLM of minibatch_mcmc.models (logistic_regression, probit_regression, "
            "poisson_regression, l1_regression, student_t_regression with nu and sigma fixed: the bounds do not cover "
            "a sampled nu or sigma), set Model.glm=GLMSpec(family, ...) if the likelihood is one, or pass "
            "an estimator whose residual_bounds supplies |r_i| <= b_i (e.g. control_variates.glm_proxy)"
        )
    return glm_proxy(
        data,
        centre,
        model.glm.family,
        order=order,
        whiten=whiten,
        alias=alias,
        precision=model.glm.precision,
        proxy=proxy,
        nu=model.glm.nu,
    )
