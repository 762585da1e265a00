"""Automatic warm-up for temperature 1 on tall data: a model, data and a start in, good samples out.

``warmup`` finds the mode ``theta_hat`` (minibatch Adam, then a few streamed full-data Newton steps),
takes the Laplace covariance there, builds the Taylor-proxy control variate around ``theta_hat``
(one streamed pass), tunes the proposal's scale to a target acceptance rate with the minibatch test
and the proxy in place, optionally re-centres the proxy once at the mean of a short run, and freezes
everything. ``auto_sample`` then runs ``sample`` from over-dispersed Laplace draws. The warm-up's cost
(data points read and seconds, phase by phase) is reported apart from sampling's, as NumPyro reports
its warm-up apart from its samples.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.mhminibatch import mh_minibatch
from minibatch_mcmc.checks import check_bool, check_choice, check_int, check_positive
from minibatch_mcmc.control_variates import MAX_DENSE_DIM, TaylorProxy, proxy_langevin, taylor_proxy
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import find_mode, laplace_covariance
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.kernel import Kernel, build_kernel
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.tuning import tune_scale

PyTree = Any

PROPOSALS = ("langevin", "random_walk")
"""Proposals ``warmup`` can tune: the proxy-gradient MALA (default) or a Laplace-shaped random walk."""
TARGET_ACCEPT = {("metropolis", "langevin"): 0.574, ("metropolis", "random_walk"): 0.234, ("barker", "langevin"): 0.347, ("barker", "random_walk"): 0.159}
"""Default target acceptance rates: the optimal diffusion-limit scalings (Roberts and Rosenthal for Metropolis;
the same optimisation with Barker's acceptance function, which MHminibatch approximates, gives 0.159 and 0.347:
its acceptance never exceeds 1/2 for small moves, so a Metropolis target would drive the scale to 0)."""


class PhaseCost(NamedTuple):
    """Data points read and seconds spent by one warm-up phase."""

    data: int
    seconds: float


class Warmup(NamedTuple):
    """Everything the warm-up found, frozen for sampling, and what it cost."""

    centre: PyTree
    """Centre of the proxy (the mode, or the re-centred mean)."""
    covariance: np.ndarray
    """Laplace covariance at the mode (flattened parameter order)."""
    proxy: TaylorProxy
    """The control variate to pass as ``estimator``."""
    proposal: Proposal
    """The tuned proposal."""
    scale: float
    """Tuned step size (Langevin) or scale (random walk)."""
    acceptance: float
    """Acceptance rate of the last tuning window."""
    test: AcceptanceTest
    """The acceptance test the scale was tuned with."""
    cost: dict
    """``PhaseCost`` per phase: ``mode``, ``proxy``, ``tuning`` and (if asked) ``recentre``."""

    @property
    def total_data(self) -> int:
        """Data points read by the whole warm-up."""
        return int(sum(c.data for c in self.cost.values()))

    @property
    def total_seconds(self) -> float:
        """Seconds spent by the whole warm-up."""
        return float(sum(c.seconds for c in self.cost.values()))


def default_target(test: AcceptanceTest, kind: str) -> float:
    """The target acceptance rate for the test's declared ``decision_rule`` and the proposal ``kind``."""
    if (test.decision_rule, kind) not in TARGET_ACCEPT:
        raise ValueError(
            f"test {test.name!r} has decision_rule={test.decision_rule!r}, for which the warm-up has no default target "
            f"acceptance rate; pass target_accept=..."
        )
    return TARGET_ACCEPT[(test.decision_rule, kind)]


def initial_scale(kind: str, d: int) -> float:
    """Scale to start tuning from: ``2.38 / sqrt(d)`` for a random walk, ``1.65^2 d^(-1/3)`` for MALA."""
    return 2.38 / math.sqrt(d) if kind == "random_walk" else 1.65**2 * d ** (-1.0 / 3.0)


def proposal_for(kind: str, proxy: TaylorProxy, model: Model, chol: np.ndarray, temperature: float) -> Callable[[Any], Proposal]:
    """``scale -> Proposal`` for the chosen kind, shaped by the Laplace covariance ``chol chol'``."""
    if kind == "random_walk":
        return lambda scale: scaled_random_walk(jnp.asarray(chol, jnp.float32), scale)
    cov = chol @ chol.T
    return lambda scale: proxy_langevin(proxy, model.log_prior, scale, cov=cov, temperature=temperature)


