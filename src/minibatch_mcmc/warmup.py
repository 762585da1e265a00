"""Automatic warm-up for temperature 1 on tall data: a model, data and a start in, good samples out.

``warmup`` finds the mode ``theta_hat`` (minibatch Adam, then a few streamed full-data Newton steps),
takes the Laplace covariance there, builds the Taylor-proxy control variate around ``theta_hat``
(one streamed pass), tunes the proposal's scale to a target acceptance rate with the minibatch test
and the proxy in place (or, for the global moves from the proxy posterior, takes them from the Laplace
fit, optionally choosing among them by measured effective draws per second), optionally re-centres the
proxy once at the mean of a short run, and freezes everything. ``auto_sample`` then runs ``sample``
from over-dispersed Laplace draws. The warm-up's cost (data points read and seconds, phase by phase)
is reported apart from sampling's, as NumPyro reports its warm-up apart from its samples.
"""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.exact import BarkerTest
from minibatch_mcmc.acceptance.mhminibatch import mh_minibatch
from minibatch_mcmc.checks import check_bool, check_choice, check_int, check_positive
from minibatch_mcmc.control_variates import MAX_DENSE_DIM, TaylorProxy, taylor_proxy
from minibatch_mcmc.control_variates.influence import Influence, influential_rows
from minibatch_mcmc.control_variates.laplace_moves import GLOBAL, proposal_for
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.data.host import host_read_errors
from minibatch_mcmc.diagnostics.proxy_check import ProxyCheck, check_proxy
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import find_mode, laplace_covariance
from minibatch_mcmc.optim.multistart import LocalMode, find_modes, warn_several_modes
from minibatch_mcmc.optim.no_mode import check_mode
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.checkpoint import SETTINGS_FILE, data_fingerprint, fingerprint
from minibatch_mcmc.samplers.diagnose import bad_rows_named
from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.efficiency import most_efficient
from minibatch_mcmc.samplers.groups import ChainGroup, sample_groups
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.kernel import Kernel, build_kernel
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.tuning import tune_scale, untuned
from minibatch_mcmc.samplers.warmup_file import load_warmup, save_warmup

PyTree = Any

PROPOSALS = ("langevin", "random_walk", "independence", "independence_t", "proxy_hmc", "mixture", "auto")
"""Proposals ``warmup`` can set up: proxy-gradient MALA (default) or a Laplace-shaped random walk (both scale-tuned);
independence from the proxy posterior's Laplace fit (Gaussian, or t) and proxy HMC (fixed, not tuned); ``mixture``:
proxy HMC, or with probability ``laplace_moves.LOCAL_WEIGHT`` a tuned random walk;
``auto``: the one of ``AUTO_CANDIDATES`` with the most effective draws per second in a short measured run."""
AUTO_CANDIDATES = ("proxy_hmc", "independence", "independence_t")
"""What ``proposal="auto"`` measures (``samplers.efficiency``: 8 chains x 200 steps each) and chooses from."""
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
    """The Taylor proxy (the proposal's drift); pass ``estimator`` to ``sample``, which adds its exact stratum if any."""
    proposal: Proposal
    """The tuned proposal."""
    scale: float
    """Tuned step size (Langevin) or scale (random walk, and the random walk of ``mixture``); 1 for ``GLOBAL`` kinds."""
    acceptance: float
    """Acceptance rate of the last tuning window (NaN for the untuned kinds in ``GLOBAL``)."""
    test: AcceptanceTest
    """The acceptance test the scale was tuned with."""
    cost: dict
    """``PhaseCost`` per phase: ``mode`` (with the multi-start search), ``proxy``, ``influence``, ``tuning`` and (if
    asked) ``choose`` and ``recentre``."""
    modes: tuple = ()
    """``LocalMode`` per distinct mode the multi-start search found, the proxy's mode first (empty if not searched)."""
    mode_kernels: tuple = ()
    """``(proxy, proposal)`` centred on and shaped by each further mode (``modes[1:]``), at the tuned scale."""
    kind: str = "langevin"
    """The kind of ``proposal`` (for ``proposal="auto"``, the one chosen)."""
    estimator: Any = None
    """What to pass as ``estimator``: ``proxy``, or ``proxy`` with an exact stratum of the rows it cannot see."""
    influence: Influence | None = None
    """The rows found far from the proxy (``control_variates.influence``); None when the search was off."""
    proxy_check: ProxyCheck | None = None
    """The Pareto-k check after sampling (set by ``auto_sample``)."""

    @property
    def total_data(self) -> int:
        """Data points read by the whole warm-up."""
        return int(sum(c.data for c in self.cost.values()))

    @property
    def total_seconds(self) -> float:
        """Seconds spent by the whole warm-up."""
        return float(sum(c.seconds for c in self.cost.values()))


