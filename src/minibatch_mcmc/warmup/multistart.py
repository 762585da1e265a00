"""Looking for other modes: from the ends of minibatch Adam runs (``adam_ends``), full-data Newton only where one lands elsewhere.

``adam_ends`` runs Adam searches at once (``vmap``); with ``dispersed=S`` it adds ``S`` antithetic, over-dispersed
starts ``+- 2u`` with ``u ~ U(-1, 1)^d`` around the origin of the (unconstrained) parameter space, as Stan initialises
in ``(-2, 2)``; antithetic pairs put every coordinate's starts on both sides of the origin, where the mirror
modes of ``x ~ N(theta^2, 1)`` or a label-switched mixture lie. Each end point (the mean of its last quarter
of iterates, so minibatch noise averages out) is compared with the known modes by the Mahalanobis distance
under their Laplace precision (``modes_from_ends``); an end point more than ``SEPARATION`` Laplace s.d.s from every
known mode gets one full-data pass (gradient and Hessian, one compiled function for all end points), and only if the
Newton step from it also lands that far from every known mode is it polished by full-data Newton (``polish``, on the
same compiled pass), which stops as soon as a step enters a known mode's basin.
A unimodal posterior thus costs the Adam minibatches and at most one pass per start.
A polished point is a new mode if Newton converged to a strictly concave point ``SEPARATION`` s.d.s from
every known mode, with a Laplace mass at least ``MIN_MASS`` of the heaviest.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.compiling import ONE_OFF_WORK, compile_options
from minibatch_mcmc.data.arrays import DataSource, gathers_rows, take
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.data.passes import DEFAULT_CHUNK, full_data_tree_sum
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import (
    ModeResult,
    checked_pass,
    full_pass_fns,
    log_posterior_parts,
    newton_direction,
    newton_loop,
    polished,
)

PyTree = Any

SEPARATION = 4.0
"""Laplace s.d.s (Mahalanobis distance) that two points must be apart to be different modes."""

FINAL_RATE = 0.01
"""Adam's learning rate at the last step, relative to the first (cosine decay)."""

TAIL = 0.25
"""Share of the last Adam iterates averaged into an end point."""

POLISH_TOL = 1e-6
"""Newton's convergence tolerance when polishing a new mode, relative to ``1 + N`` (``find_mode``'s default ``tol``)."""

CHORD_PASSES = 3
"""Full-data gradient passes (all ends at once) of the chord steps that bring Adam's ends into the first mode's basin."""

MIN_MASS = 1e-3
"""Smallest Laplace mass, relative to the heaviest mode, of a mode that is reported."""


class LocalMode(NamedTuple):
    """A mode: its position, tempered log posterior and Laplace covariance (flattened order)."""

    theta: PyTree
    log_posterior: float
    covariance: np.ndarray

    @property
    def log_mass(self) -> float:
        """Laplace approximation of the log of the posterior mass around the mode (up to a shared constant)."""
        return self.log_posterior + 0.5 * float(np.linalg.slogdet(self.covariance)[1])


class ModeSearch(NamedTuple):
    """The modes found (the first one given first) and what the search cost."""

    modes: tuple[LocalMode, ...]
    data_used: int
    seconds: float


class AdamEnds(NamedTuple):
    """Where minibatch Adam ended from each start (flat, float64), and where a start met a non-finite value."""

    ends: np.ndarray
    """The mean of each start's last quarter of iterates."""
    ok: np.ndarray
    """Whether every step's minibatch log posterior and gradient were finite."""
    first_bad: np.ndarray
    """The step at which each start first met a non-finite value (-1: never)."""
    stopped: np.ndarray
    """The point each start stopped at: where it met the non-finite value (it stays there), else its last iterate."""


