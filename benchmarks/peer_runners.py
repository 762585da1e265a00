"""Timed runners for ``benchmarks/peers.py``: the block loop, MHminibatch with Taylor-proxy control variates
(after ``warmup``), the exact tests SMH-2 and MH-SS-2 (after ``warmup(test="smh" | "mhss")``), BlackJAX NUTS (after ``blackjax.window_adaptation``) and the SGD-step yardstick.

Every runner returns a ``RunTrace``: one chain's draws, the sampling wall time at the end of each jitted
block, the warm-up seconds (and data points, where known) kept apart from sampling, the acceptance rate
and the mean data points read per step.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.control_variates.base import minibatch_rows
from minibatch_mcmc.models import logistic_log_lik, logistic_regression
from minibatch_mcmc.samplers import build_kernel
from minibatch_mcmc.warmup import warmup

PRIOR_SCALE = 1.0


class RunTrace(NamedTuple):
    """Draws of one chain, the sampling wall time at the end of each block, and per-method statistics."""

    draws: np.ndarray
    block_end: np.ndarray
    block_sizes: np.ndarray
    compile_s: float
    warmup_s: float
    accept: float
    extra: str
    data_per_step: float = math.nan
    warmup_data: float = math.nan
    step_s: float = math.nan
    sgd: dict | None = None


class Skipped(NamedTuple):
    """A method that could not run within its cap: why, and the warm-up seconds it would at least need."""

    reason: str
    warmup_s_lower_bound: float


def timed_blocks(block: Callable, state, key: jax.Array, data, time_cap: float, max_blocks: int = 100_000):
    """Run ``block(state, key, data) -> (state, (draws, stats))`` until ``time_cap`` s; the first call compiles."""
    t0 = time.perf_counter()
    jax.block_until_ready(block(state, jax.random.fold_in(key, 10**9), data))
    first = time.perf_counter() - t0
    draws, ends, times, stats = [], [], [], []
    elapsed = 0.0
    for b in range(max_blocks):
        t0 = time.perf_counter()
        state, (dr, st) = jax.block_until_ready(block(state, jax.random.fold_in(key, b), data))
        dt = time.perf_counter() - t0
        elapsed += dt
        draws.append(np.asarray(dr, np.float64))
        ends.append(elapsed)
        times.append(dt)
        stats.append(np.asarray(st, np.float64))
        if elapsed >= time_cap:
            break
    compile_s = max(first - float(np.median(times)), 0.0)
    return np.concatenate(draws), np.array(ends), np.array([len(d) for d in draws]), compile_s, np.concatenate(stats)


def centred_logdensity(data: dict) -> Callable[[jax.Array], jax.Array]:
    """Full-data log posterior with the log-likelihood centred at the MAP (``data["lhat"]``), so float32 sums of N terms keep O(1) differences."""

    def logdensity(theta):
        return jnp.sum(logistic_log_lik(theta, data) - data["lhat"]) - 0.5 * jnp.sum(theta * theta) / PRIOR_SCALE**2

    return logdensity


# ---------------------------------------------------------------- MHminibatch + Taylor proxy


def cv_kernel_block(kernel, steps: int):
    """A jitted scan of ``steps`` kernel steps recording the position, acceptance and data read per step."""
    temp = jnp.float32(1.0)

    @jax.jit
    def block(state, k, data):
        def body(st, kk):
            st, out = kernel.step(kk, st, data, temp)
            used = (out.batch_size + out.hidden_data).astype(jnp.float32)
            return st, (st.position, jnp.stack([out.accepted.astype(jnp.float32), used]))

        return jax.lax.scan(body, state, jax.random.split(k, steps))

    return block


def run_cv(kind: str, data, n, ref, start, args, key) -> RunTrace:
    """``warmup(proposal=kind)`` from theta = 0 (timed, data counted), then its frozen kernel from ``start``."""
    model = logistic_regression(PRIOR_SCALE)
    w = warmup(
        model,
        data,
        jnp.zeros(len(start), jnp.float32),
        key=jax.random.fold_in(key, 1),
        test=mh_minibatch(batch_size=args.cv_m),
        proposal=kind,
    )
    kernel = build_kernel(model, w.proposal, w.test, n, estimator=w.proxy)
    block = cv_kernel_block(kernel, args.cv_block)
    draws, ends, sizes, compile_s, st = timed_blocks(
        block, kernel.init(jnp.asarray(start, jnp.float32)), key, data, args.time_cap
    )
    sgd = step_over_sgd(
        block, kernel.init(jnp.asarray(start, jnp.float32)), data, n, args.cv_m, args.cv_block, args.sgd_repeats
    )
    phases = ", ".join(f"{p} {c.seconds:.1f} s/{c.data / n:.2g} N" for p, c in w.cost.items())
    extra = f"m={args.cv_m}, scale {w.scale:.3g}, warm-up acceptance {w.acceptance:.2f}; warm-up {phases}"
    return RunTrace(
        draws,
        ends,
        sizes,
        compile_s,
        w.total_seconds,
        float(st[:, 0].mean()),
        extra,
        data_per_step=float(st[:, 1].mean()),
        warmup_data=float(w.total_data),
        step_s=float(ends[-1]) / len(draws),
        sgd=sgd,
    )


def run_cv_rw(data, n, ref, start, scale, args, key) -> RunTrace:
    """MHminibatch + Taylor proxy, Laplace-shaped random walk tuned by ``warmup``."""
    return run_cv("random_walk", data, n, ref, start, args, key)


def run_cv_mala(data, n, ref, start, scale, args, key) -> RunTrace:
    """MHminibatch + Taylor proxy, proxy-gradient MALA tuned by ``warmup``."""
    return run_cv("langevin", data, n, ref, start, args, key)


# ---------------------------------------------------------------- exact minibatch tests (SMH, MH-SS)


def run_exact(test: str, data, n, ref, start, args, key) -> RunTrace:
    """``warmup(test=test, proposal="independence", order=2)`` from theta = 0 (mode, Laplace, the logistic GLM proxy
    with bounds whitened by the Laplace Cholesky factor, the proxy posterior's Laplace approximation as an independence
    proposal; timed), then its frozen kernel from ``start``; rows per step = the points the test evaluated."""
    model = logistic_regression(PRIOR_SCALE)
    w = warmup(
        model,
        data,
        jnp.zeros(len(start), jnp.float32),
        key=jax.random.fold_in(key, 1),
        test=test,
        proposal="independence",
        order=2,
    )
    kernel = build_kernel(model, w.proposal, w.test, n, estimator=w.estimator)
    block = cv_kernel_block(kernel, args.cv_block)
    draws, ends, sizes, compile_s, st = timed_blocks(
        block, kernel.init(jnp.asarray(start, jnp.float32)), key, data, args.time_cap
    )
    phases = ", ".join(f"{p} {c.seconds:.1f} s/{c.data / n:.2g} N" for p, c in w.cost.items())
    extra = (
        f"{w.test.name}, order 2, independence proposal; mean rows/step {st[:, 1].mean():.3g} (max {st[:, 1].max():.0f}); "
        f"warm-up {phases}"
    )
    return RunTrace(
        draws,
        ends,
        sizes,
        compile_s,
        w.total_seconds,
        float(st[:, 0].mean()),
        extra,
        data_per_step=float(st[:, 1].mean()),
        warmup_data=float(w.total_data),
        step_s=float(ends[-1]) / len(draws),
    )


def run_smh2(data, n, ref, start, scale, args, key) -> RunTrace:
    """SMH (``scalable_mh``) with the second-order GLM proxy and the independence proposal."""
    return run_exact("smh", data, n, ref, start, args, key)


def run_mhss2(data, n, ref, start, scale, args, key) -> RunTrace:
    """MH-SS (``mhss``) with the second-order GLM proxy and the independence proposal."""
    return run_exact("mhss", data, n, ref, start, args, key)


# ---------------------------------------------------------------- BlackJAX NUTS


def gradient_seconds(logdensity_of: Callable, data: dict, start: np.ndarray, repeats: int = 3) -> float:
    """Best wall time of one jitted full-data value-and-grad of the log density (compile excluded)."""
    vg = jax.jit(lambda th, data: jax.value_and_grad(logdensity_of(data))(th))
    th = jnp.asarray(start, jnp.float32)
    jax.block_until_ready(vg(th, data))
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(vg(th, data))
        best = min(best, time.perf_counter() - t0)
    return best


def run_nuts(data, n, ref, start, scale, args, key) -> RunTrace | Skipped:
    """BlackJAX NUTS on the full data after ``blackjax.window_adaptation`` (diagonal mass matrix), from ``start``."""
    import blackjax

    data = dict(data, lhat=logistic_log_lik(jnp.asarray(ref.map, jnp.float32), data))
    logdensity_of = centred_logdensity
    t_grad = gradient_seconds(logdensity_of, data, start)
    bound = args.nuts_warmup * t_grad  # every warm-up step takes at least one full-data gradient
    if bound > args.warmup_cap:
        return Skipped(
            f"warm-up not run: {args.nuts_warmup} steps x >= 1 full-data gradient ({t_grad:.3f} s) "
            f">= {bound:.0f} s > warm-up cap {args.warmup_cap:.0f} s",
            bound,
        )
    k_warm = jax.random.fold_in(key, 1)
    t0 = time.perf_counter()
    adapt = blackjax.window_adaptation(blackjax.nuts, logdensity_of(data))
    (state, params), _ = adapt.run(k_warm, jnp.asarray(start, jnp.float32), num_steps=args.nuts_warmup)
    jax.block_until_ready(state)
    warmup_s = time.perf_counter() - t0
    steps = max(args.min_block_steps, int(args.block_work // (10 * n)))

    @jax.jit
    def block(state, k, data):
        alg = blackjax.nuts(logdensity_of(data), **params)

        def body(st, kk):
            st, info = alg.step(kk, st)
            return st, (st.position, jnp.stack([info.acceptance_rate, info.num_integration_steps.astype(jnp.float32)]))

        return jax.lax.scan(body, state, jax.random.split(k, steps))

    draws, ends, sizes, compile_s, st = timed_blocks(block, state, key, data, args.time_cap)
    leap = float(st[:, 1].mean())
    extra = f"{args.nuts_warmup} warm-up steps, step {float(params['step_size']):.3g}, {leap:.1f} leapfrogs/draw, gradient {t_grad:.3f} s"
    return RunTrace(
        draws,
        ends,
        sizes,
        compile_s,
        warmup_s,
        float(st[:, 0].mean()),
        extra,
        data_per_step=leap * n,
        warmup_data=math.nan,
        step_s=float(ends[-1]) / len(draws),
    )


# ---------------------------------------------------------------- the SGD-step yardstick


def sgd_block(n: int, m: int, steps: int, lr: float = 1e-6):
    """A jitted scan of ``steps`` SGD steps: value-and-grad of the minibatch log posterior on ``m`` rows, then an update."""
    model = logistic_regression(PRIOR_SCALE)

    @jax.jit
    def block(theta, key, data):
        def one(theta, k):
            batch = minibatch_rows(k, data, n, m)  # the same row draw (without replacement) as the kernel's test

            def log_post(th):
                return model.log_prior(th) + (n / m) * jnp.sum(model.log_lik(th, batch))

            val, g = jax.value_and_grad(log_post)(theta)
            return theta + lr * g, val

        return jax.lax.scan(one, theta, jax.random.split(key, steps))

    return block


def step_over_sgd(kernel_block: Callable, state, data, n: int, m: int, steps: int, repeats: int) -> dict:
    """Wall time per step of ``kernel_block`` (``steps`` steps per call) over that of an SGD step on ``m`` rows, interleaved."""
    sgd = sgd_block(n, m, steps)
    theta = jax.tree_util.tree_leaves(state.position)[0]
    key = jax.random.key(7)
    jax.block_until_ready(sgd(theta, key, data))
    jax.block_until_ready(kernel_block(state, key, data))
    t_sgd, t_mh = [], []
    for r in range(repeats):
        k = jax.random.fold_in(key, r)
        t0 = time.perf_counter()
        jax.block_until_ready(sgd(theta, k, data))
        t_sgd.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        jax.block_until_ready(kernel_block(state, k, data))
        t_mh.append(time.perf_counter() - t0)
    t_sgd, t_mh = np.array(t_sgd), np.array(t_mh)
    return {
        "sgd_us": 1e6 * float(t_sgd.min()) / steps,
        "step_us": 1e6 * float(t_mh.min()) / steps,
        "ratio_of_best": float(t_mh.min() / t_sgd.min()),
        "median_ratio": float(np.median(t_mh / t_sgd)),
        "m": m,
        "steps": steps,
    }
