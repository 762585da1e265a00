"""A GLMM's mode from its own structure: Newton steps on its proxy in predictor space, on a subsample, then on full passes
that are also the proxy's and the influence search's first round.

The generic lean search (``warmup.lean``) reaches a GLMM's mode through minibatch Adam, a dense ``jax.hessian`` over rows
and trust-region passes; at ``N = 2e5``, ``G = 10^3`` its mode, proxy and influence phases read 7.4 passes over ``N``.
Here one pass at a point ``c`` is the GLMM proxy's (``control_variates.glmm_proxy``): its sums give the log-likelihood's
exact gradient and Hessian at ``c``; the prior is exact. So the data-free surrogate ``log p0 + proxy_sum`` is climbed by
trust-region Newton (``optim.trust_region``, in its own Laplace s.d.s) between passes: IRLS for a GLMM with its priors.

1. Subsample: ``subsample_rows(N)`` rows (``SUB_SHARE`` of ``N``), their second-order proxy scaled by ``N / m`` (one read
   of the subsample per iteration: the proxy at the trial point gives the value that accepts it, and the next step),
   climbed until the Newton decrement is at most ``SUB_DECREMENT`` (at most ``SUB_ITERATIONS`` reads): a point about
   ``sqrt(N / m - 1)`` s.d.s per coordinate from the mode, the worst of ``G`` levels several times that.
2. Full passes: each builds the proxy at its point and reads every row's residual at the influence probes (``Probes``;
   the shape of the last concave Hessian), so the converged pass is also the proxy pass and the influence search's
   first round. The first one also reads each one-column factor's per-level log-likelihood on a grid of effect shifts
   (``glmm_levels``), and the step from it climbs the surrogate with each level's own nonlinearity in (a second-order
   step from the subsample's mode leaves the worst levels a few s.d.s off, and a third pass). Stop where every
   coordinate's Newton step is at most ``PROXY_STEP`` of its Laplace s.d. (``near_mode``), else climb and pass
   at the climb's end, accepted where the log posterior rose by a fair share of the prediction
   (``optim.trust_region.gain``). Logistic, ``N = 2e4``, ``G = 50``: the largest coordinate step 5.7 s.d.s at the first
   pass, 0.19 at the second with the grids (1.14, then 0.002 at a third pass, without).
3. The mode: the last pass's proxy is kept (centred at its point), and the mode and Laplace fit are those of its
   surrogate, climbed without data (``polish``: an IRLS step from the pass's exact gradient and Hessian). The issue's
   16-group shape at ``N = 1e5``: the second pass's largest coordinate step 0.365 s.d.s; a third pass there (the rule
   before, stopping at ``COORDINATE_STEP``) moved the point to where the climb ends, 0.007 s.d.s from the next step.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates.glmm import CUBIC_INFO, GLMMProxy, PairBlock, glmm_proxy
from minibatch_mcmc.control_variates.influence import (
    ProbeRound,
    kept_rows,
    probe_plan,
    probe_points,
    probe_residuals,
    probe_steps,
    rounding_floor,
    term_scale,
)
from minibatch_mcmc.control_variates.top_deviations import add_deviations, sorted_top
from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import ModeResult
from minibatch_mcmc.optim.trust_region import concave_factor, decrement, gain, length_in, next_radius, trust_step
from minibatch_mcmc.warmup.glmm_levels import LevelGrid, grid_knots, grid_reader, level_correction
from minibatch_mcmc.warmup.lean import BULK_ROWS, laplace_factor
from minibatch_mcmc.warmup.subsample_newton import subsample_index

PyTree = Any

SUB_SHARE = 1 / 16
"""Rows of the subsample as a share of ``N`` (at least ``MIN_SUB``)."""
MIN_SUB = 4096
SUB_ITERATIONS = 12
"""Most subsample proxies (each reads the subsample once)."""
SUB_DECREMENT = 0.5
"""Newton decrement (subsample Laplace s.d.s) at which the subsample phase stops."""
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
GRID_REACH = 2.0
"""The climb with the levels' grids may go this many times the quadratic Newton step's length (in the Laplace s.d.s at its
start): each level's own optimum lies past the quadratic's where the log-likelihood flattens (the gain test still
decides)."""
CLIMB_DECREMENT = 0.02
"""Newton decrement at which a climb on the surrogate stops."""
SCALED = ("gx", "hxx", "mx", "gphi", "kphi", "gz", "hzx", "hzz", "mz", "tzzz", "tzzx")
"""The proxy's sums (each a sum over rows): scaled by ``N / m`` for a subsample's."""
ARRAYS = ("centre",) + SCALED + ("cubic",)
"""The proxy's array fields: arguments of the compiled surrogate, so one compilation serves every proxy."""


