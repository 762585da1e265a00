"""Trust-region Newton on subsamples: the lean mode search's way from Adam's end points to within a few s.d.s of the mode.

Minibatch Adam ends where its learning rate and step count let it (hundreds of s.d.s short of the mode when a
parameter's scale is far from the rate's units, along the ridge of a hierarchical model, or on a heavy-tailed loss);
every full-data Newton step from there costs a pass over ``N``. Here the steps are taken on a fixed random subsample of
``m`` rows, the log-likelihood sum scaled by ``N / m`` (a posterior as wide as the full one, its mode displaced by the
subsample's noise), with the trust region of ``optim.trust_region``: ``climb_all`` runs every start at once (one
compiled, vmapped evaluation per iteration, all starts reading the same rows) until each is within ``SUB_DECREMENT`` of
its subsample mode, which lies about ``sqrt(N/m - 1)`` s.d.s from the full mode per direction. Rows read:
``m`` per iteration. ``basin_filter`` keeps the starts whose subsample mode is far from the first start's, measured in
the subsample's Laplace metric: only those can lead to another mode.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.influence import sampled_rows
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import KEYED_ROWS
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import log_posterior_parts
from minibatch_mcmc.optim.trust_region import ROUNDING, decrement, finite, gain, metric_length, next_radius, trust_step

PyTree = Any

SUB_SHARE = 1 / 32
"""Rows of the subsample as a share of ``N`` (at least ``MIN_SUB``)."""
MIN_SUB = 1024
"""Fewest rows of the subsample."""
MAX_SUB = 1 << 20
"""Most rows of the subsample (from ``N = 2^25`` on): the subsample is held in memory through the whole search (its rows,
their device copy, the evaluator's blocks: at ``N / 32`` rows of 10^8 the climb's peak memory was 334 MiB above that at
10^7, the one part of the fit's memory that grew with ``N``). Its mode is then about ``sqrt(d N / MAX_SUB)`` s.d.s from
the full mode rather than ``sqrt(32 d)``; the full passes' surrogate climb starts from the full data's quadratic there."""
EVAL_ROWS = 1 << 16
"""Subsample rows differentiated at once past which the evaluator sums blocks of them (its memory, about points x d x rows
floats, then does not grow with N: 1.4 GB at 10^8 rows before)."""
SUB_STEPS, MIN_STEPS = 40, 5
"""Subsample iterations at most (each reads the subsample once), and the fewest allowed whatever ``SUB_PASSES`` says."""
SUB_PASSES = 0.25
"""Rows the starts' subsample iterations read at most, as a share of ``N``."""
SUB_DECREMENT = 0.5
"""Newton decrement (subsample Laplace s.d.s) at which a start counts as at its subsample mode."""
SURROGATE_DECREMENT = 0.05
"""Newton decrement (Laplace s.d.s) at which the climb on the surrogate stops."""
RISE_SDS = (1.0, 4.0, 16.0, 64.0)
"""Laplace s.d.s along the least-curved direction at which ``rising_direction`` probes the log-likelihood."""
MAX_ENSEMBLE_DIM = 256
"""Above this many parameters ``lean_mode`` climbs no subsample (one ``d x d`` eigendecomposition per start and iteration):
plain trust-region steps on the full passes from Adam's end, its ends unfiltered."""


class Evaluation(NamedTuple):
    """The subsample log posterior, its gradient and Hessian at one point (float64)."""

    value: float
    grad: np.ndarray
    hessian: np.ndarray


class SubClimb(NamedTuple):
    """Where each start stopped, its evaluation there, whether it was finite, and the rows read."""

    points: np.ndarray
    evals: list
    ok: np.ndarray
    rows: int
    iterations: int
    evaluate: Callable
    """The compiled evaluator (``evaluator``) and the subsample it read, with its size: ``surrogate_climb`` reuses them."""
    sample: PyTree
    m: int
    first_decrement: np.ndarray | None = None
    """Each start's Newton decrement on the subsample before the climb (subsample Laplace s.d.s; inf where not finite)."""


def subsample_rows(n: int) -> int:
    """Rows of the subsample: ``SUB_SHARE * N``, at least ``MIN_SUB``, at most ``MAX_SUB`` and ``N``."""
    return int(min(n, MAX_SUB, max(MIN_SUB, int(SUB_SHARE * n))))


def subsample_index(key: jax.Array, n: int, m: int) -> np.ndarray:
    """``m`` distinct rows of ``n``, sorted: below ``KEYED_ROWS`` rows ``jax.random.choice`` without replacement, from it on the
    keyed bijection of ``influence.sampled_rows``, in memory ``O(m)`` (``choice`` permutes all ``N``: at 10^7 rows 19 CPU s)."""
    if m >= n:
        return np.arange(n)
    if n >= KEYED_ROWS:
        return sampled_rows(key, n, m)
    return np.sort(np.asarray(jax.random.choice(key, n, (m,), replace=False)))


def evaluator(model: Model, unravel: Callable, temperature: float, scale: float) -> Callable:
    """Jitted ``(points (S, d), rows) -> (values, gradients, Hessians)`` of ``log p0 + scale * sum log p(rows) / temperature``."""
    log_prior, log_lik_sum = log_posterior_parts(model, unravel, temperature)

    def one(flat: jax.Array, rows: PyTree) -> jax.Array:
        return log_prior(flat) + jnp.asarray(scale, flat.dtype) * log_lik_sum(flat, rows)

    def lik(flat: jax.Array, rows: PyTree) -> jax.Array:
        return jnp.asarray(scale, flat.dtype) * log_lik_sum(flat, rows)

    def all_points(points: jax.Array, rows: PyTree):
        m = jax.tree_util.tree_leaves(rows)[0].shape[0]
        if m <= EVAL_ROWS:
            return derivatives(one, points, rows)
        blocks = m // EVAL_ROWS  # the rows EVAL_ROWS at a time: memory S x d x EVAL_ROWS whatever m
        head = jax.tree_util.tree_map(
            lambda a: a[: blocks * EVAL_ROWS].reshape((blocks, EVAL_ROWS) + a.shape[1:]), rows
        )
        add = lambda a, b: jax.tree_util.tree_map(jnp.add, a, b)  # noqa: E731
        acc, _ = jax.lax.scan(
            lambda acc, r: (add(acc, derivatives(lik, points, r)), None),
            derivatives(lambda flat, _: log_prior(flat), points, None),
            head,
        )
        if m > blocks * EVAL_ROWS:
            acc = add(acc, derivatives(lik, points, jax.tree_util.tree_map(lambda a: a[blocks * EVAL_ROWS :], rows)))
        return acc

    return jax.jit(all_points)


def derivatives(f: Callable, points: jax.Array, rows: PyTree) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Values, gradients and Hessians of ``f(point, rows)`` at every point."""
    value, grad = jax.vmap(jax.value_and_grad(f), in_axes=(0, None))(points, rows)
    return value, grad, jax.vmap(jax.hessian(f), in_axes=(0, None))(points, rows)


def evaluate_all(fn: Callable, points: np.ndarray, rows: PyTree, dtype) -> list[Evaluation]:
    """Every point's evaluation, as float64 host arrays."""
    v, g, h = (np.asarray(a, np.float64) for a in fn(jnp.asarray(points, dtype), rows))
    return [Evaluation(float(v[i]), g[i], h[i]) for i in range(points.shape[0])]


def at_mode(e: Evaluation) -> bool:
    """Within ``SUB_DECREMENT`` of a strictly concave subsample mode."""
    return (
        bool(np.all(np.linalg.eigvalsh(-0.5 * (e.hessian + e.hessian.T)) > 0))
        and decrement(e.grad, e.hessian) <= SUB_DECREMENT
    )


def climb_all(
    model: Model,
    arrays: PyTree,
    n: int,
    starts: np.ndarray,
    unravel: Callable,
    key: jax.Array,
    temperature: float,
    dtype,
) -> SubClimb:
    """Trust-region Newton from every start on one subsample of ``subsample_rows(N)`` rows, all starts per evaluation."""
    m = subsample_rows(n)
    idx = subsample_index(key, n, m)
    rows = take(arrays, jnp.asarray(idx, jnp.int32))
    fn = evaluator(model, unravel, temperature, n / m)
    points = np.asarray(starts, np.float64).copy()
    evals = evaluate_all(fn, points, rows, dtype)
    ok = np.array([finite(e) for e in evals])
    first = np.array([decrement(e.grad, e.hessian) if o else np.inf for e, o in zip(evals, ok)])
    radius = np.where(ok, np.maximum(np.where(ok, first, 0.0), 1e-3), 0.0)
    active = ok & ~np.array([o and at_mode(e) for e, o in zip(evals, ok)])
    iterations, cap = 1, max(MIN_STEPS, min(SUB_STEPS, int(SUB_PASSES * n / m)))
    while active.any() and iterations < cap:
        steps = {i: trust_step(evals[i].grad, evals[i].hessian, radius[i]) for i in np.flatnonzero(active)}
        trials = points.copy()
        for i, s in steps.items():
            trials[i] = points[i] + s.step
        new = evaluate_all(fn, trials, rows, dtype)
        iterations += 1
        for i, s in steps.items():
            taken, ratio = gain(evals[i].value, new[i].value if finite(new[i]) else np.nan, s.predicted)
            radius[i] = next_radius(radius[i], ratio, s.length)
            if taken:
                points[i], evals[i] = trials[i], new[i]
            active[i] = not at_mode(evals[i]) and radius[i] >= 1e-8
    return SubClimb(points, evals, ok, iterations * m, iterations, fn, rows, m, first)


def basin_filter(climbed: SubClimb, separation: float) -> np.ndarray:
    """Indices of the starts after the first that reached a subsample mode more than ``separation`` s.d.s from the first's
    point (in the first's subsample Laplace metric; at any distance where that point is not strictly concave).

    A start still climbing when the subsample iterations ran out is left out: it has shown no other mode, and polishing
    it on the full data (tens of passes on a hierarchical ridge) would cost more than the rest of the warm-up."""
    others = [i for i in range(1, climbed.points.shape[0]) if climbed.ok[i] and at_mode(climbed.evals[i])]
    first = climbed.evals[0]
    precision = -0.5 * (first.hessian + first.hessian.T)
    if not np.all(np.linalg.eigvalsh(precision) > 0):
        return np.asarray(others, np.int64)
    far = [
        i
        for i in others
        if float(np.sqrt(max((d := climbed.points[i] - climbed.points[0]) @ precision @ d, 0.0))) > separation
    ]
    return np.asarray(far, np.int64)


class Surrogate(NamedTuple):
    """Where the climb on the control-variate surrogate ended, the increase it predicts there, and the rows it read."""

    point: np.ndarray
    predicted: float
    rows: int


def surrogate_climb(
    fn: Callable, rows: PyTree, m: int, width: int, x0: np.ndarray, full: Any, radius: float, max_iters: int, dtype
) -> Surrogate:
    """Trust-region Newton from ``x0`` on ``S(x) = E(x) + (V0 - E0) + (G0 - e0)'(x - x0) + (x - x0)'(H0 - h0)(x - x0) / 2``.

    ``E`` is the subsample log posterior (``fn`` on ``rows``, ``m`` of them, evaluated as ``width`` copies: the
    compilation of ``climb_all``), ``E0, e0, h0`` its value, gradient and Hessian at ``x0``, and ``V0, G0, H0`` the
    full-data ones (``full``): ``S`` has the full posterior's value, gradient and Hessian at ``x0`` (its first step is
    the full-data Newton step) and the subsample's estimate of how they change away from it (the curved ridge of a
    hierarchical model, a scale parameter's non-quadratic log posterior)."""

    def at(x: np.ndarray) -> Evaluation:
        return evaluate_all(fn, np.repeat(x[None], width, axis=0), rows, dtype)[0]

    base = at(x0)
    dv, dg, dh = full.value - base.value, full.grad - base.grad, full.hessian - base.hessian

    def corrected(x: np.ndarray, e: Evaluation) -> Evaluation:
        delta = x - x0
        return Evaluation(
            e.value + dv + float(dg @ delta) + 0.5 * float(delta @ dh @ delta), e.grad + dg + dh @ delta, e.hessian + dh
        )

    x, current = (
        np.asarray(x0, np.float64),
        Evaluation(float(full.value), np.asarray(full.grad, np.float64), np.asarray(full.hessian, np.float64)),
    )
    inner, trials = radius, 0
    while trials < max_iters and (
        trials == 0 or decrement(current.grad, current.hessian) > SURROGATE_DECREMENT
    ):  # one step at least
        s = trust_step(current.grad, current.hessian, inner)
        trial, out = x + s.step, metric_length(x + s.step - x0, full.hessian)
        if out > radius:  # back to the outer trust region's boundary, along the ray from x0
            trial = x0 + (trial - x0) * (radius / out)
        step = trial - x
        predicted = float(current.grad @ step) + 0.5 * float(step @ current.hessian @ step)
        e = corrected(trial, at(trial))
        trials += 1
        taken, ratio = gain(current.value, e.value if finite(e) else np.nan, predicted)
        inner = next_radius(inner, ratio, min(s.length, inner))
        if taken:
            x, current = trial, e
            if out > radius:
                break
        if inner < 1e-8:
            break
    return Surrogate(x, float(current.value - full.value), (1 + trials) * m)


def rising_direction(
    model: Model, unravel: Callable, climbed: SubClimb, flat: np.ndarray, hessian: np.ndarray, dtype
) -> tuple[np.ndarray, np.ndarray] | None:
    """The posterior's least-curved direction at ``flat``, signed so the log-likelihood rises along it, and the point
    ``RISE_SDS[-1]`` Laplace s.d.s out along it, where the subsample log-likelihood keeps rising, beyond rounding, out to there (a
    likelihood with no maximum there: separable classes); else None. Probes on the subsample only (``len(RISE_SDS)``
    evaluations), which can miss rare rows that hold the direction: the caller confirms on the full data."""
    lam, vec = np.linalg.eigh(-0.5 * (hessian + hessian.T))
    if lam[0] <= 0:
        return None
    u, sd = vec[:, 0], 1.0 / float(np.sqrt(lam[0]))
    width = climbed.points.shape[0]
    prior = jax.jit(lambda x: model.log_prior(unravel(x)))

    def lik(x: np.ndarray) -> float:
        e = evaluate_all(climbed.evaluate, np.repeat(x[None], width, axis=0), climbed.sample, dtype)[0]
        return e.value - float(prior(jnp.asarray(x, dtype)))

    here = lik(flat)
    if lik(flat + RISE_SDS[0] * sd * u) < here:
        u = -u
    values = [here] + [lik(flat + t * sd * u) for t in RISE_SDS]
    noise = ROUNDING * float(np.finfo(np.float32).eps) * (abs(here) + 1.0)
    climbs = (
        values[-1] > values[0] + noise
    )  # a flat likelihood (a parameter only the prior sees, e.g. a prior scale) is no separation
    rising = all(np.isfinite(values)) and climbs and all(b >= a - noise for a, b in zip(values, values[1:]))
    return (u, flat + RISE_SDS[-1] * sd * u) if rising else None
