"""The lean warm-up's way to the mode: few passes over the data, one compilation per kind of pass.

``lean_mode`` runs minibatch Adam from the start ``theta0`` and from the multi-start search's dispersed points
in one vmapped run (``multistart.adam_ends``), every start reading the same minibatch at each step, with a
budget of ``ADAM_ROWS * N`` rows (``MIN_BATCH`` to ``MAX_BATCH`` per step). Adam's ends are then carried to their
modes on one subsample (``subsample_newton.climb_all``: trust-region Newton, all starts at once), and only the
dispersed starts whose subsample mode lies outside the first start's basin go on to ``multistart``. Full-data
passes start from the first start's subsample mode. Each pass returns, at its point ``c``, the log-likelihood sums
and their gradient and Hessian (what Newton needs, and exactly the Taylor proxy's sums at ``c``), and every row's
proxy residual at the influence probes ``c +- 3 L u`` (``control_variates.influence``; ``L`` from the previous
pass's Hessian). Between two passes the next point is found by climbing the control-variate surrogate
(``subsample_newton.surrogate_climb``: the full pass's quadratic plus the subsample's departure from its own, the
curvature of a hierarchical ridge), within a trust region measured in Laplace s.d.s (``optim.trust_region``); the pass at that point accepts it when the
log posterior rose by a fair share of the predicted rise (else the region shrinks, one pass per rejection), and the
passes stop when the Newton decrement, the distance to the mode in Laplace s.d.s, is below ``NEWTON_DECREMENT`` at
a concave point. So the last pass is also the proxy pass and the first round of the influence search. One jitted
function serves every pass (the chunks all have the same number of rows; the last one overlaps its predecessor and
weighs the repeated rows 0). At a converged mode ``subsample_newton.rising_direction`` probes whether the
log-likelihood keeps rising along the least-curved direction (separable classes), for ``no_mode.check_mode``.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.influence import (
    ProbeRound,
    kept_rows,
    probe_plan,
    probe_points,
    probe_steps,
)
from minibatch_mcmc.control_variates.taylor import TaylorProxy, proxy_from_sums
from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import ModeResult, start_point
from minibatch_mcmc.optim.trust_region import ROUNDING, decrement, gain, metric_length, next_radius, trust_step
from minibatch_mcmc.samplers.diagnose import first_nonfinite
from minibatch_mcmc.warmup.lean_pass import PassOut, chunk_pass, stream
from minibatch_mcmc.warmup.multistart import SEPARATION, adam_ends
from minibatch_mcmc.warmup.no_mode import SHOWN, flat_names
from minibatch_mcmc.warmup.subsample_newton import (
    MAX_ENSEMBLE_DIM,
    RISE_SDS,
    basin_filter,
    climb_all,
    rising_direction,
    surrogate_climb,
)

PyTree = Any

ADAM_ROWS = 0.3
"""Rows the minibatch Adam phase reads at most, as a fraction of ``N`` (at least ``MIN_BATCH`` rows per step)."""
MIN_BATCH, MAX_BATCH = 32, 1024
"""Bounds on Adam's minibatch size."""
ADAM_STEPS = 300
BULK_ROWS = 2048
"""Rows drawn for the influence probes' bulk level (their median residual at each probe)."""
"""Adam steps from every start."""
SURROGATE_STEPS = 8
"""Iterations of the climb on the control-variate surrogate between two full-data passes (each reads the subsample)."""
FAR_MATCH = 0.25
"""How near (relative to its distance from the centre) a far point read by the last pass must lie to the confirmation's
far point to stand for it: the same verdict, the log-likelihood higher or not some 48-80 s.d.s out along about the same
direction (a Newton step that moved a rare coefficient changes its curvature, and so its s.d., by 10-20%)."""
NEWTON_DECREMENT = 0.5
"""Newton decrement (Laplace s.d.s to the mode) below which the Newton passes stop: the proxy's centre is that close (a
posterior mean is as far from the mode on a skewed posterior; a cubic residual's s.d. over a Gaussian posterior grows by
``sqrt(1 + 3 t^2 + t^4 + t^6 / 15) = 1.35`` at ``t = 0.5``, and the stratum and batch sizing, made at this
centre, see it). At 0.2 the rare-feature and 16-group logistics of ``benchmarks/heavy_tails.py`` (N = 3e5) took a third
pass from decrements of 0.33 and 0.44 to land within 0.011 and 0.005: a pass over N for a tenth of an s.d."""


