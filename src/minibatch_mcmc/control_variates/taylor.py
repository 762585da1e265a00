"""Taylor-proxy control variates (Bardenet, Doucet and Holmes 2017; Quiroz et al. 2019's difference estimator).

Each per-datum log-likelihood ``l_i(theta) = log p(x_i|theta)`` gets a proxy, its Taylor expansion
around a centre ``c`` (a mode, found by ``warmup``):

    l~_i(theta) = l_i(c) + g_i . d + (1/2) d' H_i d,    d = theta - c,

with ``g_i`` and ``H_i`` the gradient and Hessian of ``l_i`` at ``c`` (second order; first order drops
the last term). The difference a test needs splits into a data-free part and a residual:

    l_i(theta') - l_i(theta) = [l_i(theta') - l_i(theta) - q_i] + q_i,
    q_i = l~_i(theta') - l~_i(theta) = g_i . u + (1/2) u' H_i v,    u = theta' - theta,  v = d' + d,

and ``sum_i q_i = G . u + (1/2) u' H v`` with ``G = sum_i g_i`` and ``H = sum_i H_i``, computed once in a
streamed pass. The minibatch test then sees only the residuals, whose spread near the centre is
``O(|d|^3)`` per datum (second order; ``O(|d|^2)`` first order) instead of ``O(|d|)``, so at
temperature 1 with a posterior-scaled move (``|d| ~ N^(-1/2)``) the test stops after ``O(1)`` points.

Per datum, ``q_i`` is one nested forward-mode derivative (``g_i . u + (1/2) u' H_i v`` is the value
plus the tangent of ``x -> grad l_i(x) . u`` at ``c`` in direction ``v / 2``): no ``d x d`` matrix is
formed per point. The data-free sum needs ``H`` as a dense ``d x d`` matrix, so the second-order proxy
is refused above ``MAX_DENSE_DIM`` parameters (use ``order=1`` there).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_choice, check_int
from minibatch_mcmc.control_variates.base import integrated_rows, minibatch_rows, no_row_draw, plain, uses_all_rows
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.data.passes import DEFAULT_CHUNK, host_tree_sum
from minibatch_mcmc.models.base import Model

PyTree = Any

MAX_DENSE_DIM = 4096
"""Largest number of parameters for which the second-order proxy keeps the ``d x d`` Hessian sum (64 MiB in float32)."""


class TaylorProxy(NamedTuple):
    """A Taylor proxy of every per-datum log-likelihood around ``centre``, with its full-data sums."""

    centre: PyTree
    """The expansion point ``c`` (a pytree like the parameter)."""
    order: int
    """1 (gradient) or 2 (gradient and Hessian)."""
    grad_sum: jax.Array
    """``G = sum_i grad l_i(c)``, flattened, shape ``(d,)``."""
    hess_sum: jax.Array | None
    """``H = sum_i Hess l_i(c)``, flattened, shape ``(d, d)`` (None for order 1)."""
    setup_data: int
    """Data points read to build the proxy (each row once; the warm-up reports the seconds)."""
    name: str = "taylor"
    row_draw = staticmethod(no_row_draw)
    subtracts_rows = staticmethod(integrated_rows)  # each row's difference integrated (``PlainDifference``)

    def flat_centre(self) -> tuple[jax.Array, Callable[[jax.Array], PyTree]]:
        """The centre as a flat vector and the function back to a pytree."""
        return ravel_pytree(self.centre)

    def directions(self, current: PyTree, candidate: PyTree) -> tuple[jax.Array, jax.Array]:
        """``u = theta' - theta`` and ``v / 2 = ((theta' - c) + (theta - c)) / 2`` as flat vectors."""
        c, _ = self.flat_centre()
        x0, x1 = ravel_pytree(current)[0], ravel_pytree(candidate)[0]
        return x1 - x0, 0.5 * ((x1 - c) + (x0 - c))

    def per_datum(self, model: Model, batch: PyTree, u: jax.Array, half_v: jax.Array) -> jax.Array:
        """``q_i = g_i . u + (1/2) u' H_i v`` for each row (order 1: ``g_i . u``)."""
        c, unravel = self.flat_centre()

        def log_lik(x: jax.Array) -> jax.Array:
            return model.log_lik(unravel(x), batch)

        def slope(x: jax.Array) -> jax.Array:
            return jax.jvp(log_lik, (x,), (u.astype(x.dtype),))[1]

        if self.order == 1:
            return slope(c)
        value, tangent = jax.jvp(slope, (c,), (half_v.astype(c.dtype),))
        return value + tangent

    def data_free(self, u: jax.Array, half_v: jax.Array) -> jax.Array:
        """``sum_i q_i = G . u + u' H (v / 2)`` without the data."""
        total = jnp.dot(self.grad_sum, u)
        if self.order == 2:
            total = total + jnp.dot(u, self.hess_sum @ half_v)
        return total

    def remainder(self, model: Model, theta: PyTree, rows: PyTree) -> jax.Array:
        """``l_i(theta) - (l~_i(theta) - l_i(c))`` for each of ``rows``."""
        c, _ = self.flat_centre()
        d = ravel_pytree(theta)[0] - c
        return model.log_lik(theta, rows) - self.per_datum(model, rows, d, 0.5 * d)

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """Residuals ``l_i(theta') - l_i(theta) - q_i`` row by row."""
        u, half_v = self.directions(current, candidate)
        ratio = plain().log_ratio(model, current, candidate)

        def residual(batch: PyTree) -> jax.Array:
            r = ratio(batch)
            return r - self.per_datum(model, batch, u, half_v).astype(r.dtype)

        return residual

    def known_sum(self, current: PyTree, candidate: PyTree) -> jax.Array:
        """The proxy's exact difference ``sum_i q_i``."""
        return self.data_free(*self.directions(current, candidate))

    def population(self, data: PyTree) -> PyTree:
        """Every row: the proxy leaves no row out."""
        return data

    def population_size(self, n_data: int) -> int:
        """``N``."""
        return n_data

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> None:
        """No bounds: a Taylor proxy of a general model does not know how far its residuals can go."""
        del model, current, candidate

    def proxy_sum(self, theta: PyTree) -> jax.Array:
        """``sum_i (l~_i(theta) - l_i(c))``: the data-free approximation of the log-likelihood sum, up to a constant."""
        c, _ = self.flat_centre()
        d = ravel_pytree(theta)[0] - c
        return self.data_free(d, 0.5 * d)

    def log_lik_sum(
        self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int
    ) -> tuple[Callable[[PyTree], jax.Array], float]:
        """Exact full-data sum for ``batch_size=0``; else the control-variate estimate (SGLD-CV):
        ``sum_i l~_i(theta) + (N / b) sum_batch (l_i(theta) - l~_i(theta))``, up to a constant."""
        if uses_all_rows(batch_size, n_data):
            return plain().log_lik_sum(model, key, data, n_data, batch_size)  # the exact streamed sum
        return self.minibatch_estimate(model, minibatch_rows(key, data, n_data, batch_size), n_data, batch_size), 1.0

    def minibatch_estimate(
        self, model: Model, batch: PyTree, n_data: int, batch_size: int
    ) -> Callable[[PyTree], jax.Array]:
        """``theta -> sum_i l~_i(theta) + (N / b) sum_batch (l_i(theta) - l~_i(theta))`` (constants dropped) on given rows."""

        def estimate(theta: PyTree) -> jax.Array:
            return self.proxy_sum(theta) + (n_data / batch_size) * jnp.sum(self.remainder(model, theta, batch))

        return estimate


