"""The warm-up's tuning phase: ``tune`` runs ``samplers.tuning.tune_chains`` on the compiled block runner of a kernel.

On the default path the chains start from over-dispersed Laplace draws, the runner is the sampling kernel's
(``scaled_runner``, scale traced), and ``tune`` returns it bound at the tuned scale with the chains' final positions:
``auto_sample``'s sampling (``samplers.driver.sample_compiled(..., runner=...)``) then compiles nothing, and the
chains go on from where tuning left them (a warm start; the tuning draws are discarded, as NUTS discards its warm-up). Where sampling cannot reuse the runner (no chain count,
``recentre``, several modes), one chain from the mode tunes the move alone on a runner of its own. Each phase reads
the model, data, test, estimator and temperature from one ``WarmupContext``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.compiling import ONE_OFF_WORK, RUN_WORK, compile_options
from minibatch_mcmc.control_variates import Proxy, proxy_for
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import DataSource
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.kernel import build_kernel
from minibatch_mcmc.samplers.phase_cost import PhaseCost
from minibatch_mcmc.samplers.scaled_runner import BoundRunner, at_scale, make_scaled_runner
from minibatch_mcmc.samplers.tuning import TuneResult, tune_chains
from minibatch_mcmc.warmup.context import WarmupContext
from minibatch_mcmc.warmup.laplace_moves import proposal_for, proposal_kind

PyTree = Any

MIN_WINDOWS = 5
"""Fewest windows of ``tune``: two of dual averaging, three of Robbins-Monro."""


def initial_scale(kind: str, d: int) -> float:
    """Scale to start tuning the move ``kind`` from, as its row declares (``laplace_moves.KINDS``); an untuned kind is refused."""
    start = proposal_kind(kind).initial_scale
    if start is None:
        raise ValueError(
            f"proposal {kind!r} is not tuned (its move comes from the Laplace fit): it has no scale to tune"
        )
    return start(d)


def laplace_starts(
    centre: PyTree, covariance: np.ndarray, modes: tuple, num_chains: int, key: jax.Array, spread: float = 1.5
) -> PyTree:
    """``num_chains`` starts drawn from the Laplace approximation widened by ``spread``, batched; with several
    ``modes`` (``LocalMode``), chain ``c`` starts around mode ``c mod M`` (its own Laplace approximation)."""
    flat, unravel = ravel_pytree(centre)
    normal = jax.jit(
        jax.random.normal, static_argnums=1, compiler_options=compile_options(num_chains * flat.size, ONE_OFF_WORK)
    )
    z = np.asarray(normal(key, (num_chains, flat.size)), np.float64)  # compiled: same bits
    if len(modes) <= 1:
        draws = np.asarray(flat, np.float64) + spread * z @ np.linalg.cholesky(covariance).T
    else:
        chosen = [modes[c % len(modes)] for c in range(num_chains)]
        draws = np.stack(
            [
                np.asarray(ravel_pytree(m.theta)[0], np.float64) + spread * np.linalg.cholesky(m.covariance) @ zc
                for m, zc in zip(chosen, z)
            ]
        )
    return jax.jit(jax.vmap(unravel))(np.asarray(draws, flat.dtype))  # numpy: no eager conversion to compile


def tune(
    ctx: WarmupContext,
    make: Callable[[Any], Proposal],
    starts: PyTree,
    key: jax.Array,
    target: float,
    kind: str,
    num_windows: int,
    window_size: int,
    counted: Callable[[jax.Array], jax.Array] | None = None,
    sampling_steps: int | None = None,
) -> tuple[TuneResult, BoundRunner]:
    """``tune_chains`` on the runner of ``build_kernel(model, make(scale), ...)`` from the batched ``starts``, in windows
    of ``window_size`` steps; the result and the runner at the tuned scale (``kind``: the tuned move, for the start).

    The ``num_windows`` windows of one chain's tuning are shared out over the chains (``MIN_WINDOWS`` at least), so
    tuning on several chains reads about the rows it reads on one; each window's rate pools ``chains x window_size`` steps.
    ``sampling_steps``: the steps per chain sampling will run on the runner, which with tuning's set its compile level
    (``compiling.RUN_WORK``); None (not known): XLA's defaults."""
    num_chains = int(np.shape(jax.tree_util.tree_leaves(starts)[0])[0])
    d = int(ravel_pytree(jax.tree_util.tree_map(lambda a: a[0], starts))[0].size)
    windows = max(MIN_WINDOWS, -(-num_windows // num_chains))
    options = (
        None
        if sampling_steps is None
        else compile_options((windows * window_size + sampling_steps) * num_chains * d, RUN_WORK)
    )
    runner = make_scaled_runner(
        lambda scale: build_kernel(ctx.model, make(scale), ctx.test, ctx.source.n, ctx.estimator),
        num_chains,
        chunk=window_size,
        compiler_options=options,
    )
    tuned = tune_chains(
        runner,
        ctx.source,
        starts,
        key=key,
        target_accept=target,
        num_windows=windows,
        initial_scale=initial_scale(kind, d),
        temperature=ctx.temperature,
        counted=counted,
    )
    return tuned, at_scale(runner, tuned.scale, starts)


def timed_proxy(model: Model, source: DataSource, centre: PyTree, order: int) -> tuple[Proxy, PhaseCost]:
    """Build the proxy and time it."""
    start = time.perf_counter()
    proxy = proxy_for(model, source, centre, order=order)
    jax.block_until_ready(proxy)
    return proxy, PhaseCost(proxy.setup_data, time.perf_counter() - start, proxy.setup_data / source.n)


def short_run_mean(
    ctx: WarmupContext, proposal: Proposal, start: PyTree, key: jax.Array, steps: int = 500
) -> tuple[PyTree, PhaseCost]:
    """Mean of a short single-chain run (the re-centring point) and its cost."""
    t0 = time.perf_counter()
    res = sample(
        ctx.model,
        ctx.source,
        start,
        proposal=proposal,
        test=ctx.test,
        estimator=ctx.estimator,
        num_samples=steps,
        key=key,
        temperature=ctx.temperature,
        progress=False,
        block_size=steps,
    )
    mean = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)[0].mean(axis=0), a.dtype), res.kernel_positions)
    used = int(np.sum(res.records["batch_size"]) + np.sum(res.records["hidden_data"]))
    return mean, PhaseCost(used, time.perf_counter() - t0)


def mode_kernels(
    ctx: WarmupContext, modes: tuple, order: int, kind: str, scale: float, cost: PhaseCost
) -> tuple[tuple, PhaseCost]:
    """A proxy (one pass each) and a proposal per further mode, its Laplace shape at the tuned scale; the proxy cost added."""
    kernels = []
    for m in modes:
        proxy, c = timed_proxy(ctx.model, ctx.source, m.theta, order)
        cost = cost._replace(data=cost.data + c.data, seconds=cost.seconds + c.seconds, passes=cost.passes + c.passes)
        chol = cholesky_factor(m.covariance, m.covariance.shape[0])
        kernels.append((proxy, proposal_for(kind, proxy, ctx.model, chol, ctx.temperature, ctx.rule)(scale)))
    return tuple(kernels), cost


def dispersed_starts(w: Any, num_chains: int, key: jax.Array, spread: float = 1.5) -> PyTree:
    """``num_chains`` starts from a ``Warmup``'s Laplace approximation widened by ``spread`` (for R-hat), batched; with
    several modes, chain ``c`` starts around mode ``c mod M`` (``laplace_starts``)."""
    return laplace_starts(w.centre, w.covariance, w.modes, num_chains, key, spread)
