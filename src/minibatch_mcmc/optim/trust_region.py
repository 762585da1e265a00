"""Trust-region Newton steps measured in the posterior's own scale.

A step maximises the local quadratic ``g'd + d'Hd/2`` within ``||d||_B <= radius``, where ``B = |H|`` is ``-H`` with
each eigenvalue replaced by its absolute value (floored): where the log posterior is concave ``||d||_B`` is the
step's length in Laplace standard deviations, and where it is not (the ``(tau, a)`` ridge of a non-centred
hierarchical model, a scale parameter far from its mode) it is the length in units of the local curvature, so one
radius serves every parameter whatever its units. In ``B``'s eigenbasis the problem separates: with ``z = B^{1/2} d``
and ``s_i = sign`` of ``-H``'s ``i``-th eigenvalue, ``z_i = g~_i / (s_i + mu)`` for the smallest ``mu >= 0`` (``> 1``
along a convex direction) that keeps ``||z|| <= radius`` (the Levenberg-Marquardt form of the exact trust-region step).
The radius follows the ratio of the achieved to the predicted increase (``next_radius``). ``climb`` runs the steps on
any evaluation (a streamed full-data pass, a subsample), one evaluation per trial, accepted or not.

Where ``-H`` is positive definite (``concave_factor``: its Cholesky factor ``L``, pivots above ``PIVOT_FLOOR`` of the
largest) ``B = -H`` and every ``mu`` is the same, so the step is the Newton step ``(-H)^{-1} g`` over ``1 + mu`` with
``mu = max(0, decrement / radius - 1)``, the decrement ``||L^{-1} g||`` and a length ``||L' d||``: one Cholesky
(``d^3 / 3``) instead of an eigendecomposition (``~9 d^3``, and on a loaded 2-core CPU 10 to 100 times the Cholesky's
seconds at ``d = 1004``: issue 31's GLMM warm-up spent most of its time in them). Elsewhere the eigenbasis as above.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import scipy.linalg

ACCEPT = 1e-4
"""Smallest ratio of achieved to predicted increase at which a trial step is taken."""
SHRINK, GROW = 0.25, 0.75
"""Ratios below which the radius shrinks to a quarter of the step, and above which (at the boundary) it doubles."""
MAX_RADIUS = 1e6
"""Largest radius, in the metric's units."""
PIVOT_FLOOR = 1e-12
"""Smallest squared Cholesky pivot, relative to the largest, at which ``-H`` counts as safely positive definite for the
Cholesky route (below it: the eigenbasis, whose floor at ``1e-12`` of the largest eigenvalue then matters)."""
ROUNDING = 4
"""Float32 machine epsilons of ``|log posterior|`` within which a change counts as rounding (the sums are float64 over
float32 chunk sums, each within a few epsilons of its own magnitude)."""


class TrustStep(NamedTuple):
    """A trust-region step and what the local quadratic says of it."""

    step: np.ndarray
    predicted: float
    """Increase of the log posterior the quadratic ``g'd + d'Hd/2`` predicts (the true ``H``)."""
    length: float
    """``||step||_B``."""
    decrement: float
    """``sqrt(g' B^{-1} g)``: the unconstrained step's length, the distance to the mode in Laplace s.d.s where concave."""
    concave: bool
    """Whether ``-H`` is positive definite."""