class LeanMode(NamedTuple):
    """The mode (``find_mode``'s result), the proxy built by the last pass, the other starts' Adam ends and the costs."""

    mode: ModeResult
    proxy: TaylorProxy
    ends: np.ndarray
    """The dispersed starts' subsample modes outside the first start's basin (flat, float64), for
    ``multistart.modes_from_ends`` (above ``MAX_ENSEMBLE_DIM`` parameters: their finite Adam ends)."""
    start_end: np.ndarray
    """Where the full-data Newton passes started: the subsample climb's end from ``theta0``'s Adam end."""
    probe: ProbeRound | None
    """The first influence round, made by the last pass (None when it had no Laplace factor to probe with)."""
    adam_rows: int
    newton_passes: int
    last_pass_seconds: float
    subsample_rows: int = 0
    """Rows the subsample Newton iterations read (``subsample_newton``: the starts' climb and the surrogate's)."""
    filtered: bool = True
    """Whether ``ends`` are the starts' subsample modes outside the first start's basin (else Adam's ends, unfiltered)."""
    rising: np.ndarray | None = None
    """At a converged mode, a direction along which the log-likelihood keeps rising (``subsample_newton.rising_direction``)."""


def adam_batch(n: int) -> int:
    """Rows a step of the Adam phase reads: ``ADAM_ROWS * N`` over its steps, within ``[MIN_BATCH, MAX_BATCH]`` and ``N``."""
    return int(min(n, MAX_BATCH, max(MIN_BATCH, ADAM_ROWS * n // ADAM_STEPS)))


def lean_mode(
    model: Model,
    source: DataSource,
    theta0: PyTree,
    *,
    key: jax.Array,
    probe_key: jax.Array,
    temperature: float = 1.0,
    num_starts: int = 8,
    newton_steps: int = 10,
    order: int = 2,
    tol: float = 1e-6,
    learning_rate: float = 0.05,
) -> LeanMode:
    """The mode reached from ``theta0``, the Taylor proxy at the last Newton point, and the other starts' Adam ends."""
    start = time.perf_counter()
    flat0, unravel = start_point(theta0)
    n, arrays, d = source.n, source.arrays(), int(flat0.size)
    b = adam_batch(n)
    search = adam_ends(
        model,
        arrays,
        n,
        np.asarray(flat0)[None],
        unravel,
        key,
        temperature,
        ADAM_STEPS,
        b,
        learning_rate,
        shared=True,
        dispersed=num_starts,
    )  # key split into the starts' and Adam's inside
    ends, ok = search.ends, search.ok
    if not ok[
        0
    ]:  # a row non-finite at theta0 itself (bad_rows_named then names it) is the start's fault, not a region's
        step = 0 if first_nonfinite(model, arrays, n, theta0) is not None else int(search.first_bad[0])
        raise ValueError(nonfinite_search(step, search.stopped[0], flat_names(theta0)))
    chunk = min(DEFAULT_CHUNK, n)
    keep = kept_rows(n)
    steps_dirs, bulk_idx = probe_plan(np.eye(d), probe_key, n, min(BULK_ROWS, chunk))
    part = chunk_pass(model, unravel, order, head=int(bulk_idx.size))  # residuals handed back: the bulk rows' alone
    bulk_rows = take(
        arrays, jnp.asarray(np.resize(bulk_idx, chunk), jnp.int32)
    )  # tiled to a chunk: the pass's one compilation
    bulk_weight = np.ones(chunk, np.float32)

    def pass_at(
        flat: jax.Array, factor: np.ndarray | None, hessian: np.ndarray | None = None
    ) -> tuple[PassOut, np.ndarray | None]:
        """One streamed pass at ``flat`` (with the influence probes when a Laplace factor is given, and the log-likelihood
        at the far points along the least-curved direction of a previous pass's ``hessian``)."""
        steps = probe_steps(factor, probe_key) if factor is not None else np.zeros_like(steps_dirs)
        pts = probe_points(flat, steps)
        far = far_points(np.asarray(flat, np.float64), hessian)
        far_arg = jnp.asarray(np.zeros((2, d)) + np.asarray(flat) if far is None else far, flat.dtype)
        bulk = None
        if factor is not None:
            at_bulk = np.asarray(part(bulk_rows, bulk_weight, flat, pts, far_arg)[1][0], np.float64)  # (P, bulk rows)
            tiled = np.resize(np.arange(at_bulk.shape[1]), chunk)  # the median over the rows as tiled to a chunk
            bulk = np.median(at_bulk[:, tiled], axis=1, keepdims=True)
        sums, top = stream(part, arrays, n, chunk, flat, pts, bulk, keep, temperature, far_arg)
        p0, g0, h0 = sums.pop("prior")
        far_sums = sums.pop("far")
        out = PassOut(
            float(p0) + sums["value"] / temperature,
            g0 + sums["grad"] / temperature,
            h0 + sums["hess"] / temperature,
            sums,
            top,
            far=None if far is None else (far, far_sums),
        )
        return out, steps

    small = (
        d <= MAX_ENSEMBLE_DIM
    )  # else plain trust-region passes from Adam's end (a d x d eigendecomposition per iteration)
    climbed = (
        climb_all(
            model,
            arrays,
            n,
            np.concatenate([ends[:1], ends[1:][ok[1:]]]),
            unravel,
            jax.random.fold_in(key, 1),
            temperature,
            flat0.dtype,
        )
        if small
        else None
    )
    sub_rows = climbed.rows if small else 0
    others = climbed.points[basin_filter(climbed, SEPARATION)] if small else ends[1:][ok[1:]]
    # Adam's end (from 0.3 N rows) is the better start where it lies within sqrt(2 d (N/m - 1)) s.d.s of the subsample mode
    # (the scaled subsample posterior is as wide as the full one, its mode about sqrt(d (N/m - 1)) s.d.s from the full
    # mode: an end that near it is expected nearer the full mode than it is); else the subsample mode
    far = small and climbed.ok[0] and climbed.first_decrement[0] > np.sqrt(2.0 * d * (n / climbed.m - 1.0))
    flat = jnp.asarray(climbed.points[0] if far else ends[0], flat0.dtype)
    t_last = time.perf_counter()
    current, steps = pass_at(flat, None)
    if not current.finite:
        raise ValueError(
            f"the mode search (Newton phase): non-finite full-data log posterior, gradient or Hessian at the subsample "
            f"search's end point (log posterior {current.value}), reached from a finite start: "
            f"{at_point(np.asarray(flat, np.float64), flat_names(theta0))}. "
            "Check the model's support there (a prior or transform that excludes it) and that log_lik is numerically stable"
        )
    threshold, x, width = tol * (1 + n), np.asarray(flat, np.float64), climbed.points.shape[0] if small else 1
    passes, taken, trials, radius = 1, 0, 0, max(decrement(current.grad, current.hessian), 1e-3)
    current = current._replace(steps=steps)
    while taken < newton_steps and trials < 2 * newton_steps and not near(current, threshold):
        if small:
            sur = surrogate_climb(
                climbed.evaluate, climbed.sample, climbed.m, width, x, current, radius, SURROGATE_STEPS, flat0.dtype
            )
            trial, predicted, sub_rows = sur.point, sur.predicted, sub_rows + sur.rows
        else:
            plain = trust_step(current.grad, current.hessian, radius)
            trial, predicted = x + plain.step, plain.predicted
        length = metric_length(trial - x, current.hessian)
        t_last = time.perf_counter()
        out, used = pass_at(jnp.asarray(trial, flat0.dtype), laplace_factor(current.hessian), current.hessian)
        passes, trials = passes + 1, trials + 1
        ok, ratio = gain(current.value, out.value if out.finite else np.nan, predicted)
        radius = next_radius(radius, ratio, min(length, radius))
        if ok:
            x, current, taken = trial, out._replace(steps=used), taken + 1
        if radius < 1e-8:
            break
    flat, steps = jnp.asarray(x, flat0.dtype), current.steps
    last_seconds = time.perf_counter() - t_last
    rising = (
        rising_direction(model, unravel, climbed, x, current.hessian, flat0.dtype)
        if small and near(current, threshold)
        else None
    )
    if (
        rising is not None
    ):  # confirmed on the full data at the far point (a rare category's rows may be missing from the subsample)
        rise = read_far(current, rising[1])  # read by the last pass where its direction was the same
        if rise is None:  # a pass at the centre whose far points are rising_direction's (same Hessian, same centre)
            rise = read_far(pass_at(jnp.asarray(x, flat0.dtype), None, current.hessian)[0], rising[1])
            passes += 1
        noise = ROUNDING * float(np.finfo(np.float32).eps) * (abs(current.sums["value"]) + 1.0)
        rising = rising[0] if rise is not None and np.isfinite(rise) and rise > noise else None
    grad_norm = float(np.linalg.norm(current.grad))
    mode = ModeResult(
        theta_hat=unravel(flat),
        log_posterior=current.value,
        grad_norm=grad_norm,
        hessian=current.hessian,
        data_used=ADAM_STEPS * b + sub_rows + passes * n,
        seconds=time.perf_counter() - start,
        newton_steps_taken=taken,
        converged=near(current, threshold),
        gradient=current.grad,
    )
    proxy = proxy_from_sums(current.sums, unravel(flat), order, n)
    probe = None if current.top is None else ProbeRound(steps, current.top[0], current.top[1], int(bulk_idx.size))
    return LeanMode(
        mode,
        proxy,
        others,
        climbed.points[0] if far else ends[0],
        probe,
        ADAM_STEPS * b,
        passes,
        last_seconds,
        sub_rows,
        small,
        rising,
    )


def far_points(flat: np.ndarray, hessian: np.ndarray | None) -> np.ndarray | None:
    """``flat +- RISE_SDS[-1] sd u``, ``u`` the least-curved direction of ``-hessian`` and ``sd`` its s.d. (None: no
    Hessian, or not negative definite)."""
    if hessian is None:
        return None
    lam, vec = np.linalg.eigh(-0.5 * (hessian + hessian.T))
    if not lam[0] > 0:
        return None
    step = RISE_SDS[-1] * vec[:, 0] / np.sqrt(lam[0])
    return np.stack([flat + step, flat - step])


def read_far(current: PassOut, point: np.ndarray) -> float | None:
    """The full-data log-likelihood's rise from the centre to ``point`` (``rising_direction``'s far point) where the pass
    that made ``current`` read it: one of its far points within ``FAR_MATCH`` of ``point``'s distance from the pass's
    centre; else None."""
    if current.far is None:
        return None
    points, sums = current.far
    centre = 0.5 * (points[0] + points[1])
    gaps = np.linalg.norm(points - point[None], axis=1)
    k = int(np.argmin(gaps))
    ok = gaps[k] <= FAR_MATCH * np.linalg.norm(point - centre) and np.isfinite(sums[k])
    return float(sums[k]) if ok else None


def laplace_factor(hessian: np.ndarray) -> np.ndarray | None:
    """The Cholesky factor of ``(-H)^{-1}``, or None where ``-H`` is not positive definite."""
    try:
        return np.linalg.cholesky(np.linalg.inv(-0.5 * (hessian + hessian.T)))
    except np.linalg.LinAlgError:
        return None


def near(current: PassOut, threshold: float) -> bool:
    """Converged: the gradient within ``threshold``, or the Newton decrement below ``NEWTON_DECREMENT`` at a concave point."""
    if float(np.linalg.norm(current.grad)) <= threshold:
        return True
    if np.any(np.linalg.eigvalsh(-0.5 * (current.hessian + current.hessian.T)) <= 0):
        return False
    return decrement(current.grad, current.hessian) <= NEWTON_DECREMENT


def at_point(point: np.ndarray, names: list[str]) -> str:
    """A flat point in words: its ``SHOWN`` coordinates of largest magnitude, by name."""
    big = np.argsort(-np.abs(point))[:SHOWN]
    return ", ".join(f"{names[i]} = {point[i]:.4g}" for i in sorted(big)) + (
        " (the largest)" if point.size > SHOWN else ""
    )


def nonfinite_search(step: int, point: np.ndarray, names: list[str]) -> str:
    """The error for the Adam phase meeting a non-finite value: at the start ``theta0``, or in a region reached from it."""
    if step <= 0:
        return (
            "the mode search (Adam phase): non-finite minibatch log posterior or gradient at the start theta0; check theta0 "
            "and the model's support"
        )
    return (
        f"the mode search (Adam phase) reached a region where the minibatch log posterior or its gradient is non-finite, at "
        f"Adam step {step} of {ADAM_STEPS}, from a finite start theta0: it stopped at {at_point(point, names)}. The model is "
        "NaN or infinite there: give the parameters a prior (or a constraining transform) that excludes that region, make "
        "log_lik numerically stable there (e.g. jax.nn.log_sigmoid or logsumexp instead of the log of a probability), or "
        "start nearer the mode"
    )
