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

Each row's own part gets the same rule, row by row (``row_difference``, ``ROW_NODES`` nodes, the derivative along the
move one ``jax.jvp`` per node for all the batch's rows): in float32 a row's ``l_i(theta') - l_i(theta)`` taken as a
subtraction is wrong by a few ``eps |l_i|``, which a test's ``N / m`` scaling turns into noise growing with ``N``
(issue 32, ``benchmarks/twin_gap.py``); integrated, it is wrong by a few ``eps`` of the difference itself. It is on
for every float32 difference, not only where the predicted noise ``N eps mean|l_i| / sqrt(m)`` matters: ``log_ratio``
sees neither ``N`` nor ``m``. Its cost is ``ROW_NODES`` forward-mode evaluations of the rows beside the two plain
ones: ``auto_sample``'s sampling on ``benchmarks/first_fit.py``'s robust regression is somewhat slower, on its mixture
markedly (``benchmarks/row_difference_cost.py``, ``docs/results/row_difference_cost_long.json``; a gate on that noise
would win it back, not done). In float64 the subtraction's rounding is ``2^29`` times smaller than any
test's noise at any ``N`` a machine holds, so there the plain difference is kept and float64 draws are unchanged.
``ROW_NODES`` is 4, not ``NODES``: at posterior-scale moves four nodes are already within rounding of the difference
(``tests/control_variates/test_base.py``), while two, at half the extra cost, leave more than the subtraction's
rounding on a long move that the agreement rule still passes (``tests/models/test_shared_term.py`` fails); a longer move the rule does not resolve falls back to the plain
difference, which such a move's difference no longer needs.

The rows' part must use the parameters as the shared part does: a scalar like ``exp(-log sigma)`` rounded once and
used by every row perturbs ``sum_i rows_i`` by ``N`` times its rounding where the shared part sees the exact
``log sigma``; ``student_t_rows`` keeps every rounding per row.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.scipy.special import gammaln

PyTree = Any

NODES = 8
"""Gauss-Legendre nodes of ``shared_difference`` (exact for a ``value`` polynomial of degree 15 along the move)."""
ROW_NODES = 4
"""Gauss-Legendre nodes of ``row_difference``."""
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
    integral = integrated_difference(lambda x: value(unravel(x)), a, u, NODES)
    return agreed(integral, value(current), value(candidate))


def row_difference(rows: Callable[[PyTree], jax.Array], current: PyTree, candidate: PyTree) -> jax.Array:
    """``rows(theta') - rows(theta)`` per row (``rows``: ``theta -> (b,)``), in float32 accurate relative to each
    difference (the integrated derivative along the move, ``ROW_NODES`` nodes, the plain difference where the two
    disagree, row by row); in float64 the plain difference, whose rounding no test sees."""
    before, after = rows(current), rows(candidate)
    if not integrates(after.dtype):
        return after - before
    a, unravel = ravel_pytree(current)
    u = ravel_pytree(candidate)[0] - a
    return agreed(integrated_difference(lambda x: rows(unravel(x)), a, u, ROW_NODES), before, after)


def integrates(dtype: Any) -> bool:
    """Whether a difference in ``dtype`` is integrated: a floating type of fewer than 64 bits."""
    return bool(jnp.issubdtype(dtype, jnp.floating)) and jnp.finfo(dtype).bits < 64


def integrated_difference(
    f: Callable[[jax.Array], jax.Array], start: jax.Array, move: jax.Array, nodes: int
) -> jax.Array:
    """``int_0^1 d/ds f(start + s move) ds`` (Gauss-Legendre, ``nodes`` nodes), each derivative one forward-mode
    evaluation of ``f`` in the direction ``move``: ``f(start + move) - f(start)`` without their cancellation."""
    t, w = (jnp.asarray(v, start.dtype) for v in gauss_legendre(nodes))
    slopes = jax.vmap(lambda s: jax.jvp(f, (start + s * move,), (move,))[1])(t)
    return jnp.tensordot(w, slopes, axes=1)


def agreed(integral: jax.Array, before: jax.Array, after: jax.Array) -> jax.Array:
    """``integral`` where it is finite and within the plain difference ``after - before``'s rounding (``AGREE_EPS``
    epsilons of ``1 + |before| + |after|``), else the plain difference (elementwise: one rule per row)."""
    plain = after - before
    tol = AGREE_EPS * jnp.finfo(plain.dtype).eps * (1.0 + jnp.abs(before) + jnp.abs(after))
    integral = integral.astype(plain.dtype)
    good = jnp.isfinite(integral) & (jnp.abs(integral - plain) <= tol)
    return jnp.where(good, integral, plain)


def gauss_legendre(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on ``[0, 1]``."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    return 0.5 * (x + 1.0), 0.5 * w


def student_t_value(log_sigma: jax.Array, log_nu: jax.Array) -> jax.Array:
    """The Student-t's normalising terms ``gammaln((nu + 1) / 2) - gammaln(nu / 2) - log(nu pi) / 2 - log sigma``."""
    nu = jnp.exp(log_nu)
    return gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * (log_nu + jnp.log(jnp.pi)) - log_sigma


SERIES_W = 0.25
"""Below this ``w = (r / sigma)^2 / nu`` a row's ``(nu + 1) log1p(w)`` is taken as ``(q + w)`` times the series of
``log1p(w) / w`` (``LOG1P_SERIES``), so its derivatives in ``r`` are polynomials. The log-space form's third derivative
in ``eta`` goes through ``log(log1p(w))``: it was ``-inf`` at ``|r| = 7e-8`` (a Student-t GLMM's cubic sums at a centre
near the mode were not finite, and the warm-up stopped), and up to 140 float32 epsilons of its size off at ``w`` from
0.01 to 0.05; from 0.25 up, within 3."""


@jax.custom_jvp
def scaled_square(residual: jax.Array, log_sigma: jax.Array, log_nu: jax.Array) -> jax.Array:
    """``(r / sigma)^2 / nu`` rounded per row (``exp(2 log|r| - 2 log sigma - log nu)``: no shared ``1 / sigma`` or
    ``1 / nu`` multiplies it); its derivatives are polynomials in ``r`` (``jax.custom_jvp``), where autodiff of the
    logarithm would divide by ``r``."""
    return jnp.exp(2.0 * jnp.log(jnp.abs(residual)) - 2.0 * log_sigma - log_nu)


@scaled_square.defjvp
def scaled_square_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    """``dw = 2 r dr / (nu sigma^2) - w (2 d(log sigma) + d(log nu))``."""
    residual, log_sigma, log_nu = primals
    d_residual, d_log_sigma, d_log_nu = tangents
    w = scaled_square(residual, log_sigma, log_nu)
    slope = 2.0 * residual * d_residual * jnp.exp(-2.0 * log_sigma - log_nu)
    return w, slope - w * (2.0 * d_log_sigma + d_log_nu)


LOG1P_SERIES = tuple((-1.0) ** k / (k + 1) for k in range(24))
"""``log1p(w) / w = 1 - w / 2 + w^2 / 3 - ...``: its first 24 coefficients (truncation under ``w^24 / 25``, 3e-16 at
``SERIES_W``: float64's rounding)."""


def log1p_ratio(w: jax.Array) -> jax.Array:
    """``log1p(w) / w`` by its series (Horner), for ``0 <= w < SERIES_W``."""
    out = jnp.full_like(w, LOG1P_SERIES[-1])
    for c in reversed(LOG1P_SERIES[:-1]):
        out = c + w * out
    return out


def student_t_rows(residual: jax.Array, log_sigma: jax.Array, log_nu: jax.Array) -> jax.Array:
    """``-(nu + 1) / 2 log1p((r / sigma)^2 / nu)`` per row, every rounding of the value a per-row one (no shared
    ``1 / sigma``, ``nu`` multiplying it); by the series below ``SERIES_W``, whose derivatives stay finite and accurate."""
    log_w = 2.0 * (jnp.log(jnp.abs(residual)) - log_sigma) - log_nu  # only compared: no derivative is taken through it
    small = log_w < math.log(SERIES_W)
    near_r = jnp.where(small, residual, 0.0)  # 0 where the series is not taken: finite everywhere
    q, w = scaled_square(near_r, log_sigma, jnp.zeros_like(log_nu)), scaled_square(near_r, log_sigma, log_nu)
    near = -0.5 * (q + w) * log1p_ratio(w)
    far_r = jnp.where(small, jnp.exp(log_sigma + 0.5 * log_nu), residual)  # w = 1 where the series is taken
    term = jax.nn.softplus(2.0 * jnp.log(jnp.abs(far_r)) - 2.0 * log_sigma - log_nu)  # log1p(w), past exp's range too
    return jnp.where(small, near, -0.5 * (jnp.exp(log_nu + jnp.log(term)) + term))
