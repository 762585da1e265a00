"""The GLMM mode search's data-free climbs on its surrogate and its tests of the mode (``warmup.glmm_mode``), every
Cholesky factorisation on the Hessian's arrow (``optim.arrow_trust``): a level block each, a Schur complement over them,
no ``d x d`` Cholesky or inverse. At non-concave points the step is still the dense ``|H|`` eigenbasis (at ``N = 1e5``,
``G = 1e3``, ``d = 1004``, those ``eigh`` calls took 346 of the mode search's 550 s)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.glmm import GLMMProxy
from minibatch_mcmc.control_variates.influence import MAX_DIRECTIONS
from minibatch_mcmc.optim.arrow_trust import (
    Metric,
    back_solve,
    concave_factor,
    decrement,
    dense_arrow,
    half_solve,
    inverse_diagonal,
    length_in,
    metric_for,
    solve,
    trust_step,
)
from minibatch_mcmc.optim.block_newton import ArrowIndex
from minibatch_mcmc.optim.trust_region import gain, next_radius

SCALED = ("gx", "hxx", "mx", "gphi", "kphi", "gz", "hzx", "hzz", "mz", "tzzz", "tzzx")
"""The proxy's sums (each a sum over rows): scaled by ``N / m`` for a subsample's."""
ARRAYS = ("centre",) + SCALED + ("cubic",)
"""The proxy's array fields: arguments of the compiled surrogate, so one compilation serves every proxy."""
CLIMB_STEPS = 20
"""Most trust-region iterations on one data-free surrogate."""

COORDINATE_STEP = 0.2
"""Largest Newton step in any one coordinate, in its Laplace s.d., at which a point counts as the mode (``at_mode``):
this module's own, measured with it (the lean search's joint decrement is another rule's tolerance)."""

PROXY_STEP = 0.5
"""Largest Newton step in any one coordinate, in its Laplace s.d., at which the full passes stop (``near_mode``): the
last pass's proxy is kept, centred there, and the mode is the data-free climb's end on its surrogate (``polish``), an
IRLS step from the last pass's exact gradient and Hessian. The lean search stops its passes at a joint Newton decrement
of 0.5 (``lean.NEWTON_DECREMENT``), so no coordinate of its proxy's centre is further out."""

CLIMB_DECREMENT = 0.02
"""Newton decrement at which a climb on the surrogate stops."""


def fields(proxy: GLMMProxy) -> dict:
    """A proxy's ``ARRAYS`` fields, and its pair blocks' arrays (``"pairs"``)."""
    return {**{k: getattr(proxy, k) for k in ARRAYS}, "pairs": tuple((p.rows, p.cols, p.hzz) for p in proxy.pairs)}


def climb(
    fn: Callable,
    arrays: dict,
    x0: np.ndarray,
    radius: float,
    dtype,
    index: ArrowIndex | None = None,
    known: Metric | None = None,
) -> tuple[np.ndarray, float, tuple]:
    """Trust-region Newton on the data-free surrogate from ``x0`` within ``radius`` of its Laplace s.d.s at ``x0``: the end,
    the rise it predicts, and ``(value, gradient, Hessian)`` at ``x0`` (float64). Each point's ``B`` is factored once
    (``arrow_trust.Metric``), ``known``'s where its Hessian is the start's."""

    def at(x: np.ndarray) -> tuple:
        v, g, h = fn(jnp.asarray(x, dtype), arrays)
        return float(v), np.asarray(g, np.float64), np.asarray(h, np.float64)

    start = at(x0)
    index = arrow(index, start[1].size)
    b = metric_for(start[2], index, known)
    x, current, inner, from_start = np.asarray(x0, np.float64), start, radius, length_in(b, index)
    for _ in range(CLIMB_STEPS):
        if not (np.all(np.isfinite(current[1])) and np.all(np.isfinite(current[2]))):
            break  # no quadratic to climb (the start's derivatives are not finite): the start is kept
        b = metric_for(current[2], index, b)
        s = trust_step(current[1], b, inner, index)  # its decrement: ``decrement``'s, one factorisation for both
        if np.all(np.isfinite(current[2])) and s.decrement <= CLIMB_DECREMENT:
            break
        trial = x + s.step
        out = from_start(trial - x0)
        if out > radius:
            trial = x0 + (trial - x0) * (radius / out)
        step = trial - x
        predicted = float(current[1] @ step) + 0.5 * float(step @ current[2] @ step)
        new = at(trial)
        taken, ratio = gain(current[0], new[0] if np.isfinite(new[0]) else np.nan, predicted)
        inner = next_radius(inner, ratio, min(s.length, inner))
        if taken:
            x, current = trial, new
        if inner < 1e-8:
            break
    return x, current[0] - start[0], start


def converged(grad: np.ndarray, hessian: np.ndarray, limit: float, index: ArrowIndex | None = None) -> bool:
    """A strictly concave point (``concave_factor``) within ``limit`` Laplace s.d.s of its local quadratic's mode."""
    f = concave_factor(hessian, arrow(index, grad.size))
    return f is not None and float(np.linalg.norm(half_solve(f, grad))) <= limit


