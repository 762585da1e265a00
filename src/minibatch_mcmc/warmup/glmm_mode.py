"""A GLMM's mode from its own structure: Newton steps on its proxy in predictor space, on a subsample, then on full passes
that are also the proxy's and the influence search's first round.

The generic lean search (``warmup.lean``) reaches a GLMM's mode through minibatch Adam, a dense ``jax.hessian`` over rows
and trust-region passes; at ``N = 2e5``, ``G = 10^3`` its mode, proxy and influence phases read 7.4 passes over ``N``.
Here one pass at a point ``c`` is the GLMM proxy's (``control_variates.glmm_proxy``): its sums give the log-likelihood's
exact gradient and Hessian at ``c``; the prior is exact. So the data-free surrogate ``log p0 + proxy_sum`` is climbed by
trust-region Newton (``optim.arrow_trust``, in its own Laplace s.d.s, on the Hessian's arrow: ``warmup.glmm_climb``)
between passes: IRLS for a GLMM with its priors.

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
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates.glmm import CUBIC_INFO, GLMMProxy, PairBlock, glmm_proxy
from minibatch_mcmc.control_variates.glmm_sums import NonFiniteSums, sums_program
from minibatch_mcmc.control_variates.influence import (
    ProbeRound,
    kept_rows,
    probe_plan,
    probe_points,
    probe_residuals,
    term_floors,
)
from minibatch_mcmc.control_variates.top_deviations import add_deviations, sorted_top
from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.arrow_trust import decrement, glmm_arrow, length_in, metric_for
from minibatch_mcmc.optim.block_newton import ArrowIndex, blocks_from, tangents
from minibatch_mcmc.optim.host_blas import host_blas
from minibatch_mcmc.optim.mode import ModeResult
from minibatch_mcmc.optim.trust_region import gain, next_radius
from minibatch_mcmc.warmup.glmm_climb import (
    SCALED,
    at_mode,
    climb,
    converged,
    evaluate,
    fields,
    full_climb,
    laplace_steps,
    near_mode,
    polish,
)
from minibatch_mcmc.warmup.glmm_levels import LevelGrid, grid_knots, grid_reader, level_correction
from minibatch_mcmc.warmup.lean import BULK_ROWS
from minibatch_mcmc.warmup.subsample_newton import subsample_index

PyTree = Any

SUB_SHARE = 1 / 16
"""Rows of the subsample as a share of ``N`` (at least ``MIN_SUB``)."""
MIN_SUB = 4096
SUB_ITERATIONS = 12
"""Most subsample proxies (each reads the subsample once)."""
SUB_DECREMENT = 0.5
"""Newton decrement (subsample Laplace s.d.s) at which the subsample phase stops."""
GRID_REACH = 2.0
"""The climb with the levels' grids may go this many times the quadratic Newton step's length (in the Laplace s.d.s at its
start): each level's own optimum lies past the quadratic's where the log-likelihood flattens (the gain test still
decides)."""


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
    """``(x, arrays) -> (value, gradient, Hessian)`` of ``log p0(x) + proxy_sum(x) / temperature`` (``arrays``: a proxy's
    ``ARRAYS`` fields; ``template`` gives the rest), with ``grid_factors`` the levels' grids in
    (``glmm_levels.level_correction``; their arrays under ``"grids"``). One compiled program; the Hessian from its
    ``k + m`` products with the arrow's tangents (``block_newton.tangents``: each level's terms touch its own effects and
    the globals only), assembled dense on the host, where a dense ``jax.hessian`` takes ``d`` products."""
    index = glmm_arrow(template.layout)
    d = int(template.centre.shape[0])
    tan = tangents(index, d, template.centre.dtype)

    def value(x: jax.Array, arrays: dict) -> jax.Array:
        pairs = tuple(PairBlock(t.first, t.second, *a) for t, a in zip(template.pairs, arrays["pairs"]))
        rest = {k: v for k, v in arrays.items() if k not in ("pairs", "grids")}
        proxy = template._replace(**rest, pairs=pairs)
        total = proxy.proxy_sum(x)
        if grid_factors:
            grids = tuple(LevelGrid(f, *a) for f, a in zip(grid_factors, arrays["grids"]))
            total = total + level_correction(proxy, grids, x)
        return model.log_prior(x) + total / temperature

    def all_three(x: jax.Array, arrays: dict, tan: jax.Array):
        v, g = jax.value_and_grad(value)(x, arrays)
        hv = jax.vmap(lambda t: jax.jvp(lambda y: jax.grad(value)(y, arrays), (x,), (t,))[1])(tan)
        return v, g, hv

    compiled = jax.jit(all_three)

    def run(x: jax.Array, arrays: dict) -> tuple:
        v, g, hv = compiled(x, arrays, tan)
        return v, g, arrow_hessian(index, np.asarray(hv, np.float64))

    return run


def arrow_hessian(index: ArrowIndex, hv: np.ndarray) -> np.ndarray:
    """The dense symmetric Hessian (zero off the arrow) from its products with ``block_newton.tangents(index)``."""
    a = blocks_from(index, hv)
    lv, gl = index.levels, index.globals_
    h = np.zeros((hv.shape[1],) * 2)
    h[lv[:, :, None], lv[:, None, :]] = -a.a_levels
    h[lv[:, :, None], gl[None, None, :]] = -a.cross
    h[gl[None, None, :], lv[:, :, None]] = -a.cross
    h[np.ix_(gl, gl)] = -a.a_globals
    return h


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
        return probe_residuals(model, proxy, points, rows), term_floors(proxy, model, c, lambda x: x, rows, c.dtype)

    rows = take(source.arrays(), jnp.asarray(np.resize(idx, chunk), jnp.int32))
    return Probes(jax.jit(resid), rows, int(idx.size), kept_rows(n), key)


def sub_climb(
    model: Model,
    sample: PyTree,
    n: int,
    fn: Callable,
    proxy: GLMMProxy,
    x: np.ndarray,
    dtype,
    temperature: float,
    index: ArrowIndex,
    program: Callable | None = None,
) -> tuple:
    """Trust-region IRLS on ``sample``'s proxies scaled to ``N`` rows (``proxy``: the one at ``x``) until the Newton decrement
    is at most ``SUB_DECREMENT`` (at most ``SUB_ITERATIONS`` proxies): the end, its proxy, the surrogate's ``(value,
    gradient, Hessian)`` there, and the rows read (one read of ``sample`` per proxy after ``proxy``)."""
    m = int(np.shape(jax.tree_util.tree_leaves(sample)[0])[0])
    value, g, h = evaluate(fn, proxy, x, dtype, temperature)
    read, radius, b = 0, None, None
    for _ in range(SUB_ITERATIONS):
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(h))) or converged(g, h, SUB_DECREMENT, index):
            break
        b = metric_for(h, index, b)  # one factorisation (an eigh where not concave) per point
        radius = max(decrement(g, b, index), 1e-3) if radius is None else radius
        trial, predicted, _ = climb(fn, fields(proxy), x, radius, dtype, index, b)
        read += m
        try:
            new = scaled(glmm_proxy(model, sample, jnp.asarray(trial, dtype), cubic_info=None, program=program), n / m)
        except NonFiniteSums:  # a row's log-density overflows at the trial: a failed step, the region shrinks
            new, v_new = None, np.nan
        else:
            v_new, g_new, h_new = evaluate(fn, new, trial, dtype, temperature)
        taken, ratio = gain(value, v_new if np.isfinite(v_new) else np.nan, predicted)
        radius = next_radius(radius, ratio, min(length_in(b, index)(trial - x), radius))
        if taken:
            x, proxy, value, g, h = trial, new, v_new, g_new, h_new
    return x, proxy, (value, g, h), read


def cubic_masks(proxy: GLMMProxy) -> tuple:
    """Per factor, 1 for the levels with ``CUBIC_INFO`` of information in every effect (``glmm_sums.cubic_terms``' rule)."""
    return tuple(
        jnp.asarray(np.all(-np.diagonal(np.asarray(h), axis1=1, axis2=2) >= CUBIC_INFO, axis=1), proxy.centre.dtype)
        for h in proxy.hzz
    )


def full_pass(
    model: Model,
    source: DataSource,
    x: np.ndarray,
    dtype,
    probe: Probes,
    masks: tuple,
    hessian: np.ndarray,
    temperature: float,
    index: ArrowIndex,
    program: Callable | None = None,
    extra: Callable | None = None,
) -> tuple[GLMMProxy, ProbeRound | None]:
    """The GLMM proxy at ``x`` from one pass, which also reads every row's residual at the influence probes ``x +- 3 L u``
    (``L`` from ``hessian``, the last one known; the cubic's levels ``masks``): the first influence round where ``x`` is
    the mode (None where ``hessian`` is not negative definite); ``extra(rows, start)``: a further reduction it feeds."""
    c = jnp.asarray(x, dtype)
    steps = laplace_steps(hessian, index, probe.key)
    if steps is None:
        return glmm_proxy(model, source, c, each=extra, program=program), None
    points = probe_points(c, steps)
    at_bulk = np.asarray(probe.resid(probe.bulk_rows, c, masks, points)[0], np.float64)[:, : probe.bulk_count]
    bulk = np.median(at_bulk, axis=1, keepdims=True)
    top = [(np.zeros(0), np.zeros(0, np.int64))]

    def each(rows: PyTree, start: int) -> None:
        e, floor = probe.resid(rows, c, masks, points)
        floor = np.asarray(floor, np.float64) / temperature
        top[0] = add_deviations(top[0], np.asarray(e, np.float64), bulk, start, probe.keep, temperature, floor)
        if extra is not None:
            extra(rows, start)

    proxy = glmm_proxy(model, source, c, each=each, program=program)
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
    first influence round that pass read; the host's linear algebra on ``optim.host_blas``'s BLAS threads."""
    with host_blas(int(ravel_pytree(theta0)[0].size)):
        return search(model, source, theta0, key, temperature, newton_steps, probe_key)


def search(
    model: Model,
    source: DataSource,
    theta0: PyTree,
    key: jax.Array,
    temperature: float,
    newton_steps: int,
    probe_key: jax.Array | None,
) -> GLMMMode:
    """``glmm_mode``'s search, on whatever BLAS threads the caller allows."""
    start_time = time.perf_counter()
    flat0, unravel = ravel_pytree(theta0)
    dtype, n = flat0.dtype, source.n
    m = subsample_rows(n)
    sample = take(source.arrays(), jnp.asarray(subsample_index(key, n, m), jnp.int32))
    x = np.asarray(flat0, np.float64)
    program = sums_program(model.glmm.layout, model.glmm.row_log_density)  # one compilation per chunk shape
    proxy = scaled(glmm_proxy(model, sample, flat0, cubic_info=None, program=program), n / m)
    fn = surrogate(model, proxy, temperature)
    index = glmm_arrow(model.glmm.layout)
    x, proxy, (value, g, h), read = sub_climb(model, sample, n, fn, proxy, x, dtype, temperature, index, program)
    rows = m + read
    probe = probes(model, source, proxy, jax.random.key(0) if probe_key is None else probe_key)
    masks = cubic_masks(proxy)
    passes, taken_steps, radius, b = 1, 0, None, None
    knots = grid_knots(proxy, x, float(np.sqrt(max(n / m - 1.0, 0.0))))
    glmm = model.glmm
    reader = grid_reader(glmm.layout, glmm.row_log_density, glmm.split(jnp.asarray(x, dtype)), knots, dtype)
    sub_h = h
    proxy, found = full_pass(
        model, source, x, dtype, probe, masks, h, temperature, index, program, reader[0] if knots else None
    )
    grids = reader[1]() if knots else ()
    fn_grid = surrogate(model, proxy, temperature, tuple(g.factor for g in grids)) if grids else None
    value, g, h = evaluate(fn, proxy, x, dtype, temperature)
    shape = h if converged(g, h, np.inf, index) else sub_h  # the probes' Laplace shape: the last concave one
    while passes <= 2 * newton_steps and taken_steps < newton_steps and not near_mode(g, h, index):
        b = metric_for(h, index, b)  # one factorisation (an eigh where not concave) per point
        radius = max(decrement(g, b, index), 1e-3) if radius is None else radius
        if grids:  # from the subsample's mode: each level's own log-likelihood on its grid (glmm_levels)
            arrays = {**fields(proxy), "grids": tuple(tuple(gr)[1:] for gr in grids)}  # its cubic sums: the cross term
            trial, predicted, _ = climb(fn_grid, arrays, x, GRID_REACH * radius, dtype, index)
        else:
            trial, predicted = full_climb(fn, proxy, x, radius, dtype, index, b)
        passes += 1
        try:
            new, new_found = full_pass(
                model, source, trial, dtype, probe, cubic_masks(proxy), shape, temperature, index, program
            )
        except NonFiniteSums:  # a row's log-density overflows at the trial: a failed step, the region shrinks
            new, v_new = None, np.nan
        else:
            v_new, g_new, h_new = evaluate(fn, new, trial, dtype, temperature)
        ok, ratio = gain(value, v_new if np.isfinite(v_new) else np.nan, predicted)
        radius = next_radius(radius, ratio, min(length_in(b, index)(trial - x), radius))
        if ok:
            x, proxy, found, value, g, h, taken_steps = trial, new, new_found, v_new, g_new, h_new, taken_steps + 1
            grids = ()  # centred on the point left
            shape = h if converged(g, h, np.inf, index) else shape
        if radius < 1e-8:
            break
    near = near_mode(g, h, index)
    top, (value, g, h) = polish(fn, proxy, x, g, h, dtype, temperature, index) if near else (x, (value, g, h))
    mode = ModeResult(
        theta_hat=unravel(jnp.asarray(top, dtype)),
        log_posterior=value,
        grad_norm=float(np.linalg.norm(g)),
        hessian=h,
        data_used=rows + passes * (n + probe.bulk_count),
        seconds=time.perf_counter() - start_time,
        newton_steps_taken=taken_steps,
        converged=near and at_mode(g, h, index),
        gradient=g,
    )
    return GLMMMode(mode, proxy, passes, rows, found)
