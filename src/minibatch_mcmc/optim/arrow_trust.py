"""Trust-region steps on an arrow-shaped Hessian with Cholesky factors only: no ``d x d`` factorisation or eigenbasis.

A GLMM's log posterior is a sum of terms each touching one level's effects and the few global coordinates, so ``-H``
has the arrow shape of ``optim.block_newton``: one ``k x k`` block ``A_g`` per level, a ``k x m`` cross block ``B_g``
per level and a dense ``m x m`` global block ``C`` (``ArrowIndex``; ``glmm_arrow`` takes the factor with the most
effects as the levels and every other coordinate, another factor's effects included, as global). Its Cholesky factor,
levels first, is ``L = [[L_g, 0], [W_g', L_S]]`` with ``A_g = L_g L_g'``, ``W_g = L_g^{-1} B_g`` and ``L_S`` the factor
of the Schur complement ``S = C - sum_g W_g' W_g`` (``ArrowChol``): ``O(G k^3 + G k m^2 + m^3)``, and every solve
``O(G k^2 + G k m + m^2)``. With no levels (``dense_arrow``) it is the dense Cholesky of ``-H``, the same code.

The step maximises ``g'd + d'Hd/2`` within ``||d||_B <= radius``. Where ``-H`` factors (``concave_factor``) ``B = -H``
as in ``optim.trust_region``: the Newton step, shortened to the radius, from the arrow factor (``trust_step``,
``decrement``, ``length_in``; the Laplace variances ``inverse_diagonal``). Where it does not, these fall back to
``optim.trust_region``'s ``|H|`` eigenbasis (a ``d x d`` eigendecomposition). A Cholesky-only step for those points,
Moré and Sorensen's method in the ``|diag H|`` metric on the arrow, matched the dense route to rounding but led the GLMM
mode search into the funnel of a 150-level logistic model where the ``|H|`` metric does not; it was removed unused
(its code and tests are in commit 264e05e's tree, ``diagonal_step``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import scipy.linalg

from minibatch_mcmc.models.base import GLMMLayout
from minibatch_mcmc.optim import trust_region as dense
from minibatch_mcmc.optim.block_newton import ArrowIndex
from minibatch_mcmc.optim.trust_region import PIVOT_FLOOR, TrustStep


class ArrowChol(NamedTuple):
    """Lower Cholesky factor of an arrow matrix (module docstring), levels first then globals."""

    index: ArrowIndex
    levels: np.ndarray
    """``(G, k, k)``: ``L_g``."""
    cross: np.ndarray
    """``(G, k, m)``: ``W_g = L_g^{-1} B_g``."""
    schur: np.ndarray
    """``(m, m)``: ``L_S``."""


def glmm_arrow(layout: GLMMLayout) -> ArrowIndex:
    """The arrow of a GLMM's flat parameter: the levels of its factor with the most effects, every other coordinate global."""
    if not layout.levels:
        return dense_arrow(layout.fixed + len(layout.extras))
    at, starts = layout.fixed, []
    for g, k in zip(layout.levels, layout.columns):
        starts.append(at)
        at += g * k
    d = at + sum(layout.columns) + len(layout.extras)
    f = int(np.argmax([g * k for g, k in zip(layout.levels, layout.columns)]))
    g, k = layout.levels[f], layout.columns[f]
    levels = (starts[f] + np.arange(g * k)).reshape(g, k)
    return ArrowIndex(levels, np.setdiff1d(np.arange(d), levels.ravel()))


def dense_arrow(d: int) -> ArrowIndex:
    """The arrow with no levels: every coordinate global (the dense factorisation)."""
    return ArrowIndex(np.zeros((0, 1), np.int64), np.arange(d))


