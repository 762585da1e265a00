"""The one streamed pass behind the GLMM proxy: each row's Taylor coefficients in ``(eta, phi)`` at the centre, summed
into the proxy's sufficient statistics (``control_variates.glmm``).

Per row, with ``f_i(eta, phi)`` the family's log-density of ``y_i``: ``a_i = df/deta``, ``b_i = df/dphi`` (e,),
``h_i = d2f/deta2``, ``m_i = d2f/deta dphi`` (e,), ``K_i = d2f/dphi2`` (e, e), all at ``(eta_i(c), phi(c))``. Sums:
global ``gx = sum a x``, ``hxx = sum h x x'``, ``mx = sum x m'``, ``gphi = sum b``, ``kphi = sum K``; per factor and
level (segment sums by the level code) ``gz = sum a z``, ``hzx = sum h z x'``, ``hzz = sum h z z'``, ``mz = sum z m'``,
and with ``t_i = d3f/deta3`` the per-level cubic's ``tzzz = sum t z z z`` and ``tzzx = sum t z z x``, and where
``x_cubic`` allows ``tzxx = sum t z x x'`` per level and ``txxx = sum t x x x`` over all rows (the cubic in ``x . dbeta``);
per pair of factors and observed pair of levels ``sum h z_f z_f'^T``. Device arrays stay O(G k (p + k + e)); the pair
sums are reduced on the host to the pairs that occur (at most ``min(N, G_f G_f')``).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.arrays import DataSource, slice_rows
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import GLMMLayout
from minibatch_mcmc.models.glmm import linear_predictor, split_theta
from minibatch_mcmc.models.glmm_families import SHARED, shared_log_density
from minibatch_mcmc.models.shared_term import value_difference


class NonFiniteSums(ValueError):
    """The GLMM proxy's sums at a centre overflow (a row's log-density or its derivatives are not finite there)."""


PyTree = Any


def row_coefficients(
    density: Callable, eta: jax.Array, phi: jax.Array, rows: PyTree
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(f_i (b,), gradient (b, 1 + e), Hessian (b, 1 + e, 1 + e))`` of each row's log-density in ``(eta_i, phi)``.

    Row ``i`` depends on ``eta`` only through ``eta_i``, so a tangent of ones in ``eta`` gives every row's ``eta``
    derivative at once; ``phi`` is shared, so a unit tangent in ``phi_j`` gives every row's ``phi_j`` derivative."""
    e = phi.shape[0]
    tangents = [(jnp.ones_like(eta), jnp.zeros_like(phi))] + [
        (jnp.zeros_like(eta), jnp.eye(e, dtype=phi.dtype)[j]) for j in range(e)
    ]

    def f(et: jax.Array, ph: jax.Array) -> jax.Array:
        return density(et, ph, rows)

    def slope(t):
        return lambda et, ph: jax.jvp(f, (et, ph), t)[1]

    value = f(eta, phi)
    grad = jnp.stack([slope(t)(eta, phi) for t in tangents], axis=-1)
    hess = jnp.stack(
        [jnp.stack([jax.jvp(slope(s), (eta, phi), t)[1] for t in tangents], axis=-1) for s in tangents], axis=-2
    )
    return value, grad, hess


def row_quadratic(grad: jax.Array, hess: jax.Array, delta: jax.Array, dphi: jax.Array) -> jax.Array:
    """``q_i - f_i(c)`` per row from its ``(eta, phi)`` gradient and Hessian: ``a delta + b . dphi + h delta^2 / 2 +
    delta m . dphi + dphi' K dphi / 2``, the shared ``dphi`` kept unbroadcast (jax 0.10.2's CPU compiler, jitted and vmapped
    over four or more moves, miscompiled the form on a per-row ``(delta, dphi)`` step, O(1) off per row: issue 31)."""
    m = 0.5 * (hess[:, 0, 1:] + hess[:, 1:, 0])
    lin = delta * (grad[:, 0] + 0.5 * hess[:, 0, 0] * delta + m @ dphi) + grad[:, 1:] @ dphi
    return lin + 0.5 * ((hess[:, 1:, 1:] @ dphi) @ dphi)