def metric(hessian: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``-H``'s eigenvalues and eigenvectors, and ``B``'s (their absolute values, floored at ``1e-12`` of the largest)."""
    lam, vec = np.linalg.eigh(-0.5 * (hessian + hessian.T))
    curvature = np.maximum(np.abs(lam), max(float(np.max(np.abs(lam))) * 1e-12, np.finfo(np.float64).tiny))
    return lam, vec, curvature


def concave_factor(hessian: np.ndarray) -> np.ndarray | None:
    """The lower Cholesky factor of ``-H`` (symmetrised) where it is positive definite with every squared pivot above
    ``PIVOT_FLOOR`` of the largest, else None."""
    neg = -0.5 * (hessian + hessian.T)
    try:
        factor = scipy.linalg.cholesky(neg, lower=True, check_finite=True)
    except (np.linalg.LinAlgError, ValueError):
        return None
    pivots = np.diag(factor) ** 2
    return factor if float(np.min(pivots)) > PIVOT_FLOOR * float(np.max(pivots)) else None


def decrement(grad: np.ndarray, hessian: np.ndarray) -> float:
    """The Newton decrement ``sqrt(g' B^{-1} g)``."""
    factor = concave_factor(hessian)
    if factor is not None:
        return float(np.linalg.norm(scipy.linalg.solve_triangular(factor, grad, lower=True)))
    lam, vec, curvature = metric(hessian)
    return float(np.linalg.norm((vec.T @ grad) / np.sqrt(curvature)))


def metric_length(step: np.ndarray, hessian: np.ndarray) -> float:
    """``||step||_B``: a step's length in Laplace s.d.s (in the local curvature's units where not concave)."""
    return length_in(hessian)(step)


def length_in(hessian: np.ndarray) -> Callable[[np.ndarray], float]:
    """``step -> ||step||_B`` with ``B`` factored once (a climb measures every trial from its start's ``B``)."""
    factor = concave_factor(hessian)
    if factor is not None:
        return lambda step: float(np.linalg.norm(factor.T @ step))
    lam, vec, curvature = metric(hessian)
    root = np.sqrt(curvature)
    return lambda step: float(np.linalg.norm(root * (vec.T @ step)))


def multiplier(gt: np.ndarray, sign: np.ndarray, radius: float) -> float:
    """The ``mu`` with ``||gt / (sign + mu)|| = radius`` (bisection; the norm falls as ``mu`` rises past ``max(0, -min sign)``)."""
    lo = 0.0 if np.all(sign > 0) else 1.0
    size = lambda mu: float(np.linalg.norm(gt / np.maximum(sign + mu, 1e-300)))  # noqa: E731 - the step's length at mu
    hi = lo + 1.0
    while size(hi) > radius:
        hi = lo + 2.0 * (hi - lo)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if size(mid) > radius else (lo, mid)
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def trust_step(grad: np.ndarray, hessian: np.ndarray, radius: float) -> TrustStep:
    """The step maximising the local quadratic within ``||d||_B <= radius``."""
    factor = concave_factor(hessian)
    if factor is not None:
        return concave_step(grad, factor, radius)
    return eigen_step(grad, hessian, radius)


def eigen_step(grad: np.ndarray, hessian: np.ndarray, radius: float) -> TrustStep:
    """``trust_step`` in ``|H|``'s eigenbasis (module docstring), whether or not ``-H`` is positive definite."""
    return metric_step(grad, metric(hessian), radius)


def metric_step(grad: np.ndarray, eigen: tuple, radius: float) -> TrustStep:
    """``eigen_step`` from ``metric(hessian)``, computed once for every step from one point."""
    lam, vec, curvature = eigen
    gt = (vec.T @ grad) / np.sqrt(curvature)
    sign = np.where(lam > 0, 1.0, -1.0)
    dec = float(np.linalg.norm(gt))
    concave = bool(np.all(lam > 0))
    if concave and dec <= radius:
        z = gt
    else:
        z = gt / (sign + multiplier(gt, sign, radius))
        short = radius - float(np.linalg.norm(z))
        if (
            short > 1e-9 * radius and not concave
        ):  # no gradient along the convex directions: move along the most convex one
            z[int(np.argmin(lam))] += short
    step = vec @ (z / np.sqrt(curvature))
    predicted = float(grad @ step) - 0.5 * float(np.sum(lam / curvature * z**2))
    return TrustStep(step, predicted, float(np.linalg.norm(z)), dec, concave)


def concave_step(grad: np.ndarray, factor: np.ndarray, radius: float) -> TrustStep:
    """``trust_step`` where ``-H = L L'`` (``factor``): the Newton step, shortened to ``radius`` (module docstring)."""
    white = scipy.linalg.solve_triangular(factor, grad, lower=True)  # z at mu = 0: L^{-1} g
    dec = float(np.linalg.norm(white))
    shrink = 1.0 if dec <= radius else radius / dec  # 1 / (1 + mu)
    step = scipy.linalg.solve_triangular(factor.T, white, lower=False) * shrink
    length = dec * shrink
    return TrustStep(step, float(grad @ step) - 0.5 * length**2, length, dec, True)


def next_radius(radius: float, ratio: float, length: float) -> float:
    """Shrink to a quarter of the step after a poor prediction (``ratio < SHRINK``), double after a good one at the boundary."""
    if not ratio >= SHRINK:
        return 0.25 * length
    if ratio > GROW and length >= 0.99 * radius:
        return min(2.0 * radius, MAX_RADIUS)
    return radius


def gain(value: float, trial_value: float, predicted: float) -> tuple[bool, float]:
    """Whether a trial is taken, and the ratio of achieved to predicted increase (``-inf`` for a non-finite trial).

    A step whose predicted increase is within the rounding of the log posterior is taken when it loses no more than
    that rounding (the steps at the mode)."""
    if not np.isfinite(trial_value):
        return False, -np.inf
    noise = ROUNDING * float(np.finfo(np.float32).eps) * (abs(value) + 1.0)
    achieved = trial_value - value
    if predicted <= noise:
        return achieved >= -noise, 1.0 if achieved >= -noise else -np.inf
    ratio = achieved / predicted
    return ratio >= ACCEPT, ratio


class Climb(NamedTuple):
    """Where ``climb`` stopped: the point, its evaluation, the accepted steps, the evaluations and the last radius."""

    flat: np.ndarray
    current: Any
    steps: int
    trials: int
    radius: float


def finite(out: Any) -> bool:
    """Whether an evaluation's value, gradient and Hessian are all finite."""
    return bool(np.isfinite(out.value) and np.all(np.isfinite(out.grad)) and np.all(np.isfinite(out.hessian)))


def climb(
    evaluate: Callable[[np.ndarray, Any], Any],
    flat: np.ndarray,
    current: Any,
    *,
    max_steps: int,
    max_trials: int,
    done: Callable[[Any], bool],
    radius: float | None = None,
) -> Climb:
    """Trust-region Newton from ``flat`` (evaluated as ``current``: ``.value``, ``.grad``, ``.hessian``) until ``done(current)``.

    ``evaluate(trial, current)`` evaluates a trial point; the first radius is the first step's decrement (a full Newton
    step where concave) unless given."""
    flat = np.asarray(flat, np.float64)
    steps = trials = 0
    if radius is None:
        radius = max(decrement(current.grad, current.hessian), 1e-3)
    while steps < max_steps and trials < max_trials and not done(current):
        s = trust_step(current.grad, current.hessian, radius)
        trial = flat + s.step
        out = evaluate(trial, current)
        trials += 1
        ok, ratio = gain(current.value, float(out.value) if finite(out) else np.nan, s.predicted)
        radius = next_radius(radius, ratio, s.length)
        if ok:
            flat, current, steps = trial, out, steps + 1
        if radius < 1e-8:
            break
    return Climb(flat, current, steps, trials, radius)