class GLMMMode(NamedTuple):
    """The mode, its proxy (the last full pass's) and the cost."""

    mode: ModeResult
    proxy: GLMMProxy
    passes: int
    """Full passes over ``N``."""
    subsample_rows: int
    """Rows the subsample proxies read."""
    probe: ProbeRound | None = None
    """The first influence round, read by the last full pass (``control_variates.influence.influential_rows``' ``first``)."""


def subsample_rows(n: int) -> int:
    """``SUB_SHARE * N`` rows, at least ``MIN_SUB``, at most ``N``."""
    return int(min(n, max(MIN_SUB, int(SUB_SHARE * n))))


def scaled(proxy: GLMMProxy, factor: float) -> GLMMProxy:
    """``proxy`` with every sum times ``factor`` (a subsample's proxy as an estimate of the full data's)."""
    sums = {k: jax.tree_util.tree_map(lambda a: a * factor, getattr(proxy, k)) for k in SCALED}
    pairs = tuple(p._replace(hzz=p.hzz * factor) for p in proxy.pairs)
    return proxy._replace(**sums, pairs=pairs, log_lik=proxy.log_lik * factor)


def surrogate(model: Model, template: GLMMProxy, temperature: float, grid_factors: tuple = ()) -> Callable:
    """Jitted ``(x, arrays) -> (value, gradient, Hessian)`` of ``log p0(x) + proxy_sum(x) / temperature`` (``arrays``: a
    proxy's ``ARRAYS`` fields; ``template`` gives the rest), with ``grid_factors`` the levels' grids in
    (``glmm_levels.level_correction``; their arrays under ``"grids"``)."""

    def value(x: jax.Array, arrays: dict) -> jax.Array:
        pairs = tuple(PairBlock(t.first, t.second, *a) for t, a in zip(template.pairs, arrays["pairs"]))
        rest = {k: v for k, v in arrays.items() if k not in ("pairs", "grids")}
        proxy = template._replace(**rest, pairs=pairs)
        total = proxy.proxy_sum(x)
        if grid_factors:
            grids = tuple(LevelGrid(f, *a) for f, a in zip(grid_factors, arrays["grids"]))
            total = total + level_correction(proxy, grids, x)
        return model.log_prior(x) + total / temperature

    def all_three(x: jax.Array, arrays: dict):
        v, g = jax.value_and_grad(value)(x, arrays)
        return v, g, jax.hessian(value)(x, arrays)

    return jax.jit(all_three)


def fields(proxy: GLMMProxy) -> dict:
    """A proxy's ``ARRAYS`` fields, and its pair blocks' arrays (``"pairs"``)."""
    return {**{k: getattr(proxy, k) for k in ARRAYS}, "pairs": tuple((p.rows, p.cols, p.hzz) for p in proxy.pairs)}


def climb(fn: Callable, arrays: dict, x0: np.ndarray, radius: float, dtype) -> tuple[np.ndarray, float, tuple]:
    """Trust-region Newton on the data-free surrogate from ``x0`` within ``radius`` of its Laplace s.d.s at ``x0``: the end,
    the rise it predicts, and ``(value, gradient, Hessian)`` at ``x0`` (float64)."""

    def at(x: np.ndarray) -> tuple:
        v, g, h = fn(jnp.asarray(x, dtype), arrays)
        return float(v), np.asarray(g, np.float64), np.asarray(h, np.float64)

    start = at(x0)
    x, current, inner, from_start = np.asarray(x0, np.float64), start, radius, length_in(start[2])
    for _ in range(CLIMB_STEPS):
        s = trust_step(current[1], current[2], inner)  # its decrement: ``decrement``'s, one factorisation for both
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