def decision_rule(test: AcceptanceTest) -> str:
    """The warm-up's rule for targets and moves: ``"barker"`` for a test that declares Barker's rule, else ``"metropolis"``."""
    return "barker" if test.decision_rule == "barker" else "metropolis"


def initial_scale(kind: str, d: int) -> float:
    """Scale to start tuning from: ``2.38 / sqrt(d)`` for a random walk, ``1.65^2 d^(-1/3)`` for MALA."""
    return 2.38 / math.sqrt(d) if kind == "random_walk" else 1.65**2 * d ** (-1.0 / 3.0)


def data_errors(fn: Callable) -> Callable:
    """``fn(model, data, ...)`` with a data file changed under it reported as ``DataChangedError``, from every phase."""

    @functools.wraps(fn)
    def wrapped(model: Model, data: PyTree | DataSource, *args: Any, **kwargs: Any) -> Any:
        with host_read_errors(data):
            return fn(model, data, *args, **kwargs)

    return wrapped


@data_errors
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
    num_starts: int = 8,
    stratum: bool = True,
) -> Warmup:
    """Mode, Laplace covariance, Taylor proxy and a tuned proposal for sampling at ``temperature`` (1: the posterior).

    ``test`` defaults to ``mh_minibatch(batch_size=50)`` (below ``N = 50`` the exact Barker test on all rows,
    which the minibatch test approximates); ``proposal`` is one of ``PROPOSALS``: ``"langevin"`` (the
    proxy-gradient MALA preconditioned by the Laplace covariance), ``"random_walk"`` (Laplace-shaped), the untuned
    global moves ``"independence"``, ``"independence_t"``, ``"proxy_hmc"``, ``"mixture"`` (proxy HMC plus a tuned
    random walk), or ``"auto"`` (the best of ``AUTO_CANDIDATES`` by measured effective draws per second; its cost
    is reported as the ``choose`` phase). ``recentre=True``: the proxy is rebuilt at the mean of a short tuned run.
    ``num_starts`` minibatch-Adam searches (0: none) look for other modes (a warning; ``auto_sample`` starts chains
    in each). ``stratum=True``: rows the proxy cannot see (``influential_rows``) are exact at every test (``stratify``).
    """
    kind = check_choice(proposal, "proposal", PROPOSALS)
    temperature = check_positive(temperature, "temperature")
    check_bool(recentre, "recentre")
    check_int(num_windows, "num_windows", 1)
    check_int(window_size, "window_size", 1)
    check_int(num_starts, "num_starts", 0)
    if target_accept is not None and kind in GLOBAL + ("auto",):
        raise ValueError(f"target_accept={target_accept!r} has no effect with proposal={kind!r}, which is not tuned: leave it None")
    source = as_data_source(data)
    test = default_test(source.n) if test is None else test
    rule = decision_rule(test)
    tuned_kind = "random_walk" if kind == "mixture" else kind
    target = TARGET_ACCEPT.get((rule, tuned_kind), math.nan) if target_accept is None else target_accept
    k_mode, k_tune, k_centre = jax.random.split(as_key(key), 3)

    with bad_rows_named(model, source, theta0):
        mode = find_mode(model, source, theta0, key=k_mode, temperature=temperature, adam_steps=adam_steps, newton_steps=newton_steps)
    if mode.hessian is None:
        raise ValueError(
            f"the warm-up needs the Hessian at the mode for the Laplace covariance; the model has more than "
            f"{MAX_DENSE_DIM} parameters for a dense Hessian: build the proxy with taylor_proxy(order=1) and tune by hand"
        )
    check_mode(model, mode, source.n, newton_steps)
    cov = laplace_covariance(mode.hessian)
    modes, cost = search_modes(model, source, LocalMode(mode.theta_hat, mode.log_posterior, cov), as_key(key), temperature,
                               num_starts, newton_steps, PhaseCost(mode.data_used, mode.seconds))
    proxy, cost["proxy"] = timed_proxy(model, source, mode.theta_hat, order)
    chol = cholesky_factor(cov, cov.shape[0])
    influence = None
    if check_bool(stratum, "stratum"):  # its own key, so the other phases' keys are those of a run without it
        influence = influential_rows(model, source, proxy, chol, key=jax.random.fold_in(as_key(key), 20), temperature=temperature)
        cost["influence"] = PhaseCost(influence.data_used, influence.seconds)
    estimator = proxy if influence is None else stratify(model, source, proxy, influence.rows)
    if kind == "auto":
        kind, cost["choose"] = choose_by_efficiency(model, source, test, estimator, chol, mode.theta_hat, k_tune, temperature, rule)
    make = proposal_for(kind, proxy, model, chol, temperature, rule)
    if kind in GLOBAL:  # nothing to tune: the Laplace fit sets the move
        tuned = untuned(mode.theta_hat)
    else:
        walk = proposal_for(tuned_kind, proxy, model, chol, temperature, rule)
        with bad_rows_named(model, source, mode.theta_hat):
            tuned = tune(model, source, test, estimator, walk, mode.theta_hat, k_tune, target, tuned_kind, num_windows, window_size,
                         temperature)
    cost["tuning"] = PhaseCost(tuned.data_used, tuned.seconds)
    if recentre:
        centre, cost["recentre_run"] = short_run_mean(model, source, test, estimator, make(tuned.scale), tuned.position, k_centre, temperature)
        proxy, cost["recentre"] = timed_proxy(model, source, centre, order)
        estimator = proxy if influence is None else stratify(model, source, proxy, influence.rows)
        make = proposal_for(kind, proxy, model, chol, temperature, rule)
    kernels, cost["proxy"] = mode_kernels(model, source, modes[1:], order, kind, temperature, rule, float(tuned.scale), cost["proxy"])
    return Warmup(
        centre=proxy.centre,
        covariance=cov,
        proxy=proxy,
        proposal=make(float(tuned.scale)),
        scale=float(tuned.scale),
        acceptance=float(tuned.acceptance[-1]),
        test=test,
        cost=cost,
        modes=modes,
        mode_kernels=kernels,
        kind=kind,
        estimator=estimator,
        influence=influence,
    )


