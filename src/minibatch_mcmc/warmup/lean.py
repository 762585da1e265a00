"""The lean warm-up's way to the mode: few passes over the data, one compilation per kind of pass.

``lean_mode`` runs minibatch Adam from the start ``theta0`` and from the multi-start search's dispersed points
in one vmapped run (``multistart.adam_ends``), every start reading the same minibatch at each step, with a
budget of ``ADAM_ROWS * N`` rows (``MIN_BATCH`` to ``MAX_BATCH`` per step). Newton steps then start from the
end point of ``theta0``'s search. Each step is one streamed pass that returns, at its point ``c``, the
log-likelihood sums and their gradient and Hessian (what Newton needs, and exactly the Taylor proxy's sums
at ``c``), and every row's proxy residual at the influence probes ``c +- 3 L u`` (``control_variates.influence``;
``L`` from the previous pass's Hessian). The step is accepted when the pass shows an Armijo increase
(else it is halved, one pass per halving), and the steps stop when the Newton decrement, the distance to the
mode in Laplace s.d.s, is below ``NEWTON_DECREMENT``. So the last pass is also the proxy pass and the first
round of the influence search: from a start near the mode, two passes in all. One jitted function serves
every pass (the chunks all have the same number of rows; the last one overlaps its predecessor and weighs
the repeated rows 0).
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.influence import (ProbeRound, add_deviations, kept_rows, probe_plan, probe_points, probe_residuals,
                                                     probe_steps, rounding_floor, sorted_top, term_scale)
from minibatch_mcmc.control_variates.taylor import TaylorProxy, proxy_from_sums
from minibatch_mcmc.data.arrays import DataSource, slice_rows, take
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import ARMIJO, MAX_HALVINGS, ModeResult, newton_direction, start_point
from minibatch_mcmc.warmup.multistart import adam_ends
from minibatch_mcmc.warmup.no_mode import SHOWN, flat_names, newton_decrement
from minibatch_mcmc.samplers.diagnose import first_nonfinite

PyTree = Any

ADAM_ROWS = 0.3
"""Rows the minibatch Adam phase reads at most, as a fraction of ``N`` (at least ``MIN_BATCH`` rows per step)."""
MIN_BATCH, MAX_BATCH = 32, 1024
"""Bounds on Adam's minibatch size."""
ADAM_STEPS = 300
BULK_ROWS = 2048
"""Rows drawn for the influence probes' bulk level (their median residual at each probe)."""
"""Adam steps from every start."""
NEWTON_DECREMENT = 0.2
"""Newton decrement (Laplace s.d.s to the mode) below which the Newton passes stop: the proxy's centre is that close
(the chain's tails, 3 s.d. out, then reach 3.2 s.d. from it: residuals up to 1.2x those of a centre at the mode)."""


class LeanMode(NamedTuple):
    """The mode (``find_mode``'s result), the proxy built by the last pass, the other starts' Adam ends and the costs."""

    mode: ModeResult
    proxy: TaylorProxy
    ends: np.ndarray
    """Finite Adam end points of the dispersed starts (flat, float64), for ``multistart.modes_from_ends``."""
    start_end: np.ndarray
    """Adam's end point from ``theta0`` (where the Newton passes started)."""
    probe: ProbeRound | None
    """The first influence round, made by the last pass (None when it had no Laplace factor to probe with)."""
    adam_rows: int
    newton_passes: int
    last_pass_seconds: float


class PassOut(NamedTuple):
    """One streamed pass at a point: the tempered log posterior, its gradient and Hessian, and the raw sums."""

    value: float
    grad: np.ndarray
    hessian: np.ndarray
    sums: dict
    top: tuple[np.ndarray, np.ndarray] | None

    @property
    def finite(self) -> bool:
        """Whether value, gradient and Hessian are all finite."""
        return bool(np.isfinite(self.value) and np.all(np.isfinite(self.grad)) and np.all(np.isfinite(self.hessian)))