def chunk_derivatives(model: Model, centre: PyTree, order: int) -> Callable[[PyTree], dict]:
    """Per chunk of rows: the sums of ``l_i``, of its gradient and (order 2) of its Hessian at ``centre``."""
    c, unravel = ravel_pytree(centre)

    def part(rows: PyTree) -> dict:
        def chunk_sum(x: jax.Array) -> jax.Array:
            return jnp.sum(model.log_lik(unravel(x), rows))

        value, grad = jax.value_and_grad(chunk_sum)(c)
        out = {"value": value, "grad": grad}
        if order == 2:
            out["hess"] = jax.hessian(chunk_sum)(c)
        return out

    return part


def taylor_proxy(model: Model, data: Any, centre: PyTree, order: int = 2, chunk: int = DEFAULT_CHUNK) -> TaylorProxy:
    """Build the Taylor proxy around ``centre`` with one streamed pass over the data (sums kept in float64).

    Raises a ``ValueError`` naming the problem if a sum is not finite, or if ``order=2`` is asked for
    more than ``MAX_DENSE_DIM`` parameters.

    Args:
        model: The ``Model`` whose per-datum ``log_lik`` is expanded.
        data: The rows (arrays or a ``DataSource``), read once.
        centre: The expansion point (near the mode, e.g. ``Warmup.centre``).
        order: 1 (gradients) or 2 (gradients and Hessians; at most ``MAX_DENSE_DIM`` parameters).
        chunk: Rows per compiled chunk of the pass.
    """
    order = check_choice(order, "order", (1, 2))
    chunk = check_int(chunk, "chunk", low=1)
    flat, _ = ravel_pytree(centre)
    d = int(flat.size)
    if not np.all(np.isfinite(np.asarray(flat))):
        raise ValueError(f"the proxy centre has NaN or inf entries: {np.asarray(flat)}")
    if order == 2 and d > MAX_DENSE_DIM:
        raise ValueError(
            f"a second-order Taylor proxy keeps a {d} x {d} Hessian sum; it is limited to d <= {MAX_DENSE_DIM} "
            "parameters: use order=1 for larger models"
        )
    source = as_data_source(data)
    return proxy_from_sums(
        host_tree_sum(chunk_derivatives(model, centre, order), source.arrays(), source.n, chunk),
        centre,
        order,
        source.n,
    )


def proxy_from_sums(sums: dict, centre: PyTree, order: int, n: int) -> TaylorProxy:
    """The proxy from float64 full-data sums ``value``, ``grad`` (and ``hess``) of ``l_i`` at ``centre`` (one pass, made by the caller)."""
    flat, _ = ravel_pytree(centre)
    for name, value in sums.items():
        bad = ~np.isfinite(value)
        if np.any(bad):
            raise ValueError(
                f"the proxy's full-data {name} sum at the centre is not finite ({int(bad.sum())} of {bad.size} entries); "
                "the centre lies where some log-likelihood or its derivatives overflow: start the warm-up elsewhere"
            )
    dtype = flat.dtype if jnp.issubdtype(flat.dtype, jnp.floating) else jnp.float32
    hess = None
    if order == 2:
        h = 0.5 * (sums["hess"] + sums["hess"].T)
        hess = jnp.asarray(h, dtype)
    return TaylorProxy(
        centre=jax.tree_util.tree_map(jnp.asarray, centre),
        order=order,
        grad_sum=jnp.asarray(sums["grad"], dtype),
        hess_sum=hess,
        setup_data=int(n),
    )
