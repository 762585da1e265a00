"""Tuning a scalar proposal scale to a target acceptance rate: dual averaging, then Robbins-Monro refinement.

``tune_chains`` tunes all of a run's chains on the block runner that sampling then reuses (``scaled_runner``: the
caller's family ``kernel_for_scale(scale) -> Kernel`` compiled once, the scale an argument of the one compiled scan,
so any proposal, acceptance test and estimator can be tuned, and the scale cannot change inside a window). Its windows
are the runner's chunks of ``runner.chunk`` steps.

In the first quarter of the windows the log scale moves once per window by dual averaging (Hoffman & Gelman 2014, as
in Stan and BlackJAX) on the window's acceptance rate ``a_t`` over all chains (and over the steps ``counted`` marks: for
a mixture, those of the tuned component), ``t`` counting windows:
``H_t = (1 - 1/(t + t0)) H_{t-1} + (target - a_t) / (t + t0)``, ``log s_t = mu - sqrt(t) / gamma * H_t``,
``log s_bar_t = t^{-kappa} log s_t + (1 - t^{-kappa}) log s_bar_{t-1}``; this finds the right order of
magnitude quickly from any start. The other windows start from ``log s_bar`` and take Robbins-Monro steps on the
window's acceptance rate, ``log s_{k+1} = log s_k + g (rate_k - target) / k``; the last of these is returned.
A window's rate pools ``chains x steps`` indicators, so the coarse phase takes few, not very noisy steps; and its
``mu`` is ``log initial_scale``, not Stan's ``log(10 initial_scale)``: the first iterate sits at ``mu`` for a whole
window, and at 10 times MALA's scale a window of MHminibatch tests accepted nothing and read 9 times the rows
(logistic regression, d = 10, N = 10^5). The starting scales are the diffusion-limit optima in the Laplace-whitened
coordinates, so the right order of magnitude is already near.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from minibatch_mcmc.checks import check_int, check_positive, check_probability
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.samplers.kernel import ChainState
from minibatch_mcmc.samplers.keys import as_key, split_step, step_keys
from minibatch_mcmc.samplers.scaled_runner import ScaledRunner, run_on, scale_array

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
    """Current and averaged log scale, the averaged acceptance error ``H_t`` and the iteration ``t`` (host scalars)."""

    log_scale: np.float64
    log_scale_avg: np.float64
    error_avg: np.float64
    step: np.int64


class TuneResult(NamedTuple):
    """The tuned scale, where the chains ended, the acceptance rate of each window and the work it took."""

    scale: float
    """Tuned proposal scale (the dual-averaging iterate average)."""
    position: PyTree
    """Positions of the chains after the last window, batched (``untuned``: the unbatched start)."""
    state: ChainState
    """Kernel states after the last window, batched."""
    acceptance: np.ndarray
    """Acceptance rate of each window, shape ``(num_windows,)``."""
    data_used: int
    """Data points the acceptance tests touched: ``sum(outcome.batch_size + outcome.hidden_data)``."""
    seconds: float
    """Wall-clock seconds of the tuning run."""
    compilations: int = 0
    """The runner's compilations so far (1 for all windows: the scale is a traced argument)."""


def dual_averaging_init(initial_scale: float) -> DualAveragingState:
    """Start at ``initial_scale`` with no accumulated error (float64, on the host)."""
    log_s = np.float64(math.log(initial_scale))
    return DualAveragingState(log_s, log_s, np.float64(0.0), np.int64(0))


def dual_averaging_update(state: DualAveragingState, accept: float, target: float, mu: float) -> DualAveragingState:
    """One dual-averaging step on the log scale from the acceptance statistic ``accept`` in ``[0, 1]``."""
    t = state.step + 1
    tf = np.float64(t)
    w = 1.0 / (tf + T0)
    error_avg = (1.0 - w) * state.error_avg + w * (target - np.float64(accept))
    log_scale = mu - np.sqrt(tf) / GAMMA * error_avg
    eta = tf ** (-KAPPA)
    log_scale_avg = eta * log_scale + (1.0 - eta) * state.log_scale_avg
    return DualAveragingState(log_scale, log_scale_avg, error_avg, t)


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
    da = dual_averaging_init(initial_scale)
    mu, log_scale, coarse = (
        float(da.log_scale),
        float(da.log_scale),
        (num_windows + 3) // 4,
    )  # mu: the start itself (module docstring)
    acceptance, data_used = np.full(num_windows, math.nan), 0
    for w in range(num_windows):
        scale = scale_array(math.exp(log_scale), positions)
        ((state, _, recs),) = run_on(runner, key, state, arrays, steps[w], temps, scale)  # one window: one call
        recs = jax.device_get({k: recs[k] for k in ("accepted", "batch_size", "hidden_data", "nonfinite")})
        if np.any(recs["nonfinite"]):
            raise ValueError(
                f"tune_chains: a non-finite log-likelihood ratio in window {w} (scale near {math.exp(log_scale):.4g});"
                " check the model's support or lower initial_scale"
            )
        data_used += int(np.sum(recs["batch_size"], dtype=np.int64) + np.sum(recs["hidden_data"], dtype=np.int64))
        if not weights[w].any():
            continue
        rate = acceptance[w] = float(np.mean(np.asarray(recs["accepted"])[weights[w]]))
        if w < coarse:  # dual averaging, one step per window
            da = dual_averaging_update(da, rate, target_accept, mu)
            log_scale = float(da.log_scale_avg if w == coarse - 1 else da.log_scale)
        else:  # Robbins-Monro on the window's acceptance rate, gain ROBBINS_MONRO_GAIN / k
            log_scale += ROBBINS_MONRO_GAIN * (rate - target_accept) / (w - coarse + 1)
    return TuneResult(
        scale=math.exp(log_scale),
        position=state.position,
        state=state,
        acceptance=acceptance,
        data_used=data_used,
        seconds=time.perf_counter() - start,
        compilations=runner.compilations(),
    )


def untuned(position: Any) -> TuneResult:
    """What the warm-up's tuning phase returns for a proposal with nothing to tune: scale 1, no acceptance measured, no cost."""
    return TuneResult(
        scale=1.0, position=position, state=None, acceptance=np.array([math.nan]), data_used=0, seconds=0.0
    )