def chunk_pass(model: Model, unravel: Callable, order: int) -> Callable:
    """Jitted ``(rows, weight, c, points) -> (sums of l_i, its gradient and Hessian at c, residuals at points, the log
    prior with its gradient and Hessian at c)``: the prior, read from one chunk per pass, costs no compilation of its own."""

    def log_prior(x: jax.Array) -> jax.Array:
        return jnp.asarray(model.log_prior(unravel(x)), x.dtype)

    def part(rows: PyTree, weight: jax.Array, c: jax.Array, points: jax.Array):
        def chunk_sum(x: jax.Array) -> jax.Array:
            return jnp.sum(weight * model.log_lik(unravel(x), rows))

        value, grad = jax.value_and_grad(chunk_sum)(c)
        sums = {"value": value, "grad": grad, "hess": jax.hessian(chunk_sum)(c)}
        proxy = TaylorProxy(unravel(c), order, grad, None, 0)  # only the centre and order are used
        prior = (log_prior(c), jax.grad(log_prior)(c), jax.hessian(log_prior)(c))
        return sums, (probe_residuals(model, proxy, points, rows), term_scale(model, c, unravel, rows)), prior

    return jax.jit(part)


def stream(part: Callable, arrays: PyTree, n: int, chunk: int, c: jax.Array, points: jax.Array, bulk: np.ndarray | None,
           keep: int, temperature: float) -> tuple[dict, tuple | None]:
    """Float64 sums over all rows (and the log prior's parts at ``c``, key ``"prior"``), and (with a ``bulk`` level) the largest
    deviations of the rows' residuals."""
    sums, top, done, prior = None, (np.zeros(0), np.zeros(0, np.int64)), 0, None
    while done < n:
        start = min(done, n - chunk)
        weight = jnp.asarray(np.arange(start, start + chunk) >= done, jnp.float32)
        piece, resid, prior = part(slice_rows(arrays, start, chunk), weight, c, points)
        piece = {k: np.asarray(v, np.float64) for k, v in jax.device_get(piece).items()}
        sums = piece if sums is None else {k: sums[k] + piece[k] for k in sums}
        if bulk is not None:
            e, scale = resid
            top = add_deviations(top, np.asarray(e, np.float64)[:, done - start:], bulk, done, keep, temperature,
                                 rounding_floor(scale, temperature)[done - start:])
        done = start + chunk
    sums["prior"] = tuple(np.asarray(a, np.float64) for a in prior)
    return sums, (sorted_top(top, keep) if bulk is not None else None)