def coordinate_steps(grad: np.ndarray, hessian: np.ndarray, index: ArrowIndex | None = None) -> float:
    """The largest Newton step in one coordinate, in that coordinate's Laplace s.d. (inf where not strictly concave):
    from the arrow Cholesky factor ``L`` of ``-H``, the step ``L'^{-1} L^{-1} g`` and the variances, the column sums of
    ``L^{-1}``'s squares (``arrow_trust.inverse_diagonal``: no eigendecomposition, no ``d x d`` inverse)."""
    factor = concave_factor(hessian, arrow(index, grad.size))
    if factor is None:
        return float("inf")
    return float(np.max(np.abs(solve(factor, grad)) / np.sqrt(inverse_diagonal(factor))))


def at_mode(grad: np.ndarray, hessian: np.ndarray, index: ArrowIndex | None = None) -> bool:
    """Each coordinate within ``COORDINATE_STEP`` of its Laplace s.d. from the local quadratic's mode.

    A row's residual depends on its own level's effects and ``beta`` only, so what sets the proxy's residuals is each
    coordinate's distance, not the joint one (``sqrt(d)`` times larger for errors spread over the levels, as Newton's are)."""
    return coordinate_steps(grad, hessian, index) <= COORDINATE_STEP


def near_mode(grad: np.ndarray, hessian: np.ndarray, index: ArrowIndex | None = None) -> bool:
    """Each coordinate within ``PROXY_STEP`` of its Laplace s.d. from the local quadratic's mode: the pass's proxy is kept."""
    return coordinate_steps(grad, hessian, index) <= PROXY_STEP


def polish(
    fn: Callable,
    proxy: GLMMProxy,
    x: np.ndarray,
    grad: np.ndarray,
    hessian: np.ndarray,
    dtype,
    temperature: float,
    index: ArrowIndex | None = None,
) -> tuple:
    """The second-order surrogate's maximum from ``x`` (the last pass's point, ``near_mode``) and its ``(value, gradient,
    Hessian)`` there (float64, the value with ``proxy``'s ``log_lik``): the proxy posterior's mode and Laplace fit, no data
    read. At ``x`` itself where it is already ``at_mode``."""
    index = arrow(index, grad.size)
    if at_mode(grad, hessian, index):
        return x, evaluate(fn, proxy, x, dtype, temperature)
    end, _ = full_climb(fn, proxy, x, max(2.0 * decrement(grad, hessian, index), 1e-3), dtype, index)
    return end, evaluate(fn, proxy, end, dtype, temperature)


def second_order(proxy: GLMMProxy) -> GLMMProxy:
    """``proxy`` without its per-level cubic."""
    return proxy._replace(tzzz=(), tzzx=(), cubic=())


def full_climb(
    fn: Callable,
    proxy: GLMMProxy,
    x: np.ndarray,
    radius: float,
    dtype,
    index: ArrowIndex | None = None,
    known: Metric | None = None,
) -> tuple[np.ndarray, float]:
    """The second-order surrogate's climb from ``x`` (IRLS with the priors) and its predicted rise. Not the cubic one:
    from a subsample's mode, several s.d.s out per level, its climb reaches the cubic's spurious maxima
    (``control_variates.glmm.CUBIC_INFO``) and predicted 7,180 where the log posterior rose by 921 (``N = 2e5``,
    ``G = 200``), while the second-order climb predicted 1,504 for a rise of 1,510."""
    end, predicted, _ = climb(fn, fields(second_order(proxy)), x, radius, dtype, index, known)
    return end, predicted


def evaluate(fn: Callable, proxy: GLMMProxy, x: np.ndarray, dtype, temperature: float) -> tuple:
    """The log posterior at ``proxy``'s centre ``x`` (its pass's ``log_lik``) with its gradient and Hessian (float64)."""
    v, g, h = (np.asarray(a, np.float64) for a in fn(jnp.asarray(x, dtype), fields(second_order(proxy))))
    return float(v) + proxy.log_lik / temperature, g, h


def arrow(index: ArrowIndex | None, d: int) -> ArrowIndex:
    """``index``, or the dense arrow (no levels) for ``d`` coordinates."""
    return dense_arrow(d) if index is None else index


def laplace_steps(hessian: np.ndarray, index: ArrowIndex | None, key: jax.Array | None) -> np.ndarray | None:
    """The influence probes' steps ``F u`` with ``F F' = (-H)^{-1}`` (``F = L^{-T}`` from the arrow factor ``L L' = -H``),
    ``u`` the axes up to ``MAX_DIRECTIONS`` coordinates, else as many random unit vectors (``influence.probe_steps``' key
    use); None where ``-H`` is not positive definite."""
    f = concave_factor(hessian, arrow(index, hessian.shape[0]))
    if f is None:
        return None
    d = hessian.shape[0]
    if d <= MAX_DIRECTIONS:
        u = np.eye(d)
    else:
        sub = jax.random.split(jax.random.key(0) if key is None else key)[0]
        z = np.asarray(jax.random.normal(sub, (d, MAX_DIRECTIONS)), np.float64)
        u = z / np.linalg.norm(z, axis=0)
    order = np.concatenate([f.index.levels.ravel(), f.index.globals_])  # back_solve takes z levels first
    return np.stack([back_solve(f, col[order]) for col in u.T])
