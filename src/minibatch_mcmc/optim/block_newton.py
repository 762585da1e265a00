"""Mode and Laplace approximation of a GLMM with one grouping factor, on its arrow-shaped Hessian: never ``d x d``.

With one factor of ``G`` levels and ``k`` effects per level, the log posterior is a sum of terms each touching one
level's effects ``e_g`` (k,) and the ``m = p + k + e`` global coordinates (``beta``, ``log sd``, ``phi``), so its negative
Hessian ``A`` has the arrow shape ``[[D, B], [B', C]]``: ``D`` block-diagonal with one ``k x k`` block ``A_g`` per
level, ``B`` one ``k x m`` cross block ``B_g`` per level, ``C`` the dense ``m x m`` global block.

Its blocks come from one streamed pass: ``k + m`` Hessian-vector products of the model's own log posterior (forward over
reverse), the ``j``-th of the first ``k`` with a tangent of ones on column ``j`` of every level at once (no two levels
share a term, so each level's block column comes back unmixed), the others one global unit vector each. The pass costs
``k + m`` gradients per row; memory ``O(G k (k + m) + m^2)``.

``A x = r`` is solved with the Schur complement over the level blocks, ``S = C - sum_g B_g' A_g^{-1} B_g``:
``x_G = S^{-1} (r_G - sum_g B_g' A_g^{-1} r_g)``, ``x_g = A_g^{-1} (r_g - B_g x_G)``, ``O(G k^3 + G k m^2 + m^3)``.
Where the log posterior is not concave (the ridge of a non-centred level), each ``A_g`` and then ``S`` get their
eigenvalues' absolute values, at least ``EIG_FLOOR`` times the largest. Each step is the Newton step cut to a radius
measured in Laplace s.d.s (``sqrt(s' A s)``), the first radius the full step's, quartered (one value pass each) until
the log posterior does not fall, doubled after a step that gained at least 3/4 of its quadratic prediction; first with
the group s.d.s and the family's extras held at the start (the effects given the scales: from a start with every effect
0 a centred model's s.d.s are otherwise pulled into its funnel), then all coordinates together. The search stops when
the Newton decrement ``sqrt(g' A^{-1} g)`` (the distance to the mode in Laplace s.d.s) is below ``POLISH_DECREMENT``
at a concave point.

The Laplace fit ``N(mode, A^{-1})`` is kept as an ``ArrowFactor``: each ``A_g``'s Cholesky factor, ``M_g = A_g^{-1}
B_g`` and the Cholesky factor of ``S``. ``x = L z`` with ``x_G = L_S^{-T} z_G``, ``x_g = L_g^{-T} z_g - M_g x_G``
draws from it (``x_G`` has precision ``S``, ``x_g`` given ``x_G`` has mean ``-M_g x_G`` and precision ``A_g``);
``L L' = A^{-1}``, so ``L`` is a mass factor for HMC and ``diag(L L')`` the marginal
variances, all without forming ``A^{-1}``.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.arrays import as_data_source, slice_rows
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import POLISH_DECREMENT

PyTree = Any

EIG_FLOOR = 1e-8
"""Eigenvalues of a level block or of the Schur complement are raised to at least this times the largest."""
MAX_SHRINKS = 30
"""Times one step's radius is quartered (each a value pass) before the search stops where it is."""


class ArrowIndex(NamedTuple):
    """Where the arrow's blocks sit in the flat parameter."""

    levels: np.ndarray
    """``(G, k)``: the flat index of each level's effects."""
    globals_: np.ndarray
    """``(m,)``: the flat index of each global coordinate (fixed effects, log s.d.s, family extras)."""


class ArrowBlocks(NamedTuple):
    """The negative Hessian ``A`` in blocks (module docstring), float64."""

    a_levels: np.ndarray
    """``(G, k, k)``."""
    cross: np.ndarray
    """``(G, k, m)``: ``B_g``."""
    a_globals: np.ndarray
    """``(m, m)``: ``C``."""


class ArrowFactor(NamedTuple):
    """The Laplace fit's factor ``L`` with ``L L' = A^{-1}`` (module docstring), float64 numpy arrays."""

    index: ArrowIndex
    chol_levels: np.ndarray
    """``(G, k, k)``: lower Cholesky factor of each ``A_g``."""
    m: np.ndarray
    """``(G, k, m)``: ``A_g^{-1} B_g``."""
    chol_schur: np.ndarray
    """``(m, m)``: lower Cholesky factor of ``S``."""