def adam_batch(n: int) -> int:
    """Rows a step of the Adam phase reads: ``ADAM_ROWS * N`` over its steps, within ``[MIN_BATCH, MAX_BATCH]`` and ``N``."""
    return int(min(n, MAX_BATCH, max(MIN_BATCH, ADAM_ROWS * n // ADAM_STEPS)))


def lean_mode(model: Model, source: DataSource, theta0: PyTree, *, key: jax.Array, probe_key: jax.Array, temperature: float = 1.0,
              num_starts: int = 8, newton_steps: int = 10, order: int = 2, tol: float = 1e-6, learning_rate: float = 0.05) -> LeanMode:
    """The mode reached from ``theta0``, the Taylor proxy at the last Newton point, and the other starts' Adam ends."""
    start = time.perf_counter()
    flat0, unravel = start_point(theta0)
    n, arrays, d = source.n, source.arrays(), int(flat0.size)
    b = adam_batch(n)
    search = adam_ends(model, arrays, n, np.asarray(flat0)[None], unravel, key, temperature, ADAM_STEPS, b, learning_rate,
                       shared=True, dispersed=num_starts)  # key split into the starts' and Adam's inside
    ends, ok = search.ends, search.ok
    if not ok[0]:  # a row non-finite at theta0 itself (bad_rows_named then names it) is the start's fault, not a region's
        step = 0 if first_nonfinite(model, arrays, n, theta0) is not None else int(search.first_bad[0])
        raise ValueError(nonfinite_search(step, search.stopped[0], flat_names(theta0)))
    chunk = min(DEFAULT_CHUNK, n)
    part = chunk_pass(model, unravel, order)
    keep = kept_rows(n)
    steps_dirs, bulk_idx = probe_plan(np.eye(d), probe_key, n, min(BULK_ROWS, chunk))
    bulk_rows = take(arrays, jnp.asarray(np.resize(bulk_idx, chunk), jnp.int32))  # tiled to a chunk: the pass's one compilation
    bulk_weight = np.ones(chunk, np.float32)

    def pass_at(flat: jax.Array, factor: np.ndarray | None) -> tuple[PassOut, np.ndarray | None]:
        """One streamed pass at ``flat`` (with the influence probes when a Laplace factor is given)."""
        steps = probe_steps(factor, probe_key) if factor is not None else np.zeros_like(steps_dirs)
        pts = probe_points(flat, steps)
        bulk = None
        if factor is not None:
            bulk = np.median(np.asarray(part(bulk_rows, bulk_weight, flat, pts)[1][0], np.float64), axis=1, keepdims=True)
        sums, top = stream(part, arrays, n, chunk, flat, pts, bulk, keep, temperature)
        p0, g0, h0 = sums.pop("prior")
        out = PassOut(float(p0) + sums["value"] / temperature, g0 + sums["grad"] / temperature, h0 + sums["hess"] / temperature, sums, top)
        return out, steps

    flat = jnp.asarray(ends[0], flat0.dtype)
    t_last = time.perf_counter()
    current, steps = pass_at(flat, None)
    if not current.finite:
        raise ValueError(f"the mode search (Newton phase): non-finite full-data log posterior, gradient or Hessian at the Adam phase's "
                         f"end point (log posterior {current.value}), reached from a finite start: "
                         f"{at_point(ends[0], flat_names(theta0))}. "
                         "Check the model's support there (a prior or transform that excludes it) and that log_lik is numerically stable")
    passes, taken, threshold = 1, 0, tol * (1 + n)
    while taken < newton_steps and not near(current, threshold):
        direction = newton_direction(current.hessian, current.grad)
        slope = float(current.grad @ direction)
        noise = 64 * float(jnp.finfo(flat.dtype).eps) * (abs(current.value) + 1.0)
        factor = laplace_factor(current.hessian)
        for halving in range(MAX_HALVINGS):
            t = 0.5**halving
            trial = flat + jnp.asarray(t * direction, flat.dtype)
            t_last = time.perf_counter()
            nxt, nxt_steps = pass_at(trial, factor)
            passes += 1
            v = nxt.value
            if nxt.finite and (v >= current.value + ARMIJO * t * slope or (0.5 * slope <= noise and v >= current.value - noise)):
                break
        else:
            break
        flat, current, steps, taken = trial, nxt, nxt_steps, taken + 1
    last_seconds = time.perf_counter() - t_last
    grad_norm = float(np.linalg.norm(current.grad))
    mode = ModeResult(theta_hat=unravel(flat), log_posterior=current.value, grad_norm=grad_norm, hessian=current.hessian,
                      data_used=ADAM_STEPS * b + passes * n, seconds=time.perf_counter() - start,
                      newton_steps_taken=taken, converged=near(current, threshold), gradient=current.grad)
    proxy = proxy_from_sums(current.sums, unravel(flat), order, n)
    probe = None if current.top is None else ProbeRound(steps, current.top[0], current.top[1], int(bulk_idx.size))
    return LeanMode(mode, proxy, ends[1:][ok[1:]], ends[0], probe, ADAM_STEPS * b, passes, last_seconds)


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
    return newton_decrement(current.grad, current.hessian)[0] <= NEWTON_DECREMENT


def at_point(point: np.ndarray, names: list[str]) -> str:
    """A flat point in words: its ``SHOWN`` coordinates of largest magnitude, by name."""
    big = np.argsort(-np.abs(point))[:SHOWN]
    return ", ".join(f"{names[i]} = {point[i]:.4g}" for i in sorted(big)) + (" (the largest)" if point.size > SHOWN else "")


def nonfinite_search(step: int, point: np.ndarray, names: list[str]) -> str:
    """The error for the Adam phase meeting a non-finite value: at the start ``theta0``, or in a region reached from it."""
    if step <= 0:
        return ("the mode search (Adam phase): non-finite minibatch log posterior or gradient at the start theta0; check theta0 "
                "and the model's support")
    return (f"the mode search (Adam phase) reached a region where the minibatch log posterior or its gradient is non-finite, at "
            f"Adam step {step} of {ADAM_STEPS}, from a finite start theta0: it stopped at {at_point(point, names)}. The model is "
            "NaN or infinite there: give the parameters a prior (or a constraining transform) that excludes that region, make "
            "log_lik numerically stable there (e.g. jax.nn.log_sigmoid or logsumexp instead of the log of a probability), or "
            "start nearer the mode")
