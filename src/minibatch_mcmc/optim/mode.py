"""The posterior mode and its Hessian: the centre and the Laplace covariance of a warm-up.

``find_mode`` maximises the tempered log posterior ``log p0(theta) + (1/K) sum_i log p(x_i|theta)`` over any
pytree ``theta`` in two phases. Phase 1 runs optax Adam on minibatch estimates
``log p0(theta) + (N/b) sum_{i in batch} log p(x_i|theta) / K`` (``b`` points drawn without replacement),
which gets near the mode touching few points. Phase 2 polishes on the full data: Newton steps whose gradient
and Hessian sums are streamed over the data in chunks (one ``d x d`` Hessian per chunk, never per datum), each
step a trust-region step measured in Laplace s.d.s (``optim.trust_region``: the Hessian made positive definite where
the log posterior is not concave, one pass per trial), until ``||grad|| <= tol * (1 + N)`` or the Newton decrement is
below ``POLISH_DECREMENT`` s.d.s at a concave point. Above ``MAX_DENSE_DIM`` parameters the Hessian is not formed: optax L-BFGS on
the streamed value and gradient takes its place and no Hessian is returned.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.control_variates.taylor import MAX_DENSE_DIM
from minibatch_mcmc.data.arrays import as_data_source, take
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.data.passes import DEFAULT_CHUNK, full_data_tree_sum
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.host_blas import host_blas
from minibatch_mcmc.optim.trust_region import decrement, finite, gain, next_radius, trust_step
from minibatch_mcmc.samplers.keys import as_key

PyTree = Any


POLISH_DECREMENT = 1e-3
"""Newton decrement (Laplace s.d.s to the mode) below which the full-data Newton steps stop, whatever the gradient's norm."""


class ModeResult(NamedTuple):
    """The mode found, the full-data log posterior, gradient norm and Hessian there, and the work it took."""

    theta_hat: PyTree
    """The mode, with the structure of ``theta0``."""
    log_posterior: float
    """Tempered full-data log posterior at ``theta_hat``."""
    grad_norm: float
    """Euclidean norm of its gradient at ``theta_hat``."""
    hessian: np.ndarray | None
    """``d x d`` float64 Hessian of the log posterior at ``theta_hat`` (flattened order), or ``None`` above ``MAX_DENSE_DIM``."""
    data_used: int
    """Data points evaluated: Adam's minibatches plus ``N`` for every full-data pass."""
    seconds: float
    """Wall-clock seconds of the whole search."""
    newton_steps_taken: int
    """Accepted full-data steps (Newton, or L-BFGS above ``MAX_DENSE_DIM``)."""
    converged: bool
    """Whether ``||grad|| <= tol * (1 + N)`` at ``theta_hat``."""
    gradient: np.ndarray | None = None
    """Float64 gradient of the log posterior at ``theta_hat`` (flattened order)."""


class FullPass(NamedTuple):
    """Streamed full-data log posterior, its gradient and (dense path) Hessian at one flat point."""

    value: float
    grad: np.ndarray
    hessian: np.ndarray | None


def find_mode(
    model: Model,
    data: PyTree,
    theta0: PyTree,
    *,
    key: jax.Array | int,
    temperature: float = 1.0,
    adam_steps: int = 500,
    batch_size: int = 1000,
    learning_rate: float = 1e-2,
    newton_steps: int = 10,
    tol: float = 1e-6,
    chunk: int = DEFAULT_CHUNK,
) -> ModeResult:
    """Mode of the tempered log posterior: minibatch Adam, then streamed full-data Newton (L-BFGS above ``MAX_DENSE_DIM``).

    ``batch_size`` is capped at ``N``; ``newton_steps`` bounds the full-data iterations of either phase-2 method.
    """
    temperature = check_positive(temperature, "temperature")
    adam_steps = check_int(adam_steps, "adam_steps", 0)
    batch_size = check_int(batch_size, "batch_size", 1)
    learning_rate = check_positive(learning_rate, "learning_rate")
    newton_steps = check_int(newton_steps, "newton_steps", 0)
    tol = check_positive(tol, "tol")
    chunk = check_int(chunk, "chunk", 1)
    key = as_key(key)
    source = as_data_source(data)
    arrays, n = source.arrays(), source.n
    flat0, unravel = start_point(theta0)
    with host_blas(int(flat0.size)):  # the threads of the host's d x d factorisations (optim.host_blas)
        start = time.perf_counter()

        flat, adam_used = run_adam(
            model, arrays, n, flat0, unravel, key, temperature, adam_steps, min(batch_size, n), learning_rate
        )
        threshold = tol * (1 + n)
        if flat0.size <= MAX_DENSE_DIM:
            flat, last, steps, passes = run_newton(
                model, arrays, n, flat, unravel, temperature, newton_steps, threshold, chunk
            )
        else:
            flat, last, steps, passes = run_lbfgs(
                model, arrays, n, flat, unravel, temperature, newton_steps, threshold, chunk
            )
        grad_norm = float(np.linalg.norm(last.grad))
        return ModeResult(
            theta_hat=unravel(flat),
            log_posterior=last.value,
            grad_norm=grad_norm,
            hessian=last.hessian,
            data_used=adam_used + passes * n,
            seconds=time.perf_counter() - start,
            newton_steps_taken=steps,
            converged=polished(last, threshold) if last.hessian is not None else grad_norm <= threshold,
            gradient=last.grad,
        )