class ArrowMode(NamedTuple):
    """The mode found on the arrow Hessian, its Laplace factor and the work it took."""

    theta_hat: np.ndarray
    log_posterior: float
    gradient: np.ndarray
    blocks: ArrowBlocks
    factor: ArrowFactor
    decrement: float
    """Newton decrement at ``theta_hat`` (Laplace s.d.s to the mode)."""
    converged: bool
    steps: int
    passes: int
    """Full-data passes (each derivative pass counted once, each value-only pass once)."""
    seconds: float


def arrow_index(model: Model) -> ArrowIndex:
    """The arrow layout of a GLMM with one grouping factor; a ValueError for any other model."""
    if model.glmm is None:
        raise ValueError(
            f"block Newton needs a GLMM (models.glmm.glmm_model); model {model.name!r} has no glmm structure"
        )
    layout = model.glmm.layout
    if len(layout.levels) != 1:
        raise ValueError(
            f"block Newton handles one grouping factor; this GLMM has {len(layout.levels)} "
            f"({', '.join(layout.names)}): crossed factors couple their levels and break the arrow"
        )
    g, k, p = layout.levels[0], layout.columns[0], layout.fixed
    d = p + g * k + k + len(layout.extras)
    levels = (p + np.arange(g * k)).reshape(g, k)
    return ArrowIndex(levels, np.concatenate([np.arange(p), np.arange(p + g * k, d)]))


def tangents(index: ArrowIndex, d: int, dtype) -> jax.Array:
    """``(k + m, d)``: column ``j`` of every level at once, then each global unit vector."""
    k, m = index.levels.shape[1], index.globals_.size
    t = np.zeros((k + m, d))
    for j in range(k):
        t[j, index.levels[:, j]] = 1.0
    t[k + np.arange(m), index.globals_] = 1.0
    return jnp.asarray(t, dtype)


def derivative_pass(model: Model, index: ArrowIndex, temperature: float, chunk: int):
    """``(flat, source) -> (value, gradient, ArrowBlocks)`` of the tempered log posterior, streamed in chunks, float64 sums."""

    def chunk_fn(flat: jax.Array, rows: PyTree, with_prior: jax.Array, tan: jax.Array):
        def f(x: jax.Array) -> jax.Array:
            lik = jnp.sum(model.log_lik(x, rows)) / temperature
            return lik + with_prior * model.log_prior(x)

        value, grad = jax.value_and_grad(f)(flat)
        hv = jax.vmap(lambda t: jax.jvp(jax.grad(f), (flat,), (t,))[1])(tan)
        return value, grad, hv

    fn = jax.jit(chunk_fn)

    def run(flat: jax.Array, source) -> tuple[float, np.ndarray, ArrowBlocks]:
        tan = tangents(index, flat.size, flat.dtype)
        data, value, grad, hv = source.arrays(), 0.0, np.zeros(flat.size), np.zeros((tan.shape[0], flat.size))
        for start in range(0, source.n, chunk):
            v, g, h = jax.device_get(
                fn(
                    flat,
                    slice_rows(data, start, min(chunk, source.n - start)),
                    jnp.asarray(1.0 if start == 0 else 0.0, flat.dtype),
                    tan,
                )
            )
            value, grad, hv = value + float(v), grad + np.asarray(g, np.float64), hv + np.asarray(h, np.float64)
        return value, grad, blocks_from(index, hv)

    return run


def value_pass(model: Model, temperature: float, chunk: int):
    """``(flat, source) -> value`` of the tempered log posterior, streamed in chunks."""
    fn = jax.jit(lambda flat, rows: jnp.sum(model.log_lik(flat, rows)) / temperature)
    prior = jax.jit(model.log_prior)

    def run(flat: jax.Array, source) -> float:
        data = source.arrays()
        total = float(prior(flat))
        for start in range(0, source.n, chunk):
            total += float(fn(flat, slice_rows(data, start, min(chunk, source.n - start))))
        return total

    return run


def blocks_from(index: ArrowIndex, hv: np.ndarray) -> ArrowBlocks:
    """``A``'s blocks from the ``k + m`` Hessian-vector products (rows of ``hv``), symmetrised."""
    k = index.levels.shape[1]
    a_levels = -np.transpose(hv[:k][:, index.levels], (1, 2, 0))  # [g, i, j] = -H[level_g i, level_g j]
    cross = -np.transpose(hv[k:][:, index.levels], (1, 2, 0))  # [g, i, c] = -H[level_g i, global c]
    a_globals = -hv[k:][:, index.globals_]
    return ArrowBlocks(0.5 * (a_levels + np.swapaxes(a_levels, 1, 2)), cross, 0.5 * (a_globals + a_globals.T))