def factor(neg: np.ndarray, index: ArrowIndex) -> ArrowChol | None:
    """The ``ArrowChol`` of the symmetric ``neg``'s arrow blocks where it is positive definite with every
    squared pivot above ``PIVOT_FLOOR`` of the largest, else None (entries off the arrow are taken to be 0)."""
    lv, gl = index.levels, index.globals_
    a = 0.5 * (neg[lv[:, :, None], lv[:, None, :]] + neg[lv[:, None, :], lv[:, :, None]])
    b = 0.5 * (neg[lv[:, :, None], gl[None, None, :]] + neg[gl[None, None, :], lv[:, :, None]])
    c = 0.5 * (neg[np.ix_(gl, gl)] + neg[np.ix_(gl, gl)].T)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        return None
    try:
        levels = np.linalg.cholesky(a) if lv.shape[0] else np.zeros((0, lv.shape[1], lv.shape[1]))
        cross = np.linalg.solve(levels, b) if lv.shape[0] else np.zeros((0, lv.shape[1], gl.size))
        schur_m = c - np.einsum("gki,gkj->ij", cross, cross)
        schur = scipy.linalg.cholesky(schur_m, lower=True) if gl.size else np.zeros((0, 0))
    except (np.linalg.LinAlgError, ValueError):
        return None
    pivots = np.concatenate([np.diagonal(levels, axis1=1, axis2=2).ravel(), np.diag(schur)]) ** 2
    if pivots.size == 0 or not float(np.min(pivots)) > PIVOT_FLOOR * float(np.max(pivots)):
        return None
    return ArrowChol(index, levels, cross, schur)


def half_solve(f: ArrowChol, r: np.ndarray) -> np.ndarray:
    """``L^{-1} r`` (levels first, then globals)."""
    zl = np.linalg.solve(f.levels, r[f.index.levels][..., None])[..., 0] if f.levels.shape[0] else np.zeros((0, 1))
    rg = r[f.index.globals_] - np.einsum("gkm,gk->m", f.cross, zl)
    zg = scipy.linalg.solve_triangular(f.schur, rg, lower=True) if rg.size else rg
    return np.concatenate([zl.ravel(), zg])


def back_solve(f: ArrowChol, z: np.ndarray) -> np.ndarray:
    """``L^{-T} z`` (``z`` levels first, then globals), in the flat parameter's order."""
    n = f.index.levels.size
    zl, zg = z[:n].reshape(f.index.levels.shape), z[n:]
    xg = scipy.linalg.solve_triangular(f.schur, zg, lower=True, trans="T") if zg.size else zg
    out = np.empty(n + zg.size)
    if n:
        rhs = zl - np.einsum("gkm,m->gk", f.cross, xg)
        out[f.index.levels] = np.linalg.solve(np.swapaxes(f.levels, 1, 2), rhs[..., None])[..., 0]
    out[f.index.globals_] = xg
    return out


def solve(f: ArrowChol, r: np.ndarray) -> np.ndarray:
    """``M^{-1} r`` for the factored ``M = L L'``."""
    return back_solve(f, half_solve(f, r))


def transpose_times(f: ArrowChol, x: np.ndarray) -> np.ndarray:
    """``L' x`` (levels first, then globals)."""
    xl, xg = x[f.index.levels], x[f.index.globals_]
    own = np.einsum("gji,gj->gi", f.levels, xl) + np.einsum("gkm,m->gk", f.cross, xg) if xl.size else np.zeros(0)
    return np.concatenate([own.ravel(), f.schur.T @ xg])


def inverse_diagonal(f: ArrowChol) -> np.ndarray:
    """``diag(M^{-1})``: the column sums of ``L^{-1}``'s squares, ``L^{-1} = [[L_g^{-1}, 0], [-L_S^{-1} W' L_g^{-1}, L_S^{-1}]]``."""
    gl, lv = f.index.globals_, f.index.levels
    inv_s = scipy.linalg.solve_triangular(f.schur, np.eye(gl.size), lower=True) if gl.size else np.zeros((0, 0))
    out = np.empty(lv.size + gl.size)
    out[gl] = np.sum(inv_s**2, axis=0)
    if lv.size:
        inv_l = np.linalg.inv(f.levels)  # (G, k, k), lower
        below = -inv_s @ np.einsum("gkm,gkj->mgj", f.cross, inv_l).reshape(gl.size, -1)  # (m, G k)
        out[lv] = np.sum(inv_l**2, axis=1) + np.sum(below**2, axis=0).reshape(lv.shape)
    return out


