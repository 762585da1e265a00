"""A log-likelihood's row-independent part, declared apart so its difference between two parameters is computed once, accurately.

In float32 a term every row shares (a Student-t's ``gammaln((nu + 1) / 2) - gammaln(nu / 2) - log(sigma)
- log(nu pi) / 2``) is one rounded scalar counted ``N`` times: at ``N = 10^6`` its rounding alone moves the
full-data log-likelihood ratio by most of a nat (``benchmarks/float32_rounding.py``, ``docs/results/float32_rounding.json``). A model that declares ``Model.shared = SharedTerm(value, rows)``, with
``log_lik(theta, batch)_i = rows(theta, batch)_i + value(theta)``, has every estimator's per-row ratio computed as
``rows(theta', .) - rows(theta, .) + shared_difference(...)`` (``control_variates.base.PlainDifference``): the same
terms as before, with the shared difference accurate to float32 relative to itself, not to ``value``.

``shared_difference`` integrates the gradient of ``value`` along the move, ``int_0^1 grad value(theta + t u) . u dt``
(Gauss-Legendre, ``NODES`` nodes): exact to rounding for a ``value`` analytic near the segment (``gammaln``, ``log``),
and tested against float64 (``tests/models/test_shared_term.py``). Where it disagrees with the plain difference by
more than the plain one's rounding (``AGREE_EPS``: a long move across a kink or a pole) the plain difference is used.

The rows' part must use the parameters as the shared part does: a scalar like ``exp(-log sigma)`` rounded once and
used by every row perturbs ``sum_i rows_i`` by ``N`` times its rounding where the shared part sees the exact
``log sigma``; ``student_t_rows`` keeps every rounding per row.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.scipy.special import gammaln

PyTree = Any

NODES = 8
"""Gauss-Legendre nodes of ``shared_difference`` (exact for a ``value`` polynomial of degree 15 along the move)."""
AGREE_EPS = 64
"""Float epsilons (relative to ``1 + |value(theta)| + |value(theta')|``) within which the integral must agree with the
plain difference, else the plain difference is used (the integral's rule failed: a long move, a kink)."""


class SharedTerm(NamedTuple):
    """A log-likelihood's row-independent part: ``log_lik(theta, batch)_i = rows(theta, batch)_i + value(theta)``."""

    value: Callable[[PyTree], jax.Array]
    """``theta -> scalar``: the part every row's log-likelihood shares (differentiable, smooth in ``theta``)."""
    rows: Callable[[PyTree, PyTree], jax.Array]
    """``(theta, batch) -> (b,)``: the rest of each row's log-likelihood."""


def shared_difference(shared: SharedTerm, current: PyTree, candidate: PyTree) -> jax.Array:
    """``value(theta') - value(theta)`` to float32 accuracy relative to the difference (the integrated gradient)."""
    return value_difference(shared.value, current, candidate)


def value_difference(value: Callable[[PyTree], jax.Array], current: PyTree, candidate: PyTree) -> jax.Array:
    """``value(theta') - value(theta)`` for a smooth scalar ``value``, by ``shared_difference``'s rule."""
    a, unravel = ravel_pytree(current)
    u = ravel_pytree(candidate)[0] - a
    t, w = (jnp.asarray(v, a.dtype) for v in gauss_legendre(NODES))
    slope = jax.vmap(lambda s: jnp.dot(jax.grad(lambda x: value(unravel(x)))(a + s * u), u))(t)
    integral = jnp.sum(w * slope)
    va, vb = value(current), value(candidate)
    plain = vb - va
    tol = AGREE_EPS * jnp.finfo(plain.dtype).eps * (1.0 + jnp.abs(va) + jnp.abs(vb))
    good = jnp.isfinite(integral) & (jnp.abs(integral.astype(plain.dtype) - plain) <= tol)
    return jnp.where(good, integral.astype(plain.dtype), plain)


def gauss_legendre(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on ``[0, 1]``."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    return 0.5 * (x + 1.0), 0.5 * w


def student_t_value(log_sigma: jax.Array, log_nu: jax.Array) -> jax.Array:
    """The Student-t's normalising terms ``gammaln((nu + 1) / 2) - gammaln(nu / 2) - log(nu pi) / 2 - log sigma``."""
    nu = jnp.exp(log_nu)
    return gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * (log_nu + jnp.log(jnp.pi)) - log_sigma


def student_t_rows(residual: jax.Array, log_sigma: jax.Array, log_nu: jax.Array) -> jax.Array:
    """``-(nu + 1) / 2 log1p((r / sigma)^2 / nu)`` per row, every rounding a per-row one (no shared ``1 / sigma``, ``nu``)."""
    zero = residual == 0  # the wheres keep the value and its gradients finite at a zero residual
    lz = 2.0 * jnp.log(jnp.abs(jnp.where(zero, 1.0, residual))) - 2.0 * log_sigma - log_nu  # log((r / sigma)^2 / nu)
    term = jnp.where(zero, 0.0, jnp.log1p(jnp.exp(lz)))
    none = term <= 0
    return -0.5 * (jnp.where(none, 0.0, jnp.exp(log_nu + jnp.log(jnp.where(none, 1.0, term)))) + term)
