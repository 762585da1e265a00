"""Each level's own log-likelihood along its effect, read on a grid by the GLMM mode search's first full pass.

From a subsample's mode the level effects of a GLMM lie about ``sqrt(N / m - 1)`` of their s.d.s from the full data's
mode (each level has only ``m / N`` of its rows in the subsample), and the worst of ``G`` levels several times that: at
``N = 2e5``, ``G = 10^3`` (200 rows a level), ``m = N / 16``, about 2 on the ``eta`` scale. A Newton step on the
second-order proxy from there leaves a level off by ``~ (f''' / 2 f'') delta^2``, a few s.d.s, and so a third full
pass. But a level's rows reach the parameters through ``eta_i + z_i du_g`` only: the same pass can sum, per level and
for ``KNOTS`` shifts ``du`` spread over ``WIDTH`` such expected offsets, each row's log-density and its slope at the
shifted ``eta``, ``V_g(du) = sum_i f_i(eta_i + z_i du)`` and ``A_g(du) = dV_g / d du``, in ``O(G KNOTS)`` memory. The
surrogate the Newton step climbs (``glmm_mode``) then takes each level's quadratic in ``du_g`` out and its cubic Hermite
interpolant of ``V_g`` in (beyond the grid the end knot's quadratic, with ``H_g = dA_g / d du``): each level's own
nonlinearity is followed to the interpolation's error, and what stays second order is the levels' coupling through
``beta``, the s.d.s and the shared ``phi``, which move little on the ``eta`` scale. For factors with one column
(random intercepts or one slope); the others keep their quadratic.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.glmm import GLMMProxy
from minibatch_mcmc.models.base import GLMMLayout
from minibatch_mcmc.models.glmm import effect_blocks, linear_predictor

PyTree = Any

KNOTS = 9
"""Shifts per level (odd: the centre is one of them)."""
WIDTH = 4.0
"""Half-width of each level's grid, in its expected offset from the subsample's mode (``sqrt(N / m - 1)`` Laplace s.d.s)."""


class LevelGrid(NamedTuple):
    """One factor's per-level log-likelihood on its grid of effect shifts (module docstring)."""

    factor: int
    knots: jax.Array
    """``(G, KNOTS)`` shifts ``du`` of each level's effect, increasing, the middle one 0."""
    value: jax.Array
    """``(G, KNOTS)``: ``V_g`` at each knot less ``V_g(0)``."""
    slope: jax.Array
    """``(G, KNOTS)``: ``A_g``."""
    curvature: jax.Array
    """``(G, KNOTS)``: ``H_g``."""


def grid_knots(proxy: GLMMProxy, x: np.ndarray, offset_sds: float) -> dict[int, np.ndarray]:
    """Per one-column factor, each level's knots: ``WIDTH * offset_sds`` of the level's Laplace s.d. on the ``eta`` scale
    either side (``proxy``: the subsample's, scaled to ``N``; the prior's precision ``1 / sd^2`` at ``x`` added)."""
    layout = proxy.layout
    log_sds = effect_blocks(layout, jnp.asarray(x))[2]
    out = {}
    for f, (hzz, log_sd) in enumerate(zip(proxy.hzz, log_sds)):
        if layout.columns[f] != 1:
            continue
        info = np.maximum(-np.asarray(hzz, np.float64)[:, 0, 0], 0.0) + float(np.exp(-2.0 * np.asarray(log_sd)[0]))
        half = WIDTH * max(offset_sds, 1.0) / np.sqrt(info)
        out[f] = half[:, None] * np.linspace(-1.0, 1.0, KNOTS)[None, :]
    return out