def converged(grad: np.ndarray, hessian: np.ndarray, limit: float) -> bool:
    """A strictly concave point (``concave_factor``) within ``limit`` Laplace s.d.s of its local quadratic's mode."""
    return concave_factor(hessian) is not None and decrement(grad, hessian) <= limit


def coordinate_steps(grad: np.ndarray, hessian: np.ndarray) -> float:
    """The largest Newton step in one coordinate, in that coordinate's Laplace s.d. (inf where not strictly concave):
    from the Cholesky factor ``L`` of ``-H``, the step ``L'^{-1} L^{-1} g`` and the variances, the column sums of
    ``L^{-1}``'s squares (no eigendecomposition, no inverse)."""
    factor = concave_factor(hessian)
    if factor is None:
        return float("inf")
    white = scipy.linalg.solve_triangular(factor, np.eye(factor.shape[0]), lower=True)  # L^{-1}
    step = white.T @ (white @ grad)
    return float(np.max(np.abs(step) / np.sqrt(np.sum(white**2, axis=0))))


def at_mode(grad: np.ndarray, hessian: np.ndarray) -> bool:
    """Each coordinate within ``COORDINATE_STEP`` of its Laplace s.d. from the local quadratic's mode.

    A row's residual depends on its own level's effects and ``beta`` only, so what sets the proxy's residuals is each
    coordinate's distance, not the joint one (``sqrt(d)`` times larger for errors spread over the levels, as Newton's are)."""
    return coordinate_steps(grad, hessian) <= COORDINATE_STEP


def near_mode(grad: np.ndarray, hessian: np.ndarray) -> bool:
    """Each coordinate within ``PROXY_STEP`` of its Laplace s.d. from the local quadratic's mode: the pass's proxy is kept."""
    return coordinate_steps(grad, hessian) <= PROXY_STEP


def polish(
    fn: Callable, proxy: GLMMProxy, x: np.ndarray, grad: np.ndarray, hessian: np.ndarray, dtype, temperature: float
) -> tuple:
    """The second-order surrogate's maximum from ``x`` (the last pass's point, ``near_mode``) and its ``(value, gradient,
    Hessian)`` there (float64, the value with ``proxy``'s ``log_lik``): the proxy posterior's mode and Laplace fit, no data
    read. At ``x`` itself where it is already ``at_mode``."""
    if at_mode(grad, hessian):
        return x, evaluate(fn, proxy, x, dtype, temperature)
    end, _ = full_climb(fn, proxy, x, max(2.0 * decrement(grad, hessian), 1e-3), dtype)
    return end, evaluate(fn, proxy, end, dtype, temperature)


def second_order(proxy: GLMMProxy) -> GLMMProxy:
    """``proxy`` without its per-level cubic."""
    return proxy._replace(tzzz=(), tzzx=(), cubic=())


def full_climb(fn: Callable, proxy: GLMMProxy, x: np.ndarray, radius: float, dtype) -> tuple[np.ndarray, float]:
    """The second-order surrogate's climb from ``x`` (IRLS with the priors) and its predicted rise. Not the cubic one:
    from a subsample's mode, several s.d.s out per level, its climb reaches the cubic's spurious maxima
    (``control_variates.glmm.CUBIC_INFO``) and predicted 7,180 where the log posterior rose by 921 (``N = 2e5``,
    ``G = 200``), while the second-order climb predicted 1,504 for a rise of 1,510."""
    end, predicted, _ = climb(fn, fields(second_order(proxy)), x, radius, dtype)
    return end, predicted


class Probes(NamedTuple):
    """The influence probes one full pass reads besides the proxy's sums (``control_variates.influence``)."""

    resid: Callable
    """Jitted ``(rows, centre, cubic masks, points) -> (residuals (P, rows), term scale)``."""
    bulk_rows: PyTree
    """``BULK_ROWS`` rows drawn once: each probe's median residual over them is its bulk level."""
    bulk_count: int
    keep: int
    key: jax.Array


def probes(model: Model, source: DataSource, template: GLMMProxy, key: jax.Array) -> Probes:
    """The probe residuals' one compiled function and the bulk rows (``lean.BULK_ROWS`` of them, tiled to a chunk of the
    pass: one compilation for both)."""
    n = source.n
    chunk = min(DEFAULT_CHUNK, n)
    idx = probe_plan(np.eye(1), key, n, min(BULK_ROWS, chunk))[1]

    def resid(rows: PyTree, c: jax.Array, masks: tuple, points: jax.Array):
        proxy = template._replace(centre=c, cubic=masks)
        return probe_residuals(model, proxy, points, rows), term_scale(model, c, lambda x: x, rows)

    rows = take(source.arrays(), jnp.asarray(np.resize(idx, chunk), jnp.int32))
    return Probes(jax.jit(resid), rows, int(idx.size), kept_rows(n), key)