def start_point(theta0: PyTree) -> tuple[jax.Array, Callable[[jax.Array], PyTree]]:
    """The flattened start and its unravel; a non-float or non-finite start is an error."""
    flat, unravel = ravel_pytree(theta0)
    if flat.size == 0 or not jnp.issubdtype(flat.dtype, jnp.floating):
        raise ValueError(
            f"theta0 must be a non-empty pytree of floating-point arrays; got {flat.size} elements of dtype {flat.dtype}"
        )
    bad = np.flatnonzero(~np.isfinite(np.asarray(flat)))
    if bad.size:
        raise ValueError(f"theta0 has a non-finite value {float(flat[bad[0]])} at flattened index {int(bad[0])}")
    return flat, unravel


def log_posterior_parts(
    model: Model, unravel: Callable[[jax.Array], PyTree], temperature: float
) -> tuple[Callable[[jax.Array], jax.Array], Callable[[jax.Array, PyTree], jax.Array]]:
    """``log p0`` and the tempered summed log-likelihood of a batch, both as functions of the flat parameter."""

    def log_prior(flat: jax.Array) -> jax.Array:
        return jnp.asarray(model.log_prior(unravel(flat)), flat.dtype)

    def log_lik_sum(flat: jax.Array, rows: PyTree) -> jax.Array:
        return jnp.sum(model.log_lik(unravel(flat), rows)) / jnp.asarray(temperature, flat.dtype)

    return log_prior, log_lik_sum