def eta_third(density: Callable, eta: jax.Array, phi: jax.Array, rows: PyTree) -> jax.Array:
    """``t_i = d3 f_i / d eta_i^3`` at ``(eta_i, phi)`` for each row (three tangents of ones in ``eta``: rows are independent)."""
    ones = jnp.ones_like(eta)

    def f(et: jax.Array) -> jax.Array:
        return density(et, phi, rows)

    def d1(et: jax.Array) -> jax.Array:
        return jax.jvp(f, (et,), (ones,))[1]

    def d2(et: jax.Array) -> jax.Array:
        return jax.jvp(d1, (et,), (ones,))[1]

    return jax.jvp(d2, (eta,), (ones,))[1]


MAX_CUBIC_CELLS = 1 << 23
"""Most entries of ``tzxx`` and ``txxx`` together (``G k p^2 + p^3``; 32 MiB of float32) for which the proxy carries the
cubic's terms in ``x . dbeta`` (``x_cubic``); past it the per-level cubic has its terms in the level's move alone."""


def shared_remainder_change(family: str, phi_c: jax.Array, phi0: jax.Array, phi1: jax.Array) -> jax.Array:
    """``[s(phi1) - s(phi0)] - [t(phi1) - t(phi0)]``: the change of the remainder of the family's ``phi``-only part ``s``
    (``glmm_families.shared_log_density``) after its quadratic ``t`` at ``phi_c``, the same for every row; the first
    difference by ``models.shared_term.value_difference`` (float32-accurate relative to itself, not to ``s``)."""

    def s(phi: jax.Array) -> jax.Array:
        return shared_log_density(family, phi)

    g, k = jax.grad(s)(phi_c), jax.hessian(s)(phi_c)
    d0, d1 = phi0 - phi_c, phi1 - phi_c
    return value_difference(s, phi0, phi1) - (jnp.dot(g, d1 - d0) + 0.5 * jnp.dot(d1 - d0, k @ (d1 + d0)))


def with_shared(
    layout: GLMMLayout, centre: jax.Array, rows_change: jax.Array, current: jax.Array, candidate: jax.Array
) -> jax.Array:
    """``rows_change`` plus, for a family with a ``phi``-only part, its ``shared_remainder_change`` between two flat
    parameters around ``centre``, the same for every row (the row parts read each parameter's own ``phi``:
    ``phi_c + dphi``'s one rounding would move every row's alike); ``rows_change`` itself for the other families."""
    if layout.family not in SHARED:
        return rows_change
    phi0, phi1 = split_theta(layout, current)[2], split_theta(layout, candidate)[2]
    phi_c = split_theta(layout, centre.astype(phi0.dtype))[2]
    return rows_change + shared_remainder_change(layout.family, phi_c, phi0, phi1)


def x_cubic(layout: GLMMLayout) -> bool:
    """Whether the per-level cubic has all its terms (``tzxx``, ``txxx``: at most ``MAX_CUBIC_CELLS`` entries)."""
    p = layout.fixed
    return p**3 + sum(g * k * p * p for g, k in zip(layout.levels, layout.columns)) <= MAX_CUBIC_CELLS


def segment(values: jax.Array, codes: jax.Array, levels: int) -> jax.Array:
    """Sum of ``values`` (rows first) over the rows of each level."""
    return jax.ops.segment_sum(values, codes, num_segments=levels)


def sums_program(layout: GLMMLayout, density: Callable) -> Callable[[PyTree, tuple], dict]:
    """Jitted ``(rows, (beta, us, phi)) -> chunk_sums``: the centre an argument, so one compilation per chunk shape serves
    every centre (a program built per centre recompiled at each of the mode search's proxies: docs/benchmarks.md, the
    GLMM mode search's seconds)."""
    return jax.jit(lambda rows, centre_split: chunk_sums(layout, density, *centre_split)(rows))