def adam_ends(
    model: Model,
    arrays: PyTree,
    n: int,
    starts: jax.Array,
    unravel,
    key: jax.Array,
    temperature: float,
    steps: int,
    b: int,
    learning_rate: float,
    shared: bool = False,
    dispersed: int | None = None,
) -> AdamEnds:
    """Vmapped minibatch Adam (cosine-decayed rate) from each start: the mean of the last quarter of iterates, and finiteness.

    ``shared``: every start reads the same minibatch at each step (``steps * b`` rows read in all, not per start).
    ``dispersed=S`` (``S >= 0``): ``k_starts, k_adam = split(key)``, after ``starts`` the ``S`` points
    ``dispersed_points(k_starts, 0, S)`` and Adam on ``k_adam``, all drawn in the compiled search (no draw op by op)."""
    log_prior, log_lik_sum = log_posterior_parts(model, unravel, temperature)
    opt = optax.adam(optax.cosine_decay_schedule(learning_rate, steps, alpha=FINAL_RATE))
    tail = max(1, int(steps * TAIL))
    count = starts.shape[0] + (dispersed or 0)

    def estimate(flat, batch):
        return log_prior(flat) + (n / b) * log_lik_sum(flat, batch)

    def minibatch(k, arrays, read):
        return read if read is not None else take(arrays, chunk_indices(k, jnp.zeros((), jnp.int32), b, n)[0])

    def one_start(flat, keys, arrays, read):
        def one(carry, x):
            flat, state, ok, total, bad = carry
            i, k, rows = x
            value, grad = jax.value_and_grad(estimate)(flat, minibatch(k, arrays, rows))
            ok = ok & jnp.isfinite(value) & jnp.all(jnp.isfinite(grad))
            bad = jnp.where((bad < 0) & ~ok, i, bad)
            updates, new_state = opt.update(-jnp.where(ok, grad, 0.0), state, flat)
            flat = jnp.where(ok, optax.apply_updates(flat, updates), flat)
            total = total + jnp.where(i >= steps - tail, flat, 0.0)
            return (flat, new_state, ok, total, bad), None

        init = (flat, opt.init(flat), jnp.asarray(True), jnp.zeros_like(flat), jnp.asarray(-1, jnp.int32))
        (last, _, ok, total, bad), _ = jax.lax.scan(one, init, (jnp.arange(steps, dtype=jnp.int32), keys, read))
        return total / tail, ok, bad, last

    def step_keys(key):
        k_starts, key = jax.random.split(key) if dispersed is not None else (None, key)
        per_start = jax.random.split(key, count)
        return k_starts, jax.vmap(lambda k: jax.random.split(key if shared else k, steps))(per_start)

    def search(starts, key, arrays, read):
        k_starts, keys = step_keys(key)
        if dispersed is not None:  # 2u is exact in any float type: the points dispersed_points draws, cast
            half = 2.0 * jax.random.uniform(k_starts, (dispersed // 2, starts.shape[1]), minval=-1.0, maxval=1.0)
            starts = jnp.concatenate([starts, jnp.concatenate([half, -half]).astype(starts.dtype)])
        return jax.vmap(one_start, in_axes=(0, 0, None, None))(starts, keys, arrays, read)

    read = None
    if shared and gathers_rows(arrays):  # every step's rows read on the host first: no callback, a cacheable program
        idx = jax.jit(
            lambda k: jax.vmap(lambda s: chunk_indices(s, jnp.zeros((), jnp.int32), b, n)[0])(step_keys(k)[1][0])
        )
        read = jax.tree_util.tree_map(lambda a: a.reshape((steps, b) + a.shape[1:]), take(arrays, idx(key).reshape(-1)))
    options = compile_options(count * steps * b * starts.shape[1], ONE_OFF_WORK)  # rows evaluated x d
    ends, ok, bad, last = jax.jit(search, compiler_options=options)(
        starts, key, None if read is not None else arrays, read
    )  # the rows an argument, not a constant
    return AdamEnds(np.asarray(ends, np.float64), np.asarray(ok), np.asarray(bad), np.asarray(last, np.float64))


def polish(
    value_fn: Callable,
    derivatives: Callable,
    source: DataSource,
    unravel: Callable,
    target: jax.Array,
    newton_steps: int,
    modes: list[LocalMode],
) -> tuple[ModeResult | None, int]:
    """Full-data Newton from ``target`` on the search's compiled passes (``find_mode`` with no Adam phase, not recompiled).

    Returns the result and the rows read; the result is None when a step enters a known mode's basin (within
    ``SEPARATION`` Laplace s.d.s of one): that path leads to a mode already found, so it is not followed to the end."""
    start, threshold = time.perf_counter(), POLISH_TOL * (1 + source.n)
    known = lambda flat: not is_new(np.asarray(flat, np.float64), modes)  # noqa: E731 - inside a known basin
    flat, last, steps, passes = newton_loop(
        value_fn, derivatives, source.arrays(), target, newton_steps, threshold, stop=known
    )
    if known(flat):
        return None, passes * source.n
    grad_norm = float(np.linalg.norm(last.grad))
    return ModeResult(
        unravel(flat),
        last.value,
        grad_norm,
        last.hessian,
        passes * source.n,
        time.perf_counter() - start,
        steps,
        polished(last, threshold),
        last.grad,
    ), passes * source.n


def distance(flat: np.ndarray, mode: LocalMode) -> float:
    """Mahalanobis distance of ``flat`` from ``mode`` in its Laplace s.d.s."""
    diff = flat - np.asarray(ravel_pytree(mode.theta)[0], np.float64)
    return float(np.sqrt(diff @ np.linalg.solve(mode.covariance, diff)))


def is_new(flat: np.ndarray, modes: list[LocalMode], slack: float = 0.0) -> bool:
    """Whether ``flat`` is more than ``SEPARATION + slack`` Laplace s.d.s from every known mode."""
    return all(distance(flat, m) > SEPARATION + slack for m in modes)


def as_local(mode: ModeResult) -> LocalMode | None:
    """The converged, strictly concave result of ``find_mode`` as a ``LocalMode``, else ``None``."""
    if not mode.converged or mode.hessian is None:
        return None
    neg = -0.5 * (mode.hessian + mode.hessian.T)
    lam = np.linalg.eigvalsh(neg)
    if lam[0] <= lam[-1] * neg.shape[0] * np.finfo(np.float64).eps:
        return None
    return LocalMode(mode.theta_hat, float(mode.log_posterior), np.linalg.inv(neg))


def modes_from_ends(
    model: Model,
    source: DataSource,
    first: LocalMode,
    ends: np.ndarray,
    temperature: float,
    newton_steps: int,
    used: int,
    start: float,
    slack: float = 0.0,
) -> ModeSearch:
    """The modes that Adam's finite end points ``ends`` lead to besides ``first``; ``used`` rows and the clock ``start`` so far.

    An end within ``SEPARATION + slack`` s.d.s of a known mode is in its basin (``slack``: how far Adam's end from the
    start stopped from ``first``, the minibatch error every end carries)."""
    flat0, unravel = ravel_pytree(first.theta)
    modes = [first]
    ends, read = chord_filter(
        model, source, first, np.asarray([e for e in ends if is_new(e, modes, slack)]), temperature
    )
    used += read
    if ends.shape[0] == 0:
        return ModeSearch((first,), used, time.perf_counter() - start)
    value_fn, derivatives = full_pass_fns(
        model, unravel, temperature, source.n, DEFAULT_CHUNK, with_hessian=True
    )  # one compilation
    for end in ends:
        if not is_new(end, modes, slack):
            continue
        try:  # one full pass: where a Newton step from the end point lands
            here = checked_pass(
                derivatives, jnp.asarray(end, flat0.dtype), source.arrays(), "multi-start", "at an Adam end point"
            )
            used += source.n
            target = end + newton_direction(here.hessian, here.grad)
            if not is_new(target, modes):  # in a known mode's basin: Adam's end was only short of it
                continue
            polished, read = polish(
                value_fn, derivatives, source, unravel, jnp.asarray(target, flat0.dtype), newton_steps, modes
            )
        except ValueError:  # a start in a region of non-finite density: not a mode
            continue
        used += read
        local = None if polished is None else as_local(polished)
        if local is not None and is_new(np.asarray(ravel_pytree(local.theta)[0], np.float64), modes):
            modes.append(local)
    heaviest = max(m.log_mass for m in modes)
    kept = [m for m in modes if m is first or m.log_mass - heaviest >= np.log(MIN_MASS)]
    kept = [first] + sorted((m for m in kept if m is not first), key=lambda m: -m.log_mass)
    return ModeSearch(tuple(kept), used, time.perf_counter() - start)


def chord_filter(
    model: Model, source: DataSource, first: LocalMode, ends: np.ndarray, temperature: float
) -> tuple[np.ndarray, int]:
    """The ``ends`` (flat, float64) that ``CHORD_PASSES`` chord steps ``x + Sigma g(x)`` (``Sigma`` the first mode's Laplace
    covariance, ``g`` the full-data gradient, every end on one pass) leave outside its basin, and the rows read.

    A chord step lands on the mode of a Gaussian posterior from anywhere, so on a unimodal posterior Adam's ends (in high
    dimension tens of s.d.s from the mode: minibatch noise) join the first mode's basin after a gradient pass or two,
    not a Hessian pass and a Newton polish each; an end at another mode has ``g ~ 0`` there and stays outside."""
    if ends.shape[0] == 0:
        return ends, 0
    flat0, unravel = ravel_pytree(first.theta)
    log_prior, log_lik_sum = log_posterior_parts(model, unravel, temperature)
    n, arrays = source.n, source.arrays()

    @jax.jit
    def gradients(points: jax.Array) -> jax.Array:
        lik = full_data_tree_sum(
            lambda rows: jax.vmap(jax.grad(lambda x: log_lik_sum(x, rows)))(points), arrays, n, DEFAULT_CHUNK
        )
        return lik + jax.vmap(jax.grad(log_prior))(points)

    cov, read, points, left = np.asarray(first.covariance, np.float64), 0, ends, np.arange(ends.shape[0])
    for _ in range(CHORD_PASSES):
        grads = np.asarray(gradients(jnp.asarray(points, flat0.dtype)), np.float64)
        read += n
        finite = np.all(np.isfinite(grads), axis=1)  # a non-finite end goes on, as it was, to modes_from_ends' checks
        points = np.where(finite[:, None], points + grads @ cov.T, points)
        outside = np.asarray([not ok or is_new(p, [first]) for p, ok in zip(points, finite)], bool)
        points, left = points[outside], left[outside]
        if left.size == 0 or not np.all(finite[outside]):
            break
    return ends[left], read


def describe(modes: tuple[LocalMode, ...]) -> str:
    """One line per mode: position, log posterior and relative Laplace mass."""
    heaviest = max(m.log_mass for m in modes)
    lines = []
    for i, m in enumerate(modes):
        flat = np.asarray(ravel_pytree(m.theta)[0], np.float64)
        lines.append(
            f"mode {i}: theta = {np.array2string(flat, precision=4, threshold=8)}, log density {m.log_posterior:.6g},"
            f" Laplace mass {np.exp(m.log_mass - heaviest):.3g} of the heaviest"
        )
    return "; ".join(lines)


def warn_several_modes(modes: tuple[LocalMode, ...]) -> None:
    """Warn, naming them, when the search found more than one mode: proxy-based sampling at temperature 1 is local."""
    if len(modes) > 1:
        warnings.warn(
            f"the posterior has {len(modes)} modes ({describe(modes)}); proxy-based sampling at "
            "temperature 1 is local: auto_sample starts chains in every mode, each with a proxy centred on its mode, "
            "so that R-hat shows them, but the chains will not mix between modes and the modes' weights are not "
            "estimated. Use a tempered sampler (MINTEE, CMINT) or an exact full-data test for the weights",
            stacklevel=4,
        )