def choose_by_efficiency(model, source, test, estimator, chol, centre, key, temperature, rule) -> tuple[str, PhaseCost]:
    """The candidate of ``AUTO_CANDIDATES`` with the most effective draws per second, from 8 Laplace-drawn starts."""
    kernels = {k: build_kernel(model, proposal_for(k, estimator, model, chol, temperature, rule)(1.0), test, source.n, estimator)
               for k in AUTO_CANDIDATES}
    best, data, seconds = most_efficient(kernels, source.arrays(), centre, chol, key, temperature)
    return best, PhaseCost(data, seconds)


def mode_kernels(model, source, modes, order, kind, temperature, rule, scale, cost) -> tuple[tuple, PhaseCost]:
    """A proxy (one pass each) and a proposal per further mode, its Laplace shape at the tuned scale; the proxy cost added."""
    kernels = []
    for m in modes:
        proxy, c = timed_proxy(model, source, m.theta, order)
        cost = PhaseCost(cost.data + c.data, cost.seconds + c.seconds)
        kernels.append((proxy, proposal_for(kind, proxy, model, cholesky_factor(m.covariance, m.covariance.shape[0]), temperature, rule)(scale)))
    return tuple(kernels), cost


def search_modes(model, source, first, key, temperature, num_starts, newton_steps, cost) -> tuple[tuple, dict]:
    """The multi-start search (its cost added to the mode phase's), warning when it finds several modes."""
    if num_starts == 0:
        return (), {"mode": cost}
    found = find_modes(model, source, first, key=jax.random.fold_in(key, 19), temperature=temperature,
                       num_starts=num_starts + num_starts % 2, newton_steps=newton_steps)
    warn_several_modes(found.modes)
    return found.modes, {"mode": PhaseCost(cost.data + found.data_used, cost.seconds + found.seconds)}