def positive(a: np.ndarray, damping: float) -> tuple[np.ndarray, bool]:
    """Symmetric matrices (batched) with eigenvalues raised to ``EIG_FLOOR`` times the largest, plus ``damping``;
    and whether every one was positive definite already."""
    lam, vec = np.linalg.eigh(a)
    top = np.max(np.abs(lam), axis=-1, keepdims=True)
    floor = EIG_FLOOR * np.maximum(top, 1e-300)
    was = bool(np.all(lam > floor))
    lam = np.maximum(np.abs(lam), floor) + damping
    return (vec * lam[..., None, :]) @ np.swapaxes(vec, -1, -2), was


def factorise(index: ArrowIndex, blocks: ArrowBlocks, damping: float = 0.0) -> tuple[ArrowFactor, bool]:
    """The ``ArrowFactor`` of ``A + damping I`` (blocks made positive definite where they are not), and whether ``A``
    itself was positive definite (no eigenvalue raised)."""
    for name, block in zip(ArrowBlocks._fields, blocks):
        if not np.all(np.isfinite(block)):
            raise ValueError(
                f"the log posterior's Hessian block {name!r} has non-finite entries: the search left the region "
                "where the model's terms are finite (a group s.d. driven to 0 or to infinity: no mode in this parameterisation)"
            )
    a_levels, ok_levels = positive(blocks.a_levels, damping)
    chol_levels = np.linalg.cholesky(a_levels)
    m = np.linalg.solve(a_levels, blocks.cross)
    schur = blocks.a_globals + damping * np.eye(blocks.a_globals.shape[0]) - np.einsum("gkc,gke->ce", blocks.cross, m)
    schur, ok_schur = positive(0.5 * (schur + schur.T), 0.0)
    return ArrowFactor(index, chol_levels, m, np.linalg.cholesky(schur)), ok_levels and ok_schur


def solve(factor: ArrowFactor, r: np.ndarray) -> np.ndarray:
    """``A^{-1} r`` through the Schur complement (module docstring)."""
    idx = factor.index
    r_levels, r_glob = r[idx.levels], r[idx.globals_]
    w = chol_solve(factor.chol_levels, r_levels)
    rhs = r_glob - np.einsum("gkc,gk->c", factor.m, r_levels)
    x_glob = np.linalg.solve(factor.chol_schur.T, np.linalg.solve(factor.chol_schur, rhs))
    out = np.empty_like(r)
    out[idx.levels] = w - np.einsum("gkc,c->gk", factor.m, x_glob)
    out[idx.globals_] = x_glob
    return out


