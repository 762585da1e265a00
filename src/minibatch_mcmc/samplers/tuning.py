"""Tuning a scalar proposal scale to a target acceptance rate: dual averaging, then Robbins-Monro refinement.

The caller supplies ``kernel_for_scale(scale) -> Kernel``, so any proposal, acceptance test and estimator can
be tuned; ``scale`` reaches it as a traced value inside jitted windows of ``window_size`` steps.

In the first quarter of the windows the log scale moves after every step by dual averaging on the acceptance
indicator (Hoffman & Gelman 2014, as in Stan and BlackJAX):
``H_t = (1 - 1/(t + t0)) H_{t-1} + (target - a_t) / (t + t0)``, ``log s_t = mu - sqrt(t) / gamma * H_t``,
``log s_bar_t = t^{-kappa} log s_t + (1 - t^{-kappa}) log s_bar_{t-1}``; this finds the right order of
magnitude quickly from any start. A 0/1 indicator makes the per-step iterates jumpy, so the other windows
holds the scale fixed within each window and, from ``log s_bar``, takes Robbins-Monro steps on the window's
acceptance rate ``log s_{k+1} = log s_k + g (rate_k - target) / k``; the last of these is returned.

``tune_chains`` tunes all of a run's chains on the block runner that sampling then reuses
(``scaled_runner``: the scale is an argument of the one compiled scan, so it cannot change inside a
window). Its windows are the runner's chunks, and its dual averaging moves once per window, ``t`` counting
windows and ``a_t`` the window's acceptance rate over all chains (and over the steps ``counted`` marks:
for a mixture, those of the tuned component); the Robbins-Monro windows are as above. A window's rate pools
``chains x steps`` indicators, so the coarse phase takes fewer, less noisy steps than the per-step one; and its
``mu`` is ``log initial_scale``, not Stan's ``log(10 initial_scale)``: the first iterate sits at ``mu``, for a whole
window here, and at 10 times MALA's scale a window of MHminibatch tests accepted nothing and read 9 times the rows
(logistic regression, d = 10, N = 10^5). The starting scales are the diffusion-limit optima in the Laplace-whitened
coordinates, so the right order of magnitude is already near.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.checks import check_int, check_positive, check_probability
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.samplers.kernel import ChainState, Kernel
from minibatch_mcmc.samplers.keys import as_key, split_step, step_keys
from minibatch_mcmc.samplers.scaled_runner import ScaledRunner, scale_array

PyTree = Any

GAMMA = 0.05
"""Dual-averaging shrinkage towards ``mu`` (Stan's default)."""
T0 = 10.0
"""Dual-averaging offset damping the first iterations (Stan's default)."""
KAPPA = 0.75
"""Dual-averaging iterate-averaging exponent (Stan's default)."""
ROBBINS_MONRO_GAIN = 3.0
"""Gain of the per-window refinement, about ``1 / |d acceptance / d log scale|`` of a random walk near 0.234."""


class DualAveragingState(NamedTuple):
    """Current and averaged log scale, the averaged acceptance error ``H_t`` and the iteration ``t``."""

    log_scale: jax.Array
    log_scale_avg: jax.Array
    error_avg: jax.Array
    step: jax.Array


class TuneResult(NamedTuple):
    """The tuned scale, where the chain ended, the acceptance rate of each window and the work it took."""

    scale: float
    """Tuned proposal scale (the dual-averaging iterate average)."""
    position: PyTree
    """Position of the chain after the last window."""
    state: ChainState
    """Kernel state after the last window."""
    acceptance: np.ndarray
    """Acceptance rate of each window, shape ``(num_windows,)``."""
    data_used: int
    """Data points the acceptance tests touched: ``sum(outcome.batch_size + outcome.hidden_data)``."""
    seconds: float
    """Wall-clock seconds of the tuning run."""
    compilations: int = 0
    """Compilations of the jitted tuning window (1: the scale and the dual-averaging switch are traced arguments)."""


def dual_averaging_init(initial_scale: float, dtype: Any = jnp.float32) -> DualAveragingState:
    """Start at ``initial_scale`` with no accumulated error."""
    log_s = jnp.log(jnp.asarray(initial_scale, dtype))
    return DualAveragingState(log_s, log_s, jnp.zeros((), dtype), jnp.zeros((), jnp.int32))


def dual_averaging_update(state: DualAveragingState, accept: jax.Array, target: float, mu: jax.Array, xp: Any = jnp) -> DualAveragingState:
    """One dual-averaging step on the log scale from the acceptance statistic ``accept`` in ``[0, 1]`` (``xp=np``: on the host)."""
    t = state.step + 1
    tf = t.astype(state.log_scale.dtype)
    w = 1.0 / (tf + T0)
    error_avg = (1.0 - w) * state.error_avg + w * (target - accept.astype(tf.dtype))
    log_scale = mu - xp.sqrt(tf) / GAMMA * error_avg
    eta = tf ** (-KAPPA)
    log_scale_avg = eta * log_scale + (1.0 - eta) * state.log_scale_avg
    return DualAveragingState(log_scale, log_scale_avg, error_avg, t)


def tune_scale(
    kernel_for_scale: Callable[[jax.Array], Kernel],
    data: PyTree | DataSource,
    position: PyTree,
    *,
    key: jax.Array | int,
    target_accept: float = 0.234,
    num_windows: int = 20,
    window_size: int = 50,
    initial_scale: float = 1.0,
    temperature: float = 1.0,
) -> TuneResult:
    """Adapt a scalar proposal scale by dual averaging until the acceptance rate reaches ``target_accept``.

    Runs ``num_windows`` jitted windows of ``window_size`` steps from ``position``; the scale changes after
    every step, starting from ``initial_scale`` and shrinking towards ``10 * initial_scale`` (Stan's ``mu``).
    """
    target_accept = check_probability(target_accept, "target_accept")
    num_windows = check_int(num_windows, "num_windows", 1)
    window_size = check_int(window_size, "window_size", 1)
    initial_scale = check_positive(initial_scale, "initial_scale")
    temperature = check_positive(temperature, "temperature")
    key = as_key(key)
    arrays = as_data_source(data).arrays()
    flat, _ = ravel_pytree(position)
    dtype = flat.dtype if jnp.issubdtype(flat.dtype, jnp.floating) else jnp.float32
    mu = jnp.log(jnp.asarray(10.0 * initial_scale, dtype))
    temp = jnp.asarray(temperature, dtype)
    start = time.perf_counter()
    traces = [0]

    @jax.jit
    def run_window(key: jax.Array, state: ChainState, da: DualAveragingState, log_scale: jax.Array, arrays: PyTree, per_step: jax.Array):
        traces[0] += 1  # once per compilation
        def one(carry, k):
            state, da, log_scale = carry
            state, outcome = kernel_for_scale(jnp.exp(log_scale)).step(k, state, arrays, temp)
            updated = dual_averaging_update(da, outcome.accepted, target_accept, mu)  # kept only while per_step (traced: one compilation)
            da = jax.tree_util.tree_map(lambda new, old: jnp.where(per_step, new, old), updated, da)
            log_scale = jnp.where(per_step, da.log_scale, log_scale)
            used = jnp.asarray(outcome.batch_size, jnp.int32) + jnp.asarray(outcome.hidden_data, jnp.int32)
            return (state, da, log_scale), (outcome.accepted, used, outcome.nonfinite)

        (state, da, _), (accepted, used, nonfinite) = jax.lax.scan(one, (state, da, log_scale), jax.random.split(key, window_size))
        return state, da, jnp.mean(accepted.astype(jnp.float32)), used, jnp.any(nonfinite)

    state = kernel_for_scale(jnp.asarray(initial_scale, dtype)).init(position)
    da = dual_averaging_init(initial_scale, dtype)
    log_scale = da.log_scale
    coarse = (num_windows + 3) // 4
    acceptance, data_used = np.zeros(num_windows), 0
    for w, k in enumerate(jax.random.split(key, num_windows)):
        state, da, rate, used, nonfinite = run_window(k, state, da, log_scale, arrays, jnp.asarray(w < coarse))
        if bool(nonfinite):
            raise ValueError(
                f"tune_scale: a non-finite log-likelihood ratio in window {w} (scale near {float(jnp.exp(log_scale)):.4g});"
                " check the model's support or lower initial_scale"
            )
        acceptance[w] = float(rate)
        data_used += int(np.sum(np.asarray(used, np.int64)))
        if w < coarse:
            log_scale = da.log_scale_avg if w == coarse - 1 else da.log_scale
        else:  # Robbins-Monro on the window's acceptance rate, gain ROBBINS_MONRO_GAIN / k
            log_scale = log_scale + ROBBINS_MONRO_GAIN * (rate - target_accept) / (w - coarse + 1)
    return TuneResult(
        compilations=traces[0],
        scale=float(jnp.exp(log_scale)),
        position=state.position,
        state=state,
        acceptance=acceptance,
        data_used=data_used,
        seconds=time.perf_counter() - start,
    )


def tune_chains(
    runner: ScaledRunner,
    data: PyTree | DataSource,
    positions: PyTree,
    *,
    key: jax.Array | int,
    target_accept: float = 0.234,
    num_windows: int = 20,
    initial_scale: float = 1.0,
    temperature: float = 1.0,
    counted: Callable[[jax.Array], jax.Array] | None = None,
) -> TuneResult:
    """Adapt the scale on all ``runner.num_chains`` chains from the batched ``positions``, one runner call per window.

    ``counted(k_proposal) -> bool`` marks the steps whose acceptance counts (all if None). The result's
    ``position`` and ``state`` are the chains' (batched); ``compilations`` counts the runner's traces so far.
    """
    target_accept = check_probability(target_accept, "target_accept")
    num_windows = check_int(num_windows, "num_windows", 1)
    initial_scale = check_positive(initial_scale, "initial_scale")
    key, arrays, start = as_key(key), as_data_source(data).arrays(), time.perf_counter()
    length, chains = runner.chunk, runner.num_chains
    steps = np.arange(num_windows * length, dtype=np.int32).reshape(num_windows, length)
    temps = np.full(length, check_positive(temperature, "temperature"), np.float32)
    weights = np.ones((num_windows, length, chains), bool)
    if counted is not None:  # which steps move with the tuned component: a function of the step keys alone
        marks = jax.jit(jax.vmap(lambda t: jax.vmap(lambda k: counted(split_step(k)[0]))(step_keys(key, t, chains))))
        weights = np.asarray(marks(steps.reshape(-1))).reshape(weights.shape)
    state = jax.vmap(runner.kernel_for_scale(scale_array(initial_scale, positions)).init)(positions)
    log_s0 = math.log(initial_scale)
    da = DualAveragingState(np.float64(log_s0), np.float64(log_s0), np.float64(0.0), np.int64(0))
    mu, log_scale, coarse = log_s0, log_s0, (num_windows + 3) // 4  # mu: the start itself (see the module docstring)
    acceptance, data_used = np.full(num_windows, math.nan), 0
    for w in range(num_windows):
        state, _, recs = runner.run_block(key, state, arrays, steps[w], temps, scale_array(math.exp(log_scale), positions))
        recs = jax.device_get({k: recs[k] for k in ("accepted", "batch_size", "hidden_data", "nonfinite")})
        if np.any(recs["nonfinite"]):
            raise ValueError(f"tune_chains: a non-finite log-likelihood ratio in window {w} (scale near {math.exp(log_scale):.4g});"
                             " check the model's support or lower initial_scale")
        data_used += int(np.sum(recs["batch_size"], dtype=np.int64) + np.sum(recs["hidden_data"], dtype=np.int64))
        if not weights[w].any():
            continue
        rate = acceptance[w] = float(np.mean(np.asarray(recs["accepted"])[weights[w]]))
        if w < coarse:  # dual averaging, one step per window
            da = dual_averaging_update(da, np.float64(rate), target_accept, mu, xp=np)
            log_scale = float(da.log_scale_avg if w == coarse - 1 else da.log_scale)
        else:  # Robbins-Monro on the window's acceptance rate, gain ROBBINS_MONRO_GAIN / k
            log_scale += ROBBINS_MONRO_GAIN * (rate - target_accept) / (w - coarse + 1)
    return TuneResult(scale=math.exp(log_scale), position=state.position, state=state, acceptance=acceptance, data_used=data_used,
                      seconds=time.perf_counter() - start, compilations=runner.compilations())


def untuned(position: Any) -> TuneResult:
    """What ``tune`` returns for a proposal with nothing to tune: scale 1, no acceptance measured, no cost."""
    return TuneResult(scale=1.0, position=position, state=None, acceptance=np.array([math.nan]), data_used=0, seconds=0.0)