def default_test(n: int) -> AcceptanceTest:
    """``mh_minibatch(batch_size=50)``, or for ``N < 50`` (a minibatch would be all the data) the exact Barker test."""
    return mh_minibatch(batch_size=50) if n >= 50 else BarkerTest()


def timed_proxy(model: Model, source: DataSource, centre: PyTree, order: int) -> tuple[TaylorProxy, PhaseCost]:
    """Build the proxy and time it."""
    start = time.perf_counter()
    proxy = taylor_proxy(model, source, centre, order=order)
    jax.block_until_ready(proxy.grad_sum)
    return proxy, PhaseCost(proxy.setup_data, time.perf_counter() - start)


def tune(model, source, test, estimator, make, start, key, target, kind, num_windows, window_size, temperature):
    """``tune_scale`` with the kernel of the chosen proposal, the test and the estimator."""
    n = source.n

    def kernel_for_scale(scale: jax.Array) -> Kernel:
        return build_kernel(model, make(scale), test, n, estimator)

    d = int(ravel_pytree(start)[0].size)
    return tune_scale(
        kernel_for_scale, source, start, key=key, target_accept=target, num_windows=num_windows,
        window_size=window_size, initial_scale=initial_scale(kind, d), temperature=temperature,
    )


def short_run_mean(model, source, test, estimator, proposal, start, key, temperature, steps: int = 500) -> tuple[PyTree, PhaseCost]:
    """Mean of a short single-chain run (the re-centring point) and its cost."""
    t0 = time.perf_counter()
    res = sample(model, source, start, proposal=proposal, test=test, estimator=estimator, num_samples=steps, key=key,
                 temperature=temperature, progress=False, block_size=steps)
    mean = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)[0].mean(axis=0), a.dtype), res.kernel_positions)
    used = int(np.sum(res.records["batch_size"]) + np.sum(res.records["hidden_data"]))
    return mean, PhaseCost(used, time.perf_counter() - t0)