def sub_climb(
    model: Model, sample: PyTree, n: int, fn: Callable, proxy: GLMMProxy, x: np.ndarray, dtype, temperature: float
) -> tuple:
    """Trust-region IRLS on ``sample``'s proxies scaled to ``N`` rows (``proxy``: the one at ``x``) until the Newton decrement
    is at most ``SUB_DECREMENT`` (at most ``SUB_ITERATIONS`` proxies): the end, its proxy, the surrogate's ``(value,
    gradient, Hessian)`` there, and the rows read (one read of ``sample`` per proxy after ``proxy``)."""
    m = int(np.shape(jax.tree_util.tree_leaves(sample)[0])[0])
    value, g, h = evaluate(fn, proxy, x, dtype, temperature)
    read, radius = 0, None
    for _ in range(SUB_ITERATIONS):
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(h))) or converged(g, h, SUB_DECREMENT):
            break
        radius = max(decrement(g, h), 1e-3) if radius is None else radius
        trial, predicted, _ = climb(fn, fields(proxy), x, radius, dtype)
        new = scaled(glmm_proxy(model, sample, jnp.asarray(trial, dtype), cubic_info=None), n / m)
        v_new, g_new, h_new = evaluate(fn, new, trial, dtype, temperature)
        read += m
        taken, ratio = gain(value, v_new if np.isfinite(v_new) else np.nan, predicted)
        radius = next_radius(radius, ratio, min(length_in(h)(trial - x), radius))
        if taken:
            x, proxy, value, g, h = trial, new, v_new, g_new, h_new
    return x, proxy, (value, g, h), read


def cubic_masks(proxy: GLMMProxy) -> tuple:
    """Per factor, 1 for the levels with ``CUBIC_INFO`` of information in every effect (``glmm_sums.cubic_terms``' rule)."""
    return tuple(
        jnp.asarray(np.all(-np.diagonal(np.asarray(h), axis1=1, axis2=2) >= CUBIC_INFO, axis=1), proxy.centre.dtype)
        for h in proxy.hzz
    )


def evaluate(fn: Callable, proxy: GLMMProxy, x: np.ndarray, dtype, temperature: float) -> tuple:
    """The log posterior at ``proxy``'s centre ``x`` (its pass's ``log_lik``) with its gradient and Hessian (float64)."""
    v, g, h = (np.asarray(a, np.float64) for a in fn(jnp.asarray(x, dtype), fields(second_order(proxy))))
    return float(v) + proxy.log_lik / temperature, g, h


def full_pass(
    model: Model,
    source: DataSource,
    x: np.ndarray,
    dtype,
    probe: Probes,
    masks: tuple,
    hessian: np.ndarray,
    temperature: float,
    extra: Callable | None = None,
) -> tuple[GLMMProxy, ProbeRound | None]:
    """The GLMM proxy at ``x`` from one pass, which also reads every row's residual at the influence probes ``x +- 3 L u``
    (``L`` from ``hessian``, the last one known; the cubic's levels ``masks``): the first influence round where ``x`` is
    the mode (None where ``hessian`` is not negative definite); ``extra(rows, start)``: a further reduction it feeds."""
    c = jnp.asarray(x, dtype)
    factor = laplace_factor(hessian)
    if factor is None:
        return glmm_proxy(model, source, c, each=extra), None
    steps = probe_steps(factor, probe.key)
    points = probe_points(c, steps)
    at_bulk = np.asarray(probe.resid(probe.bulk_rows, c, masks, points)[0], np.float64)[:, : probe.bulk_count]
    bulk = np.median(at_bulk, axis=1, keepdims=True)
    top = [(np.zeros(0), np.zeros(0, np.int64))]

    def each(rows: PyTree, start: int) -> None:
        e, scale = probe.resid(rows, c, masks, points)
        floor = rounding_floor(np.asarray(scale), temperature)
        top[0] = add_deviations(top[0], np.asarray(e, np.float64), bulk, start, probe.keep, temperature, floor)
        if extra is not None:
            extra(rows, start)

    proxy = glmm_proxy(model, source, c, each=each)
    dev, idx = sorted_top(top[0], probe.keep)
    return proxy, ProbeRound(steps, dev, idx, 0)  # its bulk rows counted with the pass