def grid_reader(layout: GLMMLayout, density: Callable, centre_split: tuple, knots: dict[int, np.ndarray], dtype):
    """``(each, result)``: ``each(rows, start)`` adds a chunk's rows to every level's sums (``streamed_sums``' hook),
    ``result()`` the ``LevelGrid`` per factor (float64 sums cast to ``dtype``)."""
    beta, us, phi = centre_split
    knots_j = {f: jnp.asarray(k, beta.dtype) for f, k in knots.items()}

    def part(rows: PyTree, kn: dict) -> dict:
        eta = linear_predictor(layout, beta, us, rows)
        out = {}
        for f, k in kn.items():
            codes, z = rows[f"g_{f}"], rows[f"z_{f}"][:, 0].astype(eta.dtype)
            shifted = eta[:, None] + z[:, None] * k[codes]

            def three(e: jax.Array) -> tuple:
                def fn(et: jax.Array) -> jax.Array:
                    return density(et, phi, rows)

                ones = jnp.ones_like(e)
                value, d1 = jax.jvp(fn, (e,), (ones,))
                d2 = jax.jvp(lambda et: jax.jvp(fn, (et,), (ones,))[1], (e,), (ones,))[1]
                return value, d1, d2

            v, d1, d2 = jax.vmap(three, in_axes=1, out_axes=1)(shifted)
            levels = layout.levels[f]
            out[f] = (
                jax.ops.segment_sum(v, codes, num_segments=levels),
                jax.ops.segment_sum(z[:, None] * d1, codes, num_segments=levels),
                jax.ops.segment_sum((z * z)[:, None] * d2, codes, num_segments=levels),
            )
        return out

    compiled = jax.jit(part)
    total: dict = {}

    def each(rows: PyTree, start: int) -> None:
        del start
        piece = jax.device_get(compiled(rows, knots_j))
        for f, sums in piece.items():
            sums = tuple(np.asarray(a, np.float64) for a in sums)
            total[f] = sums if f not in total else tuple(a + b for a, b in zip(total[f], sums))

    def result() -> tuple[LevelGrid, ...]:
        """Per factor its grid, the values less the centre knot's (float64 before the cast: differences of large sums)."""
        middle = KNOTS // 2
        out = []
        for f in sorted(total):
            v, a, h = total[f]
            rel = v - v[:, middle : middle + 1]
            out.append(LevelGrid(f, *(jnp.asarray(b, dtype) for b in (knots[f], rel, a, h))))
        return tuple(out)

    return each, result


def hermite(grid: LevelGrid, du: jax.Array) -> jax.Array:
    """``V_g(du_g)`` per level: the cubic Hermite interpolant of the knots' values and slopes, the end knot's quadratic
    beyond the grid (traceable)."""
    k, v, a, h = grid.knots, grid.value, grid.slope, grid.curvature
    last = k.shape[1] - 1
    i = jnp.clip(jnp.sum(k <= du[:, None], axis=1) - 1, 0, last - 1)[:, None]
    x0, x1 = jnp.take_along_axis(k, i, 1)[:, 0], jnp.take_along_axis(k, i + 1, 1)[:, 0]
    width = x1 - x0
    t = (du - x0) / width
    inside = (
        (2 * t**3 - 3 * t**2 + 1) * jnp.take_along_axis(v, i, 1)[:, 0]
        + (t**3 - 2 * t**2 + t) * width * jnp.take_along_axis(a, i, 1)[:, 0]
        + (-2 * t**3 + 3 * t**2) * jnp.take_along_axis(v, i + 1, 1)[:, 0]
        + (t**3 - t**2) * width * jnp.take_along_axis(a, i + 1, 1)[:, 0]
    )

    def end(j: int) -> jax.Array:
        s = du - k[:, j]
        return v[:, j] + a[:, j] * s + 0.5 * h[:, j] * s * s

    return jnp.where(du < k[:, 0], end(0), jnp.where(du > k[:, last], end(last), inside))


def level_correction(proxy: GLMMProxy, grids: tuple[LevelGrid, ...], theta: jax.Array) -> jax.Array:
    """What the grids add to ``proxy.proxy_sum(theta)``: per level, its interpolated ``V_g(w_g) - V_g(0)`` (``value`` is
    relative to the centre knot) less its quadratic ``gz w + hzz w^2 / 2``, at ``w_g = du_g + (hzx_g / hzz_g) . dbeta``:
    the level's effect move plus the fixed effects' move as its rows see it on average (weighted by ``h``; exactly the
    intercept's, so that a move along the ridge ``beta_0 + c``, ``u - c``, which leaves every ``eta``, adds nothing);
    with the proxy's per-level cubic sums, the third-order cross term ``sum_i t_i s_i^2 x_i . dbeta / 2`` is made exact
    (the interpolant weighs ``x`` by ``h``, the term by ``t``: without it the slopes' step from a subsample's mode was
    0.7 s.d.s short at ``N = 6e4``, ``G = 50``) (traceable)."""
    db, dus, _ = proxy.deltas(theta)
    total = jnp.zeros((), theta.dtype)
    for grid in grids:
        hzz, hzx = proxy.hzz[grid.factor][:, 0, 0], proxy.hzx[grid.factor][:, 0, :]
        weight = jnp.where((hzz < 0)[:, None], hzx / jnp.where(hzz < 0, hzz, -1.0)[:, None], 0.0)
        du = (
            dus[grid.factor][:, 0] + weight @ db
        )  # the fixed effects' move seen by the level's rows: all of the intercept's
        quadratic = proxy.gz[grid.factor][:, 0] * du + 0.5 * proxy.hzz[grid.factor][:, 0, 0] * du * du
        total = total + jnp.sum(hermite(grid, du) - quadratic)
        if proxy.tzzx:  # the fixed effects' third-order cross term weighted by t, not h: exact in its leading order
            cross = proxy.tzzx[grid.factor][:, 0, 0, :] - proxy.tzzz[grid.factor][:, 0, 0, :] * weight
            total = total + 0.5 * jnp.sum(du * du * (cross @ db))
    return total