def dispersed_starts(w: Warmup, num_chains: int, key: jax.Array, spread: float = 1.5) -> PyTree:
    """``num_chains`` starts drawn from the Laplace approximation widened by ``spread`` (for R-hat), batched.

    With several modes, chain ``c`` starts around mode ``c mod M`` (its own Laplace approximation).
    """
    flat, unravel = ravel_pytree(w.centre)
    z = np.asarray(jax.random.normal(key, (num_chains, flat.size)), np.float64)
    if len(w.modes) <= 1:
        draws = np.asarray(flat, np.float64) + spread * z @ np.linalg.cholesky(w.covariance).T
    else:
        modes = [w.modes[c % len(w.modes)] for c in range(num_chains)]
        draws = np.stack([np.asarray(ravel_pytree(m.theta)[0], np.float64) + spread * np.linalg.cholesky(m.covariance) @ zc
                          for m, zc in zip(modes, z)])
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
    num_starts: int = 8,
    newton_steps: int = 10,
    stratum: bool = True,
    check_draws: int = 100,
    **sample_kwargs: Any,
) -> tuple[SampleResult, Warmup]:
    """Warm up (mode, Laplace, proxy, rows it cannot see, tuning), then sample ``num_chains`` chains with the frozen settings.

    Returns the ``SampleResult`` (its ``wall_time`` is sampling alone) and the ``Warmup`` (its ``cost``
    holds the warm-up's data and seconds; its ``proxy_check`` the Pareto-k check of the proxy on
    ``check_draws`` draws, all in one streamed pass, which warns when it fails; ``check_draws=0`` skips it).
    With ``checkpoint_dir`` the warm-up is saved there, and ``resume=True`` restores it instead of redoing it.
    """
    check_int(check_draws, "check_draws", 0)
    k_warm, k_start, k_run = jax.random.split(as_key(key), 3)
    options = dict(test=test, proposal=proposal, order=order, temperature=temperature, recentre=recentre, num_starts=num_starts,
                   newton_steps=newton_steps, stratum=stratum)
    w = stored_warmup(model, data, theta0, k_warm, options, sample_kwargs.get("checkpoint_dir"), sample_kwargs.get("resume", False))
    starts = dispersed_starts(w, num_chains, k_start)
    if w.mode_kernels:  # chain c in mode c mod M, with that mode's proxy and proposal
        m = len(w.modes)
        kernels = [(w.estimator, w.proposal)] + list(w.mode_kernels)
        groups = [ChainGroup(tuple(range(k, num_chains, m)), kernels[k][1], kernels[k][0]) for k in range(min(m, num_chains))]
        result = sample_groups(model, data, starts, groups, test=w.test, num_samples=num_samples, key=k_run, temperature=temperature,
                               progress=progress, **sample_kwargs)
        return result, w
    result = sample(
        model, data, starts, proposal=w.proposal, test=w.test, estimator=w.estimator, num_samples=num_samples,
        num_chains=num_chains, key=k_run, temperature=temperature, batched_init=True, progress=progress, **sample_kwargs,
    )
    if check_draws:
        w = w._replace(proxy_check=check_proxy(model, data, w.estimator, w.proxy.centre, result.positions,
                                               num_draws=check_draws, temperature=temperature, records=result.records))
    return result, w


def stored_warmup(model: Model, data: PyTree | DataSource, theta0: PyTree, key: jax.Array, options: dict, directory, resume: bool) -> Warmup:
    """``warmup(...)``, saved in the checkpoint ``directory`` (a new run), or restored from it (``resume``)."""
    if directory is None:
        return warmup(model, data, theta0, key=key, **options)
    source = as_data_source(data)
    settings = {"seed": fingerprint(key), "model": fingerprint(model), "theta0": fingerprint(theta0),
                "options": fingerprint(options), "data": data_fingerprint(source.arrays(), source.n)}
    saved = load_warmup(directory, settings) if resume else None
    if saved is not None:
        return restored(model, source.n, saved, options)
    w = warmup(model, data, theta0, key=key, **options)
    if resume or not (Path(directory) / SETTINGS_FILE).exists():  # never overwrite the warm-up of a run sample will refuse
        save_warmup(directory, settings, {"proxy": w.proxy, "covariance": w.covariance, "scale": w.scale,
                                          "acceptance": w.acceptance, "cost": w.cost, "modes": w.modes,
                                          "mode_proxies": [k[0] for k in w.mode_kernels], "kind": w.kind,
                                          "estimator": w.estimator, "influence": w.influence})
    return w


def restored(model: Model, n: int, saved: dict, options: dict) -> Warmup:
    """The ``Warmup`` from its saved parts: the proposal rebuilt from the proxy, covariance, kind and tuned scale."""
    proxy, cov, kind = saved["proxy"], saved["covariance"], saved["kind"]
    test = default_test(n) if options["test"] is None else options["test"]
    rule = decision_rule(test)
    make = proposal_for(kind, proxy, model, cholesky_factor(cov, cov.shape[0]), options["temperature"], rule)
    kernels = tuple((p, proposal_for(kind, p, model, cholesky_factor(m.covariance, cov.shape[0]), options["temperature"], rule)(saved["scale"]))
                    for p, m in zip(saved["mode_proxies"], saved["modes"][1:]))
    return Warmup(centre=proxy.centre, covariance=cov, proxy=proxy, proposal=make(saved["scale"]), scale=saved["scale"],
                  acceptance=saved["acceptance"], test=test, cost=saved["cost"], modes=saved["modes"], mode_kernels=kernels,
                  kind=kind, estimator=saved["estimator"], influence=saved["influence"])