def concave_factor(hessian: np.ndarray, index: ArrowIndex) -> ArrowChol | None:
    """The arrow Cholesky factor of ``-H`` where it is safely positive definite, else None."""
    return factor(-hessian, index)


class Metric(NamedTuple):
    """``B`` at one point, factored once for every step, length and decrement taken there: the arrow factor of ``-H``
    where it is concave, else ``trust_region.metric``'s ``|H|`` eigenbasis (a ``d x d`` ``eigh``, the mode search's
    costliest step: docs/benchmarks.md, the GLMM mode search's seconds)."""

    hessian: np.ndarray
    factor: ArrowChol | None
    eigen: tuple | None
    """``trust_region.metric(H)`` where ``factor`` is None and ``H`` is finite."""

    def eigenbasis(self) -> tuple:
        """``eigen``, or ``trust_region.metric(H)`` where ``H`` is not finite."""
        return dense.metric(self.hessian) if self.eigen is None else self.eigen


def metric_at(hessian: np.ndarray, index: ArrowIndex) -> Metric:
    """``hessian``'s ``Metric`` (no eigenbasis kept where it is not finite)."""
    f = concave_factor(hessian, index)
    if f is not None or not np.all(np.isfinite(hessian)):
        return Metric(hessian, f, None)
    return Metric(hessian, None, dense.metric(hessian))


def metric_for(hessian: np.ndarray, index: ArrowIndex, known: Metric | None) -> Metric:
    """``known`` where it is ``hessian``'s (the same array, or equal entries), else ``metric_at(hessian, index)``: one
    factorisation per point however many steps, lengths and decrements are taken there."""
    if known is not None and (known.hessian is hessian or np.array_equal(known.hessian, hessian)):
        return known
    return metric_at(hessian, index)


def at(hessian: np.ndarray | Metric, index: ArrowIndex) -> Metric:
    """``hessian`` itself where it is a ``Metric``, else its ``metric_at``."""
    return hessian if isinstance(hessian, Metric) else metric_at(hessian, index)


def decrement(grad: np.ndarray, hessian: np.ndarray | Metric, index: ArrowIndex) -> float:
    """``sqrt(g' B^{-1} g)`` (module docstring)."""
    b = at(hessian, index)
    if b.factor is not None:
        return float(np.linalg.norm(half_solve(b.factor, grad)))
    lam, vec, curvature = b.eigenbasis()
    return float(np.linalg.norm((vec.T @ grad) / np.sqrt(curvature)))


def length_in(hessian: np.ndarray | Metric, index: ArrowIndex) -> Callable[[np.ndarray], float]:
    """``step -> ||step||_B`` with ``B`` factored once."""
    b = at(hessian, index)
    f = b.factor
    if f is not None:
        return lambda step: float(np.linalg.norm(transpose_times(f, step)))
    lam, vec, curvature = b.eigenbasis()
    root = np.sqrt(curvature)
    return lambda step: float(np.linalg.norm(root * (vec.T @ step)))


def trust_step(grad: np.ndarray, hessian: np.ndarray | Metric, radius: float, index: ArrowIndex) -> TrustStep:
    """The step maximising the local quadratic within ``||d||_B <= radius`` (module docstring); all NaN where the gradient
    or Hessian is not finite (a trial there is refused by ``trust_region.gain``). ``hessian``: ``H`` or its ``Metric``."""
    h = hessian.hessian if isinstance(hessian, Metric) else hessian
    if not (np.all(np.isfinite(grad)) and np.all(np.isfinite(h))):
        nan = np.full(grad.shape, np.nan)
        return TrustStep(nan, np.nan, np.nan, np.nan, False)
    b = at(hessian, index)
    f = b.factor
    if f is not None:
        white = half_solve(f, grad)
        dec = float(np.linalg.norm(white))
        shrink = 1.0 if dec <= radius else radius / dec
        length = dec * shrink
        step = back_solve(f, white) * shrink
        return TrustStep(step, float(grad @ step) - 0.5 * length**2, length, dec, True)
    return dense.metric_step(grad, b.eigenbasis(), radius)