def run_adam(
    model: Model,
    arrays: PyTree,
    n: int,
    flat0: jax.Array,
    unravel: Callable[[jax.Array], PyTree],
    key: jax.Array,
    temperature: float,
    steps: int,
    b: int,
    learning_rate: float,
) -> tuple[jax.Array, int]:
    """Phase 1: ``steps`` Adam updates on minibatch estimates of the log posterior; the end point and data used."""
    if steps == 0:
        return flat0, 0
    log_prior, log_lik_sum = log_posterior_parts(model, unravel, temperature)
    opt = optax.adam(learning_rate)
    scale = n / b

    def estimate(flat: jax.Array, batch: PyTree) -> jax.Array:
        return log_prior(flat) + scale * log_lik_sum(flat, batch)

    @jax.jit
    def run(flat: jax.Array, arrays: PyTree, keys: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        def one(carry, x):
            flat, opt_state, bad_step, bad_value = carry
            i, k = x
            idx, _ = chunk_indices(k, jnp.zeros((), jnp.int32), b, n)
            value, grad = jax.value_and_grad(estimate)(flat, take(arrays, idx))
            first_bad = (bad_step < 0) & ~(jnp.isfinite(value) & jnp.all(jnp.isfinite(grad)))
            updates, new_state = opt.update(-grad, opt_state, flat)
            keep = (bad_step >= 0) | first_bad  # freeze at the first non-finite estimate
            flat = jnp.where(keep, flat, optax.apply_updates(flat, updates))
            opt_state = jax.tree_util.tree_map(lambda new, old: jnp.where(keep, old, new), new_state, opt_state)
            return (flat, opt_state, jnp.where(first_bad, i, bad_step), jnp.where(first_bad, value, bad_value)), None

        init = (flat, opt.init(flat), jnp.asarray(-1, jnp.int32), jnp.zeros((), flat.dtype))
        (flat, _, bad_step, bad_value), _ = jax.lax.scan(one, init, (jnp.arange(steps, dtype=jnp.int32), keys))
        return flat, bad_step, bad_value

    flat, bad_step, bad_value = run(flat0, arrays, jax.random.split(key, steps))
    if int(bad_step) >= 0:
        where = (
            "at the start theta0"
            if int(bad_step) == 0
            else f"in a region reached from a finite start theta0, at Adam step "
            f"{int(bad_step)} (position {np.asarray(flat).round(4).tolist()})"
        )
        raise ValueError(
            f"find_mode (Adam phase): non-finite minibatch log posterior or gradient {where} (log posterior estimate"
            f" {float(bad_value)}); check the model's support there (a prior or transform that excludes it) and that log_lik is "
            f"numerically stable, or lower learning_rate={learning_rate}"
        )
    return flat, steps * b


def full_pass_fns(
    model: Model, unravel: Callable[[jax.Array], PyTree], temperature: float, n: int, chunk: int, with_hessian: bool
) -> tuple[Callable[[jax.Array, PyTree], jax.Array], Callable[[jax.Array, PyTree], tuple[jax.Array, ...]]]:
    """Jitted streamed passes: the log posterior alone, and with its gradient (and Hessian when ``with_hessian``)."""
    log_prior, log_lik_sum = log_posterior_parts(model, unravel, temperature)

    @jax.jit
    def value(flat: jax.Array, arrays: PyTree) -> jax.Array:
        return log_prior(flat) + full_data_tree_sum(lambda rows: log_lik_sum(flat, rows), arrays, n, chunk)

    @jax.jit
    def derivatives(flat: jax.Array, arrays: PyTree) -> tuple[jax.Array, ...]:
        def part(rows: PyTree) -> tuple[jax.Array, ...]:
            f = lambda x: log_lik_sum(x, rows)  # noqa: E731 - the chunk's summed log-likelihood
            v, g = jax.value_and_grad(f)(flat)
            return (v, g, jax.hessian(f)(flat)) if with_hessian else (v, g)

        sums = full_data_tree_sum(part, arrays, n, chunk)
        v0, g0 = jax.value_and_grad(log_prior)(flat)
        prior = (v0, g0, jax.hessian(log_prior)(flat)) if with_hessian else (v0, g0)
        return tuple(a + b for a, b in zip(prior, sums))

    return value, derivatives


def checked_pass(derivatives: Callable, flat: jax.Array, arrays: PyTree, phase: str, where: str) -> FullPass:
    """One streamed pass as float64 host arrays; a non-finite value, gradient or Hessian is an error."""
    out = [np.asarray(a, np.float64) for a in derivatives(flat, arrays)]
    value, grad = float(out[0]), out[1]
    hessian = out[2] if len(out) == 3 else None
    for name, arr in (("log posterior", value), ("gradient", grad), ("Hessian", hessian)):
        if arr is not None and not np.all(np.isfinite(arr)):
            raise ValueError(
                f"find_mode ({phase} phase): non-finite full-data {name} {where} (log posterior {value},"
                f" gradient norm {float(np.linalg.norm(grad))}); check theta0 and the model's support"
            )
    return FullPass(value=value, grad=grad, hessian=hessian)


def newton_direction(hessian: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """``(-H)^{-1} grad`` with each eigenvalue of ``-H`` replaced by its absolute value (an ascent direction always)."""
    lam, vec = np.linalg.eigh(-0.5 * (hessian + hessian.T))
    curvature = np.maximum(np.abs(lam), max(float(np.max(np.abs(lam))) * 1e-12, np.finfo(np.float64).tiny))
    return vec @ ((vec.T @ grad) / curvature)


def run_newton(
    model: Model,
    arrays: PyTree,
    n: int,
    flat: jax.Array,
    unravel: Callable[[jax.Array], PyTree],
    temperature: float,
    max_steps: int,
    threshold: float,
    chunk: int,
) -> tuple[jax.Array, FullPass, int, int]:
    """Phase 2 (dense): line-searched Newton steps on streamed sums; the end point, its pass, steps and passes."""
    value_fn, derivatives = full_pass_fns(model, unravel, temperature, n, chunk, with_hessian=True)
    return newton_loop(value_fn, derivatives, arrays, flat, max_steps, threshold)


def newton_loop(
    value_fn: Callable,
    derivatives: Callable,
    arrays: PyTree,
    flat: jax.Array,
    max_steps: int,
    threshold: float,
    stop: Callable[[jax.Array], bool] | None = None,
) -> tuple[jax.Array, FullPass, int, int]:
    """Trust-region Newton steps (``optim.trust_region``) with compiled passes ``full_pass_fns`` made (so several starts share
    one compilation): one pass per trial step, accepted or not, until ``||grad|| <= threshold`` or the Newton decrement is
    below ``POLISH_DECREMENT`` Laplace s.d.s at a concave point. (``value_fn`` is unused: kept for the callers' signature.)

    ``stop(flat)`` true after a step ends the loop before that step's pass (the returned pass is then the point before)."""
    current = checked_pass(derivatives, flat, arrays, "Newton", "at the Newton start point")
    steps, passes, x = 0, 1, np.asarray(flat, np.float64)
    radius = max(decrement(current.grad, current.hessian), 1e-3)
    while steps < max_steps and passes <= 2 * max_steps and not polished(current, threshold):
        s = trust_step(current.grad, current.hessian, radius)
        trial = jnp.asarray(x + s.step, flat.dtype)
        if stop is not None and stop(trial):
            return trial, current, steps + 1, passes  # a step into a known basin: not evaluated
        out = FullPass(*[None if a is None else np.asarray(a, np.float64) for a in derivatives(trial, arrays)])
        out = out._replace(value=float(out.value))
        passes += 1
        taken, ratio = gain(current.value, out.value if finite(out) else np.nan, s.predicted)
        radius = next_radius(radius, ratio, s.length)
        if taken:
            x, current, steps = x + s.step, out, steps + 1
        if radius < 1e-8:
            break
    return jnp.asarray(x, flat.dtype), current, steps, passes


def polished(current: FullPass, threshold: float) -> bool:
    """Converged: ``||grad|| <= threshold``, or a Newton decrement below ``POLISH_DECREMENT`` at a concave point."""
    if float(np.linalg.norm(current.grad)) <= threshold:
        return True
    concave = bool(np.all(np.linalg.eigvalsh(-0.5 * (current.hessian + current.hessian.T)) > 0))
    return concave and decrement(current.grad, current.hessian) <= POLISH_DECREMENT


def run_lbfgs(
    model: Model,
    arrays: PyTree,
    n: int,
    flat: jax.Array,
    unravel: Callable[[jax.Array], PyTree],
    temperature: float,
    max_steps: int,
    threshold: float,
    chunk: int,
) -> tuple[jax.Array, FullPass, int, int]:
    """Phase 2 (large ``d``): optax L-BFGS on the streamed value and gradient; no Hessian is formed."""
    value_fn, derivatives = full_pass_fns(model, unravel, temperature, n, chunk, with_hessian=False)
    opt = optax.lbfgs()

    @jax.jit
    def step(flat: jax.Array, state: optax.OptState, arrays: PyTree):
        def loss(x: jax.Array) -> jax.Array:
            return -value_fn(x, arrays)

        neg_value, neg_grad = optax.value_and_grad_from_state(loss)(flat, state=state)
        updates, state = opt.update(neg_grad, state, flat, value=neg_value, grad=neg_grad, value_fn=loss)
        return optax.apply_updates(flat, updates), state

    def stored(state: optax.OptState, where: str) -> FullPass:
        v, g = (np.asarray(optax.tree.get(state, k), np.float64) for k in ("value", "grad"))
        return checked_pass(lambda *_: (-v, -g), flat, arrays, "L-BFGS", where)

    current = checked_pass(derivatives, flat, arrays, "L-BFGS", "at the L-BFGS start point")
    state = opt.init(flat)
    state = optax.tree.set(
        state, value=jnp.asarray(-current.value, flat.dtype), grad=jnp.asarray(-current.grad, flat.dtype)
    )
    steps, passes = 0, 1
    while steps < max_steps and np.linalg.norm(current.grad) > threshold:
        flat, state = step(flat, state, arrays)
        steps += 1
        passes += int(optax.tree.get(state, "num_linesearch_steps"))
        current = stored(state, f"after L-BFGS step {steps}")
    return flat, current, steps, passes


def laplace_covariance(hessian: np.ndarray) -> np.ndarray:
    """``(-H)^{-1}``: the Laplace covariance from the log-posterior Hessian at the mode; errors if ``-H`` is not positive definite."""
    h = np.asarray(hessian, dtype=np.float64)
    if h.ndim != 2 or h.shape[0] != h.shape[1] or h.shape[0] == 0:
        raise ValueError(f"hessian must be a non-empty square matrix; got shape {h.shape}")
    bad = np.argwhere(~np.isfinite(h))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"hessian has a non-finite entry {h[i, j]} at ({i}, {j}); the Laplace covariance needs finite sums"
        )
    neg = -0.5 * (h + h.T)
    lam = np.linalg.eigvalsh(neg)
    if lam[0] <= lam[-1] * h.shape[0] * np.finfo(np.float64).eps or lam[0] <= 0:
        raise ValueError(
            f"hessian is not negative definite: its largest eigenvalue is {-lam[0]:.6g} (must be < 0, and well away from"
            " 0 relative to the others); theta is not at a strict mode, or the posterior is improper/singular there"
        )
    chol = np.linalg.cholesky(neg)
    inv_chol = np.linalg.solve(chol, np.eye(h.shape[0]))
    return inv_chol.T @ inv_chol