def chol_solve(chol: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``(L L')^{-1} r`` for each level's lower factor ``L`` (``(G, k, k)``) and right side ``(G, k)``."""
    y = np.linalg.solve(chol, r[..., None])
    return np.linalg.solve(np.swapaxes(chol, 1, 2), y)[..., 0]


def marginal_variances(factor: ArrowFactor) -> np.ndarray:
    """``diag(A^{-1})``: the Laplace fit's marginal variances, ``O(G k^2 m + m^3)``."""
    idx = factor.index
    inv_s = np.linalg.inv(factor.chol_schur)
    cov_glob = inv_s.T @ inv_s
    inv_l = np.linalg.inv(factor.chol_levels)
    cond = np.einsum("gji,gji->gi", inv_l, inv_l)  # diag(A_g^{-1}) = column norms of L_g^{-1}
    extra = np.einsum("gkc,ce,gke->gk", factor.m, cov_glob, factor.m)
    out = np.empty(idx.levels.size + idx.globals_.size)
    out[idx.levels] = cond + extra
    out[idx.globals_] = np.diag(cov_glob)
    return out


def block_mode(
    model: Model, data: Any, theta0: Any, *, temperature: float = 1.0, max_steps: int = 50, chunk: int = DEFAULT_CHUNK
) -> ArrowMode:
    """The posterior mode of a one-factor GLMM by damped Newton on its arrow Hessian, and its Laplace factor.

    Args:
        model: a GLMM with one grouping factor (``models.glmm.glmm_model``).
        data: its data (any source ``data.arrays.as_data_source`` reads).
        theta0: the start (the flat parameter; its dtype is the passes' dtype).
        temperature: the likelihood's divisor ``K``.
        max_steps: Newton steps at most.
        chunk: rows per read of each pass.
    """
    index, source = arrow_index(model), as_data_source(data)
    flat = jnp.asarray(theta0)
    if flat.ndim != 1 or flat.size != index.levels.size + index.globals_.size:
        raise ValueError(
            f"theta0 must be the flat parameter of {index.levels.size + index.globals_.size} entries; got shape {flat.shape}"
        )
    derivatives, value_of = derivative_pass(model, index, temperature, chunk), value_pass(model, temperature, chunk)
    start, passes, steps, radius = time.perf_counter(), 1, 0, None
    value, grad, blocks = derivatives(flat, source)
    effects_only = True  # first the fixed and group effects given the scales (module docstring), then everything
    while True:
        used, sub = restricted(index, blocks, index.globals_.size - scale_count(model) if effects_only else None)
        factor, concave = factorise(used, sub)
        step = np.zeros_like(grad)
        free = np.r_[used.levels.ravel(), used.globals_]
        step[free] = solve(factor, np.where(np.isin(np.arange(grad.size), free), grad, 0.0))[free]
        dec = float(np.sqrt(max(grad @ step, 0.0)))
        if (concave and dec <= POLISH_DECREMENT) or steps >= max_steps or not np.isfinite(dec):
            if effects_only and np.isfinite(dec) and steps < max_steps:
                effects_only, radius = False, None
                continue
            break
        radius = max(dec, 1e-3) if radius is None else radius
        for _ in range(MAX_SHRINKS):
            scaled = step * min(1.0, radius / dec)
            trial = (np.asarray(flat, np.float64) + scaled).astype(flat.dtype)
            new, passes = value_of(jnp.asarray(trial), source), passes + 1
            predicted = grad @ scaled - 0.5 * quad(sub, used, scaled)
            if np.isfinite(new) and new >= value - 10.0 * float(jnp.finfo(flat.dtype).eps) * abs(
                value
            ):  # the passes' rounding
                if new - value >= 0.75 * predicted and radius <= dec:
                    radius *= 2.0
                break
            radius = 0.25 * min(radius, dec)
        else:
            break
        flat, steps = jnp.asarray(trial), steps + 1
        value, grad, blocks = derivatives(flat, source)
        passes += 1
    factor, concave = factorise(index, blocks)
    return ArrowMode(
        np.asarray(flat),
        value,
        grad,
        blocks,
        factor,
        dec,
        bool(concave and dec <= POLISH_DECREMENT),
        steps,
        passes,
        time.perf_counter() - start,
    )


def scale_count(model: Model) -> int:
    """The global coordinates after the fixed effects: the group s.d.s' logs and the family's extras."""
    layout = model.glmm.layout
    return layout.columns[0] + len(layout.extras)


def restricted(index: ArrowIndex, blocks: ArrowBlocks, keep: int | None) -> tuple[ArrowIndex, ArrowBlocks]:
    """The arrow of the first ``keep`` global coordinates only (all of them for None): the others held fixed."""
    if keep is None:
        return index, blocks
    return (
        ArrowIndex(index.levels, index.globals_[:keep]),
        ArrowBlocks(blocks.a_levels, blocks.cross[:, :, :keep], blocks.a_globals[:keep, :keep]),
    )


def quad(blocks: ArrowBlocks, index: ArrowIndex, x: np.ndarray) -> float:
    """``x' A x`` from the blocks."""
    xl, xg = x[index.levels], x[index.globals_]
    return float(
        np.einsum("gi,gij,gj->", xl, blocks.a_levels, xl)
        + 2.0 * np.einsum("gi,gic,c->", xl, blocks.cross, xg)
        + xg @ blocks.a_globals @ xg
    )


def apply_factor(factor: ArrowFactor, z: np.ndarray) -> np.ndarray:
    """``L z`` for each row of ``z`` (``(n, d)``): ``N(0, I)`` rows become draws from ``N(0, A^{-1})`` (module docstring)."""
    idx = factor.index
    z = np.atleast_2d(np.asarray(z, np.float64))
    x_glob = np.linalg.solve(factor.chol_schur.T, z[:, idx.globals_].T).T  # (n, m): L_S^{-T} z_G
    lt = np.swapaxes(factor.chol_levels, 1, 2)
    own = np.linalg.solve(lt[None], z[:, idx.levels][..., None])[..., 0]  # (n, G, k): L_g^{-T} z_g
    out = np.empty_like(z)
    out[:, idx.levels] = own - np.einsum("gkc,nc->ngk", factor.m, x_glob)
    out[:, idx.globals_] = x_glob
    return out