def warmup(
    model: Model,
    data: PyTree | DataSource,
    theta0: PyTree,
    *,
    key: jax.Array | int = 0,
    test: AcceptanceTest | None = None,
    proposal: str = "langevin",
    order: int = 2,
    temperature: float = 1.0,
    target_accept: float | None = None,
    num_windows: int = 20,
    window_size: int = 50,
    recentre: bool = False,
    adam_steps: int = 500,
    newton_steps: int = 10,
) -> Warmup:
    """Mode, Laplace covariance, Taylor proxy and a tuned proposal for sampling at ``temperature`` (1: the posterior).

    ``test`` defaults to ``mh_minibatch(batch_size=50)``; ``proposal`` is ``"langevin"`` (the proxy-gradient
    MALA preconditioned by the Laplace covariance) or ``"random_walk"`` (Laplace-shaped). With
    ``recentre=True`` the proxy is rebuilt once at the mean of a short tuned run.
    """
    kind = check_choice(proposal, "proposal", PROPOSALS)
    temperature = check_positive(temperature, "temperature")
    check_bool(recentre, "recentre")
    check_int(num_windows, "num_windows", 1)
    check_int(window_size, "window_size", 1)
    test = mh_minibatch(batch_size=50) if test is None else test
    target = default_target(test, kind) if target_accept is None else target_accept
    source = as_data_source(data)
    k_mode, k_tune, k_centre = jax.random.split(as_key(key), 3)

    mode = find_mode(model, source, theta0, key=k_mode, temperature=temperature, adam_steps=adam_steps, newton_steps=newton_steps)
    if mode.hessian is None:
        raise ValueError(
            f"the warm-up needs the Hessian at the mode for the Laplace covariance; the model has more than "
            f"{MAX_DENSE_DIM} parameters for a dense Hessian: build the proxy with taylor_proxy(order=1) and tune by hand"
        )
    cov = laplace_covariance(mode.hessian)
    cost = {"mode": PhaseCost(mode.data_used, mode.seconds)}
    proxy, cost["proxy"] = timed_proxy(model, source, mode.theta_hat, order)
    chol = cholesky_factor(cov, cov.shape[0])
    make = proposal_for(kind, proxy, model, chol, temperature)
    tuned = tune(model, source, test, proxy, make, mode.theta_hat, k_tune, target, kind, num_windows, window_size, temperature)
    cost["tuning"] = PhaseCost(tuned.data_used, tuned.seconds)
    if recentre:
        centre, cost["recentre_run"] = short_run_mean(model, source, test, proxy, make(tuned.scale), tuned.position, k_centre, temperature)
        proxy, cost["recentre"] = timed_proxy(model, source, centre, order)
        make = proposal_for(kind, proxy, model, chol, temperature)
    return Warmup(
        centre=proxy.centre,
        covariance=cov,
        proxy=proxy,
        proposal=make(float(tuned.scale)),
        scale=float(tuned.scale),
        acceptance=float(tuned.acceptance[-1]),
        test=test,
        cost=cost,
    )


def timed_proxy(model: Model, source: DataSource, centre: PyTree, order: int) -> tuple[TaylorProxy, PhaseCost]:
    """Build the proxy and time it."""
    start = time.perf_counter()
    proxy = taylor_proxy(model, source, centre, order=order)
    jax.block_until_ready(proxy.grad_sum)
    return proxy, PhaseCost(proxy.setup_data, time.perf_counter() - start)


def tune(model, source, test, proxy, make, start, key, target, kind, num_windows, window_size, temperature):
    """``tune_scale`` with the kernel of the chosen proposal, the test and the proxy."""
    n = source.n

    def kernel_for_scale(scale: jax.Array) -> Kernel:
        return build_kernel(model, make(scale), test, n, proxy)

    d = int(ravel_pytree(start)[0].size)
    return tune_scale(
        kernel_for_scale, source, start, key=key, target_accept=target, num_windows=num_windows,
        window_size=window_size, initial_scale=initial_scale(kind, d), temperature=temperature,
    )


def short_run_mean(model, source, test, proxy, proposal, start, key, temperature, steps: int = 500) -> tuple[PyTree, PhaseCost]:
    """Mean of a short single-chain run (the re-centring point) and its cost."""
    t0 = time.perf_counter()
    res = sample(model, source, start, proposal=proposal, test=test, estimator=proxy, num_samples=steps, key=key,
                 temperature=temperature, progress=False, block_size=steps)
    mean = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)[0].mean(axis=0), a.dtype), res.positions)
    used = int(np.sum(res.records["batch_size"]) + np.sum(res.records["hidden_data"]))
    return mean, PhaseCost(used, time.perf_counter() - t0)


def dispersed_starts(w: Warmup, num_chains: int, key: jax.Array, spread: float = 1.5) -> PyTree:
    """``num_chains`` starts drawn from the Laplace approximation widened by ``spread`` (for R-hat), batched."""
    flat, unravel = ravel_pytree(w.centre)
    chol = np.linalg.cholesky(w.covariance)
    z = np.asarray(jax.random.normal(key, (num_chains, flat.size)), np.float64)
    draws = np.asarray(flat, np.float64) + spread * z @ chol.T
    return jax.vmap(unravel)(jnp.asarray(draws, flat.dtype))


def auto_sample(
    model: Model,
    data: PyTree | DataSource,
    theta0: PyTree,
    *,
    num_samples: int,
    num_chains: int = 4,
    key: jax.Array | int = 0,
    test: AcceptanceTest | None = None,
    proposal: str = "langevin",
    order: int = 2,
    temperature: float = 1.0,
    recentre: bool = False,
    progress: bool = True,
    **sample_kwargs: Any,
) -> tuple[SampleResult, Warmup]:
    """Warm up (mode, Laplace, proxy, tuning), then sample ``num_chains`` chains with the frozen settings.

    Returns the ``SampleResult`` (its ``wall_time`` is sampling alone) and the ``Warmup`` (its ``cost``
    holds the warm-up's data and seconds).
    """
    k_warm, k_start, k_run = jax.random.split(as_key(key), 3)
    w = warmup(model, data, theta0, key=k_warm, test=test, proposal=proposal, order=order, temperature=temperature, recentre=recentre)
    starts = dispersed_starts(w, num_chains, k_start)
    result = sample(
        model, data, starts, proposal=w.proposal, test=w.test, estimator=w.proxy, num_samples=num_samples,
        num_chains=num_chains, key=k_run, temperature=temperature, batched_init=True, progress=progress, **sample_kwargs,
    )
    return result, w
