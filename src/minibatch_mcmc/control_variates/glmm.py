"""The GLMM proxy: a second-order Taylor proxy in predictor space, ``(eta_i, phi)``, with group-level sums.

A GLMM's row log-likelihood is ``l_i(theta) = f_i(eta_i, phi)`` (``models.glmm``). Around the centre ``c`` each row
gets the quadratic

    q_i(theta) = f_i(c) + a_i delta_i + b_i . dphi + (1/2) h_i delta_i^2 + delta_i m_i . dphi + (1/2) dphi' K_i dphi,

``delta_i = eta_i(theta) - eta_i(c) = x_i . dbeta + sum_f z_fi . du_f[g_f(i)]``, with ``dbeta = beta - beta_c``,
``du_f = u_f(theta) - u_f(c)`` (the effects on the ``eta`` scale, whatever the parameterisation: ``u_f = sd_f a_f``
when non-centred), ``dphi = phi - phi_c``. ``delta_i`` is linear in ``v = (dbeta, du_1, ..., dphi)``, so
``sum_i q_i = const + L(v) + B(v, v) / 2`` with a linear form ``L`` and a symmetric bilinear form ``B`` whose
coefficients are the sums of ``control_variates.glmm_sums`` (global ``x`` blocks, per level the ``z``, ``z x'`` and
``z z'`` blocks, per observed pair of levels of two factors a ``z_f z_f'`` block): memory and cost
``O(G k (p + k) + p^2)``, no ``d x d`` matrix, no data read after the pass.

Unlike the dense Taylor proxy in ``theta`` (``taylor.py``), this quadratic is exact along the ridge of a non-centred
model: a move of ``(sd_f, a_f)`` that keeps ``u_f = sd_f a_f`` (and ``beta``) leaves every ``delta_i``, hence every
``q_i``, unchanged, as it leaves the likelihood. Against ``theta`` a centred model's ``eta`` is linear, and the
proxy equals the dense Taylor proxy term by term.

For the test (``known_sum`` and the residuals of ``log_ratio``), per level with enough data (``CUBIC_INFO``) each row's
quadratic also gets the two leading cubic terms in the level's effect move ``s_i = z_fi . du_f[g_f(i)]``:
``t_i (s_i^3 / 6 + s_i^2 a_i / 2)`` with ``t_i`` the third ``eta`` derivative at the centre and ``a_i = x_i . dbeta``
(per-level sums ``tzzz``, ``tzzx``: memory ``O(G k^2 (k + p))``), and where small (``glmm_sums.x_cubic``) the rest of
the cubic in ``s_i + a_i``: ``t s a^2 / 2`` there, ``t a^3 / 6`` on every row (``tzxx``, ``txxx``; without them a move
along the intercept-effect ridge left a residual in most rows of issue 31's 16-group table, and a capped stratum). A
level's effect moves by about ``1 / sqrt(I_g)`` at posterior scale (``I_g`` the level's information), far more than
``x . dbeta``, so the cubic remainder of a second-order proxy, ``t s^3 / 6``, puts ``~ G^3 / N`` into the minibatch
estimate's variance at fixed ``N``: the minibatch the test needs grew with ``G``. With the cubic in the known sum the
terms left are of order ``s a^2`` and ``s^4`` (variance ``~ G^4 / N^2``). The proxy posterior (``proxy_sum``, which
proxy HMC follows) stays second order: with the cubic in it proxy HMC's moves, tuned from the Laplace fit, went where
the penalty test grew its minibatch (ten times the rows per test of the cubic in the test alone, at a lower acceptance).

The test's per-row residual is ``R_i(theta') - R_i(theta)`` with ``R_i = l_i - q_i`` the remainder, computed from
``(delta_i, dphi)``: for the families without ``phi`` (bernoulli, binomial, poisson) through
``glm_families.remainder_fn``, without subtracting nearly equal numbers; for the others as
``f_i(c + (delta, dphi)) - q_i``, the same subtraction the dense Taylor proxy makes; with a ``phi``-only part (gaussian,
student-t) on the row part at ``theta``'s ``phi``, that part's remainder change added once (``glmm_sums.with_shared``).
The known sum is ``L(v' - v) + B(v' - v, v' + v) / 2``, the proxy's difference without forming either sum, each
``ridge`` pair's fixed move carried by its level effects (``glmm_sums.on_ridge``: no float32 cancellation along it).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates import glmm_sums
from minibatch_mcmc.control_variates.base import minibatch_rows, no_row_draw, plain, subtracted_rows, uses_all_rows
from minibatch_mcmc.control_variates.glm_families import remainder_fn
from minibatch_mcmc.control_variates.glmm_sums import cubic_terms, eta_third, row_coefficients, streamed_sums, x_cubic
from minibatch_mcmc.control_variates.taylor import TaylorProxy, taylor_proxy
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import GLMMLayout, Model
from minibatch_mcmc.models.glmm import effect_blocks, linear_predictor, split_theta
from minibatch_mcmc.models.glmm_families import SHARED, row_log_density, row_part

PyTree = Any
Deltas = tuple[jax.Array, tuple[jax.Array, ...], jax.Array]
"""``v = (dbeta (p,), (du_f (G_f, k_f), ...), dphi (e,))``."""
CUBIC_INFO = 10.0
"""Fewest units of data information (``-sum h z^2`` over a level's rows, each column) for a level's effects to get the
per-level cubic (module docstring): its effect then moves by at most about ``1 / sqrt(10)`` in ``eta`` per posterior s.d.,
where the cubic still follows the remainder (for a smaller level the cubic overshoots the logistic's bounded remainder in
the tails and would add residual, not remove it)."""
GLM_REMAINDER = {"bernoulli": "logistic", "binomial": "logistic", "poisson": "poisson"}
"""The families whose remainder ``glm_families`` computes from ``delta`` (the binomial's times its trials)."""


class PairBlock(NamedTuple):
    """``sum h_i z_f,i z_f',i^T`` over the rows of each observed pair of levels of factors ``first < second``."""

    first: int
    second: int
    rows: jax.Array
    """``(P,)`` the level of factor ``first``."""
    cols: jax.Array
    """``(P,)`` the level of factor ``second``."""
    hzz: jax.Array
    """``(P, k_first, k_second)``."""


class GLMMProxy(NamedTuple):
    """The proxy in predictor space around ``centre``, as sufficient statistics (module docstring)."""

    centre: jax.Array
    """The expansion point ``c`` (the model's flat parameter)."""
    layout: GLMMLayout
    gx: jax.Array
    hxx: jax.Array
    mx: jax.Array
    gphi: jax.Array
    kphi: jax.Array
    gz: tuple
    """Per factor ``(G_f, k_f)``: ``sum a z`` per level."""
    hzx: tuple
    """Per factor ``(G_f, k_f, p)``."""
    hzz: tuple
    """Per factor ``(G_f, k_f, k_f)``."""
    mz: tuple
    """Per factor ``(G_f, k_f, e)``."""
    pairs: tuple
    """``PairBlock`` per pair of factors."""
    setup_data: int
    """Rows read to build the proxy (each once)."""
    order: int = 2
    name: str = "glmm"
    row_draw = staticmethod(no_row_draw)
    subtracts_rows = staticmethod(subtracted_rows)  # ``remainders``: ``density(eta_c + delta) - value - quad - cubic``
    tzzz: tuple = ()
    """Per factor ``(G_f, k_f, k_f, k_f)``: ``sum t z z z`` per level (0 where the level has no cubic; empty: no cubic)."""
    tzzx: tuple = ()
    """Per factor ``(G_f, k_f, k_f, p)``: ``sum t z z x`` per level."""
    tzxx: tuple = ()
    """Per factor ``(G_f, k_f, p, p)``: ``sum t z x x`` per level (where ``glmm_sums.x_cubic``; else empty)."""
    txxx: tuple = ()
    """``(sum t x x x,)`` over all rows, ``(p, p, p)`` (where ``glmm_sums.x_cubic``; else empty)."""
    cubic: tuple = ()
    """Per factor ``(G_f,)``: 1 where the level's rows carry the cubic terms, else 0."""
    log_lik: float = float("nan")
    """``sum_i l_i(c)``: the log-likelihood at the centre (the GLMM mode search's trust-region test reads it)."""
    ridge: tuple = ()  # (j, f, l): fixed column j equal to factor f's column l on every row (glmm_sums.ridge_pairs)

    def flat_centre(self) -> tuple[jax.Array, Callable[[jax.Array], PyTree]]:
        """The centre as a flat vector and the function back to a parameter (the identity: GLMM parameters are flat)."""
        return ravel_pytree(self.centre)

    def deltas(self, theta: PyTree) -> Deltas:
        """``v(theta) = (beta - beta_c, u_f(theta) - u_f(c), phi - phi_c)``."""
        flat = ravel_pytree(theta)[0]
        b1, u1, p1 = split_theta(self.layout, flat)
        b0, u0, p0 = split_theta(self.layout, self.centre.astype(flat.dtype))
        return b1 - b0, tuple(a - b for a, b in zip(u1, u0)), p1 - p0

    def linear(self, v: Deltas) -> jax.Array:
        """``L(v) = sum_i a_i delta_i(v) + b_i . v_phi``."""
        db, dus, dphi = v
        total = jnp.dot(self.gx, db) + jnp.dot(self.gphi, dphi)
        return total + sum(jnp.sum(g * du) for g, du in zip(self.gz, dus))

    def bilinear(self, v: Deltas, w: Deltas) -> jax.Array:
        """``B(v, w) = sum_i h_i delta_i(v) delta_i(w) + delta_i(v) m_i . w_phi + delta_i(w) m_i . v_phi + v_phi' K_i w_phi``."""
        (vb, vu, vp), (wb, wu, wp) = v, w
        total = vb @ self.hxx @ wb + vb @ self.mx @ wp + wb @ self.mx @ vp + vp @ self.kphi @ wp
        for f in range(len(vu)):
            hzx, mz = self.hzx[f], self.mz[f]
            total = total + jnp.einsum("gk,gkp,p->", vu[f], hzx, wb) + jnp.einsum("gk,gkp,p->", wu[f], hzx, vb)
            total = total + jnp.einsum("gk,gkj,gj->", vu[f], self.hzz[f], wu[f])
            total = total + jnp.einsum("gk,gke,e->", vu[f], mz, wp) + jnp.einsum("gk,gke,e->", wu[f], mz, vp)
        for pair in self.pairs:
            f, f2 = pair.first, pair.second
            total = total + jnp.einsum("pk,pkj,pj->", vu[f][pair.rows], pair.hzz, wu[f2][pair.cols])
            total = total + jnp.einsum("pk,pkj,pj->", wu[f][pair.rows], pair.hzz, vu[f2][pair.cols])
        return total

    def cubic_sum(self, v: Deltas) -> jax.Array:
        """``sum_i t_i (s_i^3 / 6 + s_i^2 a_i / 2)`` over the rows of the levels with the cubic (module docstring)."""
        db, dus, _ = v
        total = jnp.zeros((), db.dtype)
        for du, t3, t2x in zip(dus, self.tzzz, self.tzzx):
            total = total + jnp.einsum("gabc,ga,gb,gc->", t3, du, du, du) / 6.0
            total = total + jnp.einsum("gabp,ga,gb,p->", t2x, du, du, db) / 2.0
        if self.cubic and x_cubic(self.layout):
            if not self.txxx:
                raise ValueError("a GLMM proxy saved without its tzxx/txxx sums: rebuild its warm-up")
            for du, t1 in zip(dus, self.tzxx):
                total = total + jnp.einsum("gapq,ga,p,q->", t1, du, db, db) / 2.0
            total = total + jnp.einsum("pqr,p,q,r->", self.txxx[0], db, db, db) / 6.0
        return total

    def proxy_sum(self, theta: PyTree) -> jax.Array:
        """``sum_i (q_i(theta) - l_i(c)) = L(v) + B(v, v) / 2``: the data-free approximation of the log-likelihood sum, the
        proxy posterior's (second order: the per-level cubic is the test's control variate only, ``known_sum``)."""
        v = self.deltas(theta)
        return self.linear(v) + 0.5 * self.bilinear(v, v)

    def known_sum(self, current: PyTree, candidate: PyTree) -> jax.Array:
        """``sum_i q_i(theta') - q_i(theta) = L(v' - v) + B(v' - v, v' + v) / 2`` (+ the cubic's difference)."""
        v0, v1 = self.deltas(current), self.deltas(candidate)
        r0, r1 = glmm_sums.on_ridge(self.ridge, v0), glmm_sums.on_ridge(self.ridge, v1)  # the same sums, less rounding
        diff, total = jax.tree_util.tree_map(jnp.subtract, r1, r0), jax.tree_util.tree_map(jnp.add, r1, r0)
        return self.linear(diff) + 0.5 * self.bilinear(diff, total) + self.cubic_sum(v1) - self.cubic_sum(v0)

    def row_cubic(self, v: Deltas, rows: PyTree, third: jax.Array) -> jax.Array:
        """Each row's cubic term ``t_i (s_i^3 / 6 + s_i^2 a_i / 2)`` (0 for a level without it), with ``x_cubic``
        ``+ t_i (s_i a_i^2 / 2)`` on those levels and ``t_i a_i^3 / 6`` on every row: the whole cubic in ``delta_i``."""
        db, dus, _ = v
        a = rows["x"].astype(db.dtype) @ db
        full = x_cubic(self.layout)
        out = a * a * a / 6.0 if full else jnp.zeros_like(a)
        for f, mask in enumerate(self.cubic):
            codes = rows[f"g_{f}"]
            s = jnp.sum(rows[f"z_{f}"].astype(db.dtype) * dus[f][codes], axis=-1)
            cross = s * a * a / 2.0 if full else 0.0
            out = out + mask.astype(db.dtype)[codes] * (s * s * (s / 6.0 + a / 2.0) + cross)
        return third * out

    def row_delta(self, v: Deltas, rows: PyTree) -> jax.Array:
        """``delta_i(v) = x_i . dbeta + sum_f z_fi . du_f[g_f(i)]`` (no offset: a difference)."""
        db, dus, _ = v
        return linear_predictor(self.layout._replace(offset=False), db, dus, rows)

    def remainders(self, model: Model, thetas: tuple, rows: PyTree, with_cubic: bool = True) -> list[jax.Array]:
        """``R_i(theta) = l_i(theta) - q_i(theta)`` per row for each ``theta`` in ``thetas`` (module docstring; the
        per-level cubic in ``q_i`` with ``with_cubic``, as ``known_sum`` has it, else as ``proxy_sum``)."""
        dtype = ravel_pytree(thetas[0])[0].dtype
        beta_c, us_c, phi_c = split_theta(self.layout, self.centre.astype(dtype))
        eta_c = linear_predictor(self.layout, beta_c, us_c, rows)
        family = self.layout.family

        def density(eta: jax.Array, phi: jax.Array, batch: PyTree) -> jax.Array:  # a shared part: shared_change's
            return (row_part if family in SHARED else row_log_density)(family, eta, phi, batch)

        cubed = with_cubic and bool(self.cubic)
        third = eta_third(density, eta_c, phi_c, rows) if cubed else None

        def cubic(v: Deltas) -> jax.Array | float:
            return self.row_cubic(v, rows, third) if cubed else 0.0

        out = []
        if family in GLM_REMAINDER:
            rem = remainder_fn(GLM_REMAINDER[family])
            scale = rows["trials"].astype(dtype) if family == "binomial" else 1.0
            for v in map(self.deltas, thetas):
                out.append(scale * rem(eta_c, self.row_delta(v, rows), rows["y"], 2) - cubic(v))
            return out

        value, grad, hess = row_coefficients(density, eta_c, phi_c, rows)
        for theta, v in zip(thetas, map(self.deltas, thetas)):
            delta = self.row_delta(v, rows)
            quad = glmm_sums.row_quadratic(grad, hess, delta, v[2])
            phi = split_theta(self.layout, ravel_pytree(theta)[0])[2] if family in SHARED else phi_c + v[2]
            out.append(density(eta_c + delta, phi, rows) - value - quad - cubic(v))
        return out

    def remainder(self, model: Model, theta: PyTree, rows: PyTree) -> jax.Array:
        """``l_i(theta) - q_i(theta)`` per row, up to a per-row constant (SGLD-CV's exact part, with ``proxy_sum``)."""
        rows_part = self.remainders(model, (theta,), rows, with_cubic=False)[0]
        return glmm_sums.with_shared(self.layout, self.centre, rows_part, self.centre, ravel_pytree(theta)[0])

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """Residuals ``R_i(theta') - R_i(theta)`` row by row."""

        def residual(batch: PyTree) -> jax.Array:
            r0, r1 = self.remainders(model, (current, candidate), batch)
            flat = (ravel_pytree(current)[0], ravel_pytree(candidate)[0])
            return glmm_sums.with_shared(self.layout, self.centre, r1 - r0, *flat)

        return residual

    def population(self, data: PyTree) -> PyTree:
        """Every row."""
        return data

    def population_size(self, n_data: int) -> int:
        """``N``."""
        return n_data

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> None:
        """No bounds yet (the GLM families' ``eta``-space bounds would carry over: not built)."""
        del model, current, candidate

    def log_lik_sum(
        self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int
    ) -> tuple[Callable[[PyTree], jax.Array], float]:
        """Exact full-data sum for ``batch_size=0``; else ``proxy_sum + (N / b) sum_batch R_i`` (SGLD-CV), up to a constant."""
        if uses_all_rows(batch_size, n_data):
            return plain().log_lik_sum(model, key, data, n_data, batch_size)
        return self.minibatch_estimate(model, minibatch_rows(key, data, n_data, batch_size), n_data, batch_size), 1.0

    def minibatch_estimate(
        self, model: Model, batch: PyTree, n_data: int, batch_size: int
    ) -> Callable[[PyTree], jax.Array]:
        """``theta -> proxy_sum(theta) + (N / b) sum_batch R_i(theta)`` on given rows."""

        def estimate(theta: PyTree) -> jax.Array:
            return self.proxy_sum(theta) + (n_data / batch_size) * jnp.sum(self.remainder(model, theta, batch))

        return estimate


def glmm_proxy(
    model: Model,
    data: Any,
    centre: PyTree,
    chunk: int = DEFAULT_CHUNK,
    cubic_info: float | None = CUBIC_INFO,
    each: Callable[[PyTree, int], None] | None = None,
    program: Callable | None = None,
) -> GLMMProxy:
    """The GLMM proxy of ``model`` (``model.glmm`` set) around ``centre``, from one streamed pass (sums in float64).

    Args:
        model: a GLMM (``models.glmm.glmm_model``), whose ``glmm`` field gives the layout and the row log-density.
        data: its data (arrays or any source ``data.arrays.as_data_source`` reads, out of core too).
        centre: the expansion point, usually the mode.
        chunk: rows per read of the pass.
        cubic_info: the levels with at least this much information per effect get the per-level cubic (module
            docstring, ``CUBIC_INFO``); None: a purely second-order proxy.
        each: called as ``each(rows, start)`` on every chunk the pass reads (``glmm_sums.streamed_sums``).
        program: ``glmm_sums.sums_program(layout, density)`` for callers that build many proxies (one compilation).
    """
    if model.glmm is None:
        raise ValueError(f"glmm_proxy needs a GLMM (models.glmm.glmm_model); model {model.name!r} has none")
    flat, _ = ravel_pytree(centre)
    if not np.all(np.isfinite(np.asarray(flat))):
        raise ValueError(f"the proxy centre has NaN or inf entries: {np.asarray(flat)}")
    layout, source = model.glmm.layout, as_data_source(data)
    sums = streamed_sums(layout, model.glmm.row_log_density, model.glmm.split(flat), source, chunk, each, program)
    dtype = flat.dtype if jnp.issubdtype(flat.dtype, jnp.floating) else jnp.float32
    cast = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    factors = range(len(layout.levels))
    pairs = tuple(
        PairBlock(*map(int, k.split("_")[1:]), jnp.asarray(r, jnp.int32), jnp.asarray(c, jnp.int32), cast(s))
        for k, (r, c, s) in filter(lambda item: item[0].startswith("pair_"), sums.items())
    )
    return GLMMProxy(
        centre=jnp.asarray(flat),
        layout=layout,
        gx=cast(sums["gx"]),
        hxx=cast(0.5 * (sums["hxx"] + sums["hxx"].T)),
        mx=cast(sums["mx"]),
        gphi=cast(sums["gphi"]),
        kphi=cast(0.5 * (sums["kphi"] + sums["kphi"].T)),
        gz=tuple(cast(sums[f"gz_{f}"]) for f in factors),
        hzx=tuple(cast(sums[f"hzx_{f}"]) for f in factors),
        hzz=tuple(cast(sums[f"hzz_{f}"]) for f in factors),
        mz=tuple(cast(sums[f"mz_{f}"]) for f in factors),
        pairs=pairs,
        setup_data=source.n,
        log_lik=float(sums["value"]),
        ridge=glmm_sums.ridge_pairs(layout, sums),
        **cubic_terms(sums, len(layout.levels), cubic_info, cast),
    )


def proxy_for(model: Model, data: Any, centre: PyTree, order: int = 2) -> GLMMProxy | TaylorProxy:
    """The warm-up's proxy: the GLMM proxy for a GLMM (``model.glmm`` set) at order 2, else the dense Taylor proxy.

    Args:
        model: the model.
        data: its data.
        centre: the expansion point.
        order: the proxy's order (1 or 2).
    """
    if model.glmm is not None and order == 2:
        return glmm_proxy(model, data, centre)
    return taylor_proxy(model, data, centre, order=order)


LEVEL_RATIO = 100.0
"""A level's rows join the exact stratum when their mean squared residual scale is this many times the rows' mean."""


def level_stratum(proxy: GLMMProxy, data: Any, max_rows: int = 1000, ratio: float = LEVEL_RATIO) -> np.ndarray:
    """Rows (sorted int32) of the levels whose rows carry residuals far above the rest: an exact stratum by level.

    At a posterior-scale move a row of level ``g`` moves its ``eta`` by about ``sqrt(2 v_g)``, with
    ``v_g = 1 / (I_g + 1 / sd^2)`` the effect's Laplace variance (``I_g = -sum h z^2`` from the proxy's sums, ``sd``
    at the centre), and leaves a remainder of order ``(I_g / n_g) (2 v_g)^(3/2)`` (the third derivative bounded by the
    second: exact for the logistic and Poisson log-likelihoods). Levels are taken from the largest such scale while its
    square is ``ratio`` times the mean over all rows and the stratum stays within ``max_rows``. Only the families whose
    remainder is cubic in ``eta`` (``GLM_REMAINDER``); an empty array otherwise."""
    layout = proxy.layout
    if layout.family not in GLM_REMAINDER:
        return np.zeros(0, np.int32)
    flat = np.asarray(proxy.centre, np.float64)
    log_sds = effect_blocks(layout, jnp.asarray(flat))[2]
    arrays = as_data_source(data).arrays()
    scales, counts, codes = [], [], []
    for f, (hzz, log_sd) in enumerate(zip(proxy.hzz, log_sds)):
        code = np.asarray(arrays[f"g_{f}"])
        n_g = np.bincount(code, minlength=layout.levels[f]).astype(np.float64)
        info = np.maximum(-np.diagonal(np.asarray(hzz, np.float64), axis1=1, axis2=2), 0.0)
        v = 1.0 / (info + np.exp(-2.0 * np.asarray(log_sd, np.float64))[None, :])
        scales.append(np.sum(info / np.maximum(n_g, 1.0)[:, None] * (2.0 * v) ** 1.5, axis=1))
        counts.append(n_g)
        codes.append(code)
    n = max(len(codes[0]) if codes else 0, 1)
    mean_sq = sum(np.sum(c * s**2) for c, s in zip(counts, scales)) / n
    picked = []
    ranked = ((s, f, g) for f, sc in enumerate(scales) for g, s in enumerate(sc) if counts[f][g] > 0)
    order = sorted(ranked, reverse=True)
    rows = 0
    for s, f, g in order:
        if s**2 < ratio * mean_sq or rows + counts[f][g] > max_rows:
            break
        picked.append((f, g))
        rows += int(counts[f][g])
    if not picked:
        return np.zeros(0, np.int32)
    mask = np.zeros(n, bool)
    for f, g in picked:
        mask |= codes[f] == g
    return np.flatnonzero(mask).astype(np.int32)