def chunk_sums(
    layout: GLMMLayout, density: Callable, beta: jax.Array, us: tuple, phi: jax.Array
) -> Callable[[PyTree], dict]:
    """Per chunk of rows: its fixed-shape sums, and per pair of factors each row's ``h z_f z_f'^T`` (reduced on the host)."""

    full = x_cubic(layout)

    def part(rows: PyTree) -> dict:
        eta = linear_predictor(layout, beta, us, rows)
        value, grad, hess = row_coefficients(density, eta, phi, rows)
        a, h, m = grad[:, 0], hess[:, 0, 0], hess[:, 0, 1:]
        t = eta_third(density, eta, phi, rows)
        x = rows["x"].astype(eta.dtype)
        out = {
            "value": jnp.sum(value),
            "gx": x.T @ a,
            "hxx": x.T @ (h[:, None] * x),
            "mx": x.T @ m,
            "gphi": jnp.sum(grad[:, 1:], axis=0),
            "kphi": jnp.sum(hess[:, 1:, 1:], axis=0),
        }
        zs = [rows[f"z_{f}"].astype(eta.dtype) for f in range(len(layout.levels))]
        for f, (z, g) in enumerate(zip(zs, layout.levels)):
            codes = rows[f"g_{f}"]
            out[f"gz_{f}"] = segment(a[:, None] * z, codes, g)
            out[f"hzx_{f}"] = segment((h[:, None] * z)[:, :, None] * x[:, None, :], codes, g)
            out[f"hzz_{f}"] = segment((h[:, None] * z)[:, :, None] * z[:, None, :], codes, g)
            out[f"mz_{f}"] = segment(z[:, :, None] * m[:, None, :], codes, g)
            tzz = (t[:, None] * z)[:, :, None] * z[:, None, :]
            out[f"tzzz_{f}"] = segment(tzz[:, :, :, None] * z[:, None, None, :], codes, g)
            out[f"tzzx_{f}"] = segment(tzz[:, :, :, None] * x[:, None, None, :], codes, g)
            if full:
                txx = (t[:, None] * x)[:, :, None] * x[:, None, :]
                out[f"tzxx_{f}"] = segment(z[:, :, None, None] * txx[:, None, :, :], codes, g)
        if full:
            out["txxx"] = jnp.einsum("i,ia,ib,ic->abc", t, x, x, x)
        gaps = [jnp.sum(jnp.abs(x[:, j] - zs[f][:, l])) for j, f, l in ridge_candidates(layout)]
        out["ridge_gap"] = jnp.stack(gaps) if gaps else jnp.zeros(0, eta.dtype)
        for f, f2 in itertools.combinations(range(len(zs)), 2):
            out[f"pair_{f}_{f2}"] = (h[:, None] * zs[f])[:, :, None] * zs[f2][:, None, :]
        return out

    return part


def ridge_candidates(layout: GLMMLayout) -> list[tuple[int, int, int]]:
    """Every ``(j, f, l)``: fixed column ``j`` against factor ``f``'s effect column ``l`` (``ridge_gap``'s order)."""
    return [(j, f, l) for f, k in enumerate(layout.columns) for l in range(k) for j in range(layout.fixed)]


def ridge_pairs(layout: GLMMLayout, sums: dict) -> tuple:
    """The ``(j, f, l)`` whose columns are equal on every row (``ridge_gap`` 0: ``eta`` is unchanged along
    ``beta_j + c``, ``u_f[:, l] - c``), each fixed column and each effect column in one pair at most, the first found."""
    pairs, used = [], set()
    for (j, f, l), gap in zip(ridge_candidates(layout), np.asarray(sums["ridge_gap"]).reshape(-1)):
        if gap == 0.0 and j not in used and (f, l) not in used:
            pairs.append((j, f, l))
            used.update((j, (f, l)))
    return tuple(pairs)


def on_ridge(ridge: tuple, v: tuple) -> tuple:
    """``v = (dbeta, (du_f, ...), dphi)`` with each ``ridge`` pair's ``dbeta_j`` moved into every level's ``du_f[:, l]``:
    the same ``delta_i`` on every row, but the proxy's sums then no longer add the large, cancelling terms of a move
    along the intercept-effect ridge (``B``'s ``hxx`` and ``hzx`` parts, each about ``N dbeta_j^2``) in float32."""
    if not ridge:
        return v
    db, dus, dphi = v
    dus = list(dus)
    for j, f, l in ridge:
        dus[f] = dus[f].at[:, l].add(db[j])
    return db.at[np.array([j for j, _, _ in ridge])].set(0.0), tuple(dus), dphi