def glmm_mode(
    model: Model,
    source: DataSource,
    theta0: PyTree,
    key: jax.Array,
    *,
    temperature: float = 1.0,
    newton_steps: int = 10,
    probe_key: jax.Array | None = None,
) -> GLMMMode:
    """The mode of a GLMM's posterior (module docstring), its Hessian, the GLMM proxy of the last full pass there and the
    first influence round that pass read."""
    start_time = time.perf_counter()
    flat0, unravel = ravel_pytree(theta0)
    dtype, n = flat0.dtype, source.n
    m = subsample_rows(n)
    sample = take(source.arrays(), jnp.asarray(subsample_index(key, n, m), jnp.int32))
    x = np.asarray(flat0, np.float64)
    proxy = scaled(glmm_proxy(model, sample, flat0, cubic_info=None), n / m)
    fn = surrogate(model, proxy, temperature)
    x, proxy, (value, g, h), read = sub_climb(model, sample, n, fn, proxy, x, dtype, temperature)
    rows = m + read
    probe = probes(model, source, proxy, jax.random.key(0) if probe_key is None else probe_key)
    masks = cubic_masks(proxy)
    passes, taken_steps, radius = 1, 0, None
    knots = grid_knots(proxy, x, float(np.sqrt(max(n / m - 1.0, 0.0))))
    glmm = model.glmm
    reader = grid_reader(glmm.layout, glmm.row_log_density, glmm.split(jnp.asarray(x, dtype)), knots, dtype)
    sub_h = h
    proxy, found = full_pass(model, source, x, dtype, probe, masks, h, temperature, reader[0] if knots else None)
    grids = reader[1]() if knots else ()
    fn_grid = surrogate(model, proxy, temperature, tuple(g.factor for g in grids)) if grids else None
    value, g, h = evaluate(fn, proxy, x, dtype, temperature)
    shape = h if laplace_factor(h) is not None else sub_h  # the probes' Laplace shape: the last concave one
    while passes <= 2 * newton_steps and taken_steps < newton_steps and not near_mode(g, h):
        radius = max(decrement(g, h), 1e-3) if radius is None else radius
        if grids:  # from the subsample's mode: each level's own log-likelihood on its grid (glmm_levels)
            arrays = {**fields(proxy), "grids": tuple(tuple(gr)[1:] for gr in grids)}  # its cubic sums: the cross term
            trial, predicted, _ = climb(fn_grid, arrays, x, GRID_REACH * radius, dtype)
        else:
            trial, predicted = full_climb(fn, proxy, x, radius, dtype)
        new, new_found = full_pass(model, source, trial, dtype, probe, cubic_masks(proxy), shape, temperature)
        passes += 1
        v_new, g_new, h_new = evaluate(fn, new, trial, dtype, temperature)
        ok, ratio = gain(value, v_new if np.isfinite(v_new) else np.nan, predicted)
        radius = next_radius(radius, ratio, min(length_in(h)(trial - x), radius))
        if ok:
            x, proxy, found, value, g, h, taken_steps = trial, new, new_found, v_new, g_new, h_new, taken_steps + 1
            grids = ()  # centred on the point left
            shape = h if laplace_factor(h) is not None else shape
        if radius < 1e-8:
            break
    near = near_mode(g, h)
    top, (value, g, h) = polish(fn, proxy, x, g, h, dtype, temperature) if near else (x, (value, g, h))
    mode = ModeResult(
        theta_hat=unravel(jnp.asarray(top, dtype)),
        log_posterior=value,
        grad_norm=float(np.linalg.norm(g)),
        hessian=h,
        data_used=rows + passes * (n + probe.bulk_count),
        seconds=time.perf_counter() - start_time,
        newton_steps_taken=taken_steps,
        converged=near and at_mode(g, h),
        gradient=g,
    )
    return GLMMMode(mode, proxy, passes, rows, found)