def reduce_pairs(keys: np.ndarray, sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (sorted) and the sum of ``sums`` over each."""
    distinct, inverse = np.unique(keys, return_inverse=True)
    total = np.zeros((distinct.size,) + sums.shape[1:], np.float64)
    np.add.at(total, inverse.reshape(-1), sums)
    return distinct, total


def streamed_sums(
    layout: GLMMLayout,
    density: Callable,
    centre_split: tuple,
    source: DataSource,
    chunk: int = DEFAULT_CHUNK,
    each: Callable[[PyTree, int], None] | None = None,
    program: Callable | None = None,
) -> dict:
    """Every sum of the module docstring over all rows, in float64, from one pass over ``source`` in chunks of ``chunk`` rows.

    Pair sums come back as ``pair_<f>_<f'>``: ``(levels of f, levels of f', sums (P, k_f, k_f'))`` over the observed pairs.
    ``each(rows, start)``, if given, is called on every chunk read (another reduction made by the same pass). A sum that
    is not finite raises ``NonFiniteSums``. ``program``: ``sums_program(layout, density)``, built once by a caller that
    reads several centres (else built here)."""
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r} must be a positive number of rows")
    program = sums_program(layout, density) if program is None else program
    centre = tuple(centre_split)

    def part(rows: PyTree) -> dict:
        return program(rows, centre)

    pairs = list(itertools.combinations(range(len(layout.levels)), 2))
    total: dict | None = None
    pair_acc = {p: (np.zeros(0, np.int64), np.zeros((0, layout.columns[p[0]], layout.columns[p[1]]))) for p in pairs}
    data = source.arrays()
    for start in range(0, source.n, chunk):
        size = min(chunk, source.n - start)
        rows = slice_rows(data, start, size)
        if each is not None:
            each(rows, start)
        piece = jax.device_get(part(rows))
        fixed = {k: np.asarray(v, np.float64) for k, v in piece.items() if not k.startswith("pair_")}
        total = fixed if total is None else {k: total[k] + v for k, v in fixed.items()}
        for f, f2 in pairs:
            codes = jax.device_get((rows[f"g_{f}"], rows[f"g_{f2}"]))
            key = np.asarray(codes[0], np.int64) * layout.levels[f2] + np.asarray(codes[1], np.int64)
            old_keys, old_sums = pair_acc[(f, f2)]
            pair_acc[(f, f2)] = reduce_pairs(
                np.concatenate([old_keys, key]),
                np.concatenate([old_sums, np.asarray(piece[f"pair_{f}_{f2}"], np.float64)]),
            )
    if total is None:
        raise ValueError("the GLMM proxy needs at least one row of data")
    for (f, f2), (keys, sums) in pair_acc.items():
        total[f"pair_{f}_{f2}"] = (keys // layout.levels[f2], keys % layout.levels[f2], sums)
    for name, value in total.items():
        if not all(np.all(np.isfinite(a)) for a in (value[2:] if name.startswith("pair_") else (value,))):
            raise NonFiniteSums(
                f"the GLMM proxy's full-data sum {name!r} at the centre is not finite: the centre lies where "
                "some row's log-likelihood or its derivatives overflow; start the warm-up elsewhere"
            )
    return total


def cubic_terms(sums: dict, factors: int, cubic_info: float | None, cast: Callable) -> dict:
    """``GLMMProxy``'s ``tzzz``, ``tzzx`` (``tzxx``, ``txxx`` where ``x_cubic``) and ``cubic``: the levels whose every
    effect has ``cubic_info`` units of information keep their cubic sums, the others 0 (none for ``cubic_info=None``)."""
    if cubic_info is None:
        return {}
    masks = [
        np.all(-np.diagonal(sums[f"hzz_{f}"], axis1=1, axis2=2) >= cubic_info, axis=1).astype(np.float64)
        for f in range(factors)
    ]
    return {
        "tzzz": tuple(cast(sums[f"tzzz_{f}"] * m[:, None, None, None]) for f, m in enumerate(masks)),
        "tzzx": tuple(cast(sums[f"tzzx_{f}"] * m[:, None, None, None]) for f, m in enumerate(masks)),
        "tzxx": tuple(cast(sums[f"tzxx_{f}"] * m[:, None, None, None]) for f, m in enumerate(masks) if "txxx" in sums),
        "txxx": (cast(sums["txxx"]),) if "txxx" in sums else (),
        "cubic": tuple(cast(m) for m in masks),
    }
