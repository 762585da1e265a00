"""After sampling, the error of the posterior itself: a coupled exact continuation from thinned draws.

A minibatch test errs at each step (``proxy_check``'s per-step acceptance-probability error); what a user needs is
whether that moved a posterior mean or s.d. The check takes ``K`` thinned draws of the finished run, which follow the
minibatch chain's stationary law ``pi_eps``, and from each runs ``T`` steps of two chains that share every random
number (the proposal's noise, the test's uniforms): one steps with the run's own kernel, the other with the same
proposal and the exact full-data decision on every row's own log-likelihood ratio (``CoupledExact``: the Metropolis
rule on the penalty or naive test's uniform, Barker's rule on MHminibatch's normal and correction draws, an exact
test's own draws for other tests). The run's chain stays in ``pi_eps``; the exact one drifts towards the posterior
``pi``. For ``f`` a parameter or its square about the run's mean,

    E f(X_T exact) - E f(X_T run) = (pi f - pi_eps f) (1 - rho^T)

to first order, ``rho`` the chain's lag-1 autocorrelation (read from the run's draws), so the mean over starts of the
paired differences, divided by ``1 - rho^T``, estimates the error of each mean and variance; its Monte Carlo s.e. is
the spread of the differences over the starts / ``sqrt(K)``. The coupling keeps the differences small: the chains
coincide until a step whose decisions differ, and proxy HMC's nearly independent moves bring them together again.
Where the exact chain mixes slower than the run, ``1 - rho^T`` is too large and the estimate errs towards 0.

Given the run's key and records (``run_key``, ``records``: what ``auto_sample`` passes), the run's side is the run itself:
a start is the draw at step ``j`` of chain ``c``, the run's ``X_T`` its draw at ``j + T``, and the exact chain steps
on the keys the run used at steps ``j + 1 .. j + T`` (``keys.step_keys``). Only the exact kernel is compiled and
stepped (``exact_continuation``); without them both chains are (``coupled_run``: the run's kernel compiled a second
time, about as long as sampling's own compilation).

Rule: a mean is flagged when ``|error| - Z_SE * s.e. > MEAN_TOLERANCE`` posterior s.d., an s.d. when its relative error
``|ratio - 1| - Z_SE * s.e. > SD_TOLERANCE``. Cost: ``K * T`` full-data evaluations (each step one pass over ``N``
for all ``K`` exact chains, vmapped), plus the run's minibatch rows; past ``MAX_EVALUATIONS`` the starts are cut
(the s.e. grows as ``1 / sqrt(K)``) down to ``MIN_STARTS``. It needs the rows in memory (a host-streamed source
returns None: ``proxy_check``'s per-step figures then warn as before).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.base import (
    AcceptanceTest,
    Statistics,
    TestOutcome,
    exact_delta,
    full_data_outcome,
    no_checks,
    no_rows_first,
    uniform_from_bits,
    untempered,
)
from minibatch_mcmc.acceptance.correction import correction_from_uniforms
from minibatch_mcmc.acceptance.exact import BarkerTest, MetropolisTest
from minibatch_mcmc.acceptance.mhminibatch import MHMinibatch, random_inputs
from minibatch_mcmc.acceptance.naive import NaiveMinibatch
from minibatch_mcmc.acceptance.penalty import PenaltyTest
from minibatch_mcmc.acceptance.streaming import order_and_uniform
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.compiling import compile_options
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.influence import without_rounding
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.data.host import is_host_data
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.kernel import build_kernel
from minibatch_mcmc.samplers.keys import as_key, as_run_key, step_keys

PyTree = Any

MEAN_TOLERANCE = 0.1
"""A mean off by more than this many posterior s.d. is an error worth a warning (issue 32's tolerance)."""
SD_TOLERANCE = 0.05
"""An s.d. off by more than this fraction is an error worth a warning."""
Z_SE = 2.0
"""A bias counts when it exceeds its tolerance by this many Monte Carlo standard errors (one-sided: about 2.3%
of false alarms per quantity whose true error is exactly at the tolerance, fewer below it)."""
STARTS = 128
"""``K``: thinned draws the continuation starts from."""
STEPS = 16
"""``T``: coupled steps from each start. The run's lag-1 autocorrelation (proxy HMC: about 0.07) is divided out, but an
exact chain can mix slower than the run where the run is wrong (five Cauchy rows missed: at N = 10^5 the s.d. error
0.24 was estimated 0.15 +- 0.04 after 4 steps, 0.18 +- 0.06 after 10; at N = 20,000, true error +22.5%, on one run's
draws and keys: +11.3% +- 5.1% after 8 steps (not flagged), +10.2% +- 4.9% after 12, +24.0% +- 7.3% after 16), so more
steps than the run needs. The steps cost exact passes only (the run's side is read from its draws), not compilation."""
RHO_MAX = 0.9
"""Largest lag-1 autocorrelation divided out: slower chains get ``1 - 0.9^T`` (the check then says it is too short)."""
MAX_EVALUATIONS = 1 << 28
"""Row evaluations (``K T N``) above which the starts are cut, down to ``MIN_STARTS``."""
CONTINUATION_WORK = 5e7
"""Largest ``K T N d`` whose continuation compiles fast (``compiling.FAST_COMPILE``). Measured on the loaded 2-core
machine: the linear model on Cauchy noise (d = 3, N = 10^5, K = 128, T = 8: ``3e8``) compiled in 24 s and ran in 22 s,
fast 9 s and 87 s; the Student-t regression (d = 5, N = 20,000: ``1e8``) 27 s and 0.5 s, fast 17 s and 3 s. The
run's slowdown (4-6x) repays the saved compilation (10-15 s) below about ``5e7``."""
MIN_STARTS = 32
"""Fewest starts: below this the s.e. is too coarse to resolve the tolerances."""


class PosteriorError(NamedTuple):
    """What the coupled exact continuation estimated, per flattened parameter."""

    names: tuple
    """Parameter labels, in ``ravel_pytree`` order."""
    mean_bias: np.ndarray
    """Estimated (exact - run) mean, in posterior s.d. of the run's draws."""
    mean_se: np.ndarray
    """Its Monte Carlo standard error (same units)."""
    sd_error: np.ndarray
    """Estimated exact s.d. / the run's s.d. - 1."""
    sd_se: np.ndarray
    """Its Monte Carlo standard error."""
    starts: int
    """``K``: starts used."""
    steps: int
    """``T``: coupled steps from each."""
    rho: np.ndarray
    """Lag-1 autocorrelation of each parameter in the run's draws (clipped to ``[0, RHO_MAX]``), divided out."""
    disagreement: float
    """Fraction of the steps at which the two chains coincided and their decisions differed: the per-step error."""
    data_used: int
    """Row evaluations: ``K T N`` exact, plus the run's minibatch rows."""
    seconds: float
    """Wall time of the continuation."""
    mean_tolerance: float = MEAN_TOLERANCE
    sd_tolerance: float = SD_TOLERANCE
    z: float = Z_SE

    @property
    def mean_flagged(self) -> np.ndarray:
        """Parameters whose mean is off by more than the tolerance by ``z`` s.e."""
        return np.abs(self.mean_bias) - self.z * self.mean_se > self.mean_tolerance

    @property
    def sd_flagged(self) -> np.ndarray:
        """Parameters whose s.d. is off by more than the tolerance by ``z`` s.e."""
        return np.abs(self.sd_error) - self.z * self.sd_se > self.sd_tolerance

    @property
    def ok(self) -> bool:
        """No mean and no s.d. flagged."""
        return not bool(np.any(self.mean_flagged) or np.any(self.sd_flagged))


class CoupledExact(NamedTuple):
    """The exact full-data decision on the random numbers of ``run_test`` (``coupled_accept``), as an acceptance test.

    With a proxy (``model`` and its flat ``centre`` given) ``Delta`` is the proxy's exact sum plus every row's residual,
    each residual within its row's float32 resolution counted as 0 (``influence.without_rounding``): summed over ``N``
    rows, raw rounding is not the posterior's (a Gaussian model on Cauchy-noise rows: the terms reach 10^9 nats)."""

    run_test: Any
    model: Model | None = None
    centre: jax.Array | None = None
    unravel: Any = None
    name: str = "coupled_exact"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    @property
    def decision_rule(self) -> str:
        """The run's test's rule."""
        return self.run_test.decision_rule

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept on the exact ``Delta`` with the uniforms the run's test draws from ``key``."""
        if self.model is not None:
            terms = stats.log_ratio
            stats = stats._replace(log_ratio=lambda rows: without_rounding(terms(rows), self.model, self.centre, self.unravel, rows))
        if not isinstance(self.run_test, COUPLED):
            exact = BarkerTest() if self.run_test.decision_rule == "barker" else MetropolisTest()
            return exact.decide(key, stats)
        delta, bad = exact_delta(stats)
        return full_data_outcome(coupled_accept(self.run_test, key, delta), delta, bad, stats.n_data)


COUPLED = (PenaltyTest, MHMinibatch, NaiveMinibatch)
"""Tests whose random numbers ``coupled_accept`` reuses; any other test's exact twin draws its own (weaker coupling)."""


def coupled_accept(test: Any, key: jax.Array, delta: jax.Array) -> jax.Array:
    """The exact decision at ``delta`` from the uniforms ``test`` draws from ``key``: ``log u < Delta`` on the penalty
    test's (or the naive test's) ``u``; for MHminibatch ``Delta + N(0, sigma^2) + X_corr > 0`` on its normal and
    correction uniforms (Barker's rule, up to the correction table's CDF error)."""
    if isinstance(test, NaiveMinibatch):
        return jnp.log(order_and_uniform(key, delta.dtype)[1]) < delta
    u = uniform_from_bits(random_inputs(key)[1], delta.dtype)
    if isinstance(test, PenaltyTest):
        return jnp.log(u[0]) < delta
    x_n = jnp.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * u[0] - 1.0) * test.sigma
    return delta + x_n + correction_from_uniforms(u[1], u[2], test.correction).astype(delta.dtype) > 0


def thinned_starts(positions: PyTree, count: int) -> np.ndarray:
    """``(K, d)`` flattened draws evenly spaced over the second half of every chain (leading axes: chains, samples)."""
    flat = flat_draws(positions)
    late = flat[:, flat.shape[1] // 2:].reshape(-1, flat.shape[2])
    pick = np.unique(np.linspace(0, late.shape[0] - 1, min(count, late.shape[0])).round().astype(int))
    return late[pick]


def flat_draws(positions: PyTree) -> np.ndarray:
    """``(chains, samples, d)``: the draws with every leaf's trailing axes flattened, in ``ravel_pytree`` order."""
    leaves = jax.tree_util.tree_leaves(positions)
    chains, samples = leaves[0].shape[:2]
    return np.concatenate([np.asarray(a, np.float64).reshape(chains, samples, -1) for a in leaves], axis=-1)


def parameter_names(positions: PyTree) -> tuple:
    """Labels of the flattened parameters: each leaf's path, with ``[i]`` for its elements."""
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(positions)[0]:
        base = jax.tree_util.keystr(path) or "theta"
        size = int(np.prod(np.shape(leaf)[2:]))
        names += [base] if size == 1 else [f"{base}[{i}]" for i in range(size)]
    return tuple(names)


def lag1(x: np.ndarray) -> np.ndarray:
    """Lag-1 autocorrelation of each column of ``(chains, samples, d)`` draws, pooled over chains, in ``[0, RHO_MAX]``."""
    c = x - x.mean(axis=1, keepdims=True)
    num = np.sum(c[:, 1:] * c[:, :-1], axis=(0, 1))
    den = np.maximum(np.sum(c * c, axis=(0, 1)), np.finfo(float).tiny)
    return np.clip(num / den, 0.0, RHO_MAX)


def exact_kernel_for(model: Model, proposal: Proposal, test: AcceptanceTest, estimator: Estimator | None, n: int, centre: PyTree):
    """The exact twin of the run's kernel: the same proposal, the exact decision on the run's test's random numbers (with
    ``centre``, the proxy's, on the estimator's terms with rounding zeroed; else every row's plain ratio)."""
    if centre is None or estimator is None:
        return build_kernel(model, proposal, CoupledExact(test), n)
    flat, unravel_c = ravel_pytree(centre)
    return build_kernel(model, proposal, CoupledExact(test, model, flat, unravel_c), n, estimator)


def start_steps(chains: int, samples: int, count: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(chain, step)`` of ``count`` starts evenly spaced over the second half of every chain, each ``steps`` before its end."""
    first, last = samples // 2, samples - 1 - steps
    if last < first:
        raise ValueError(f"the check continues {steps} steps from draws in the second half; {samples} draws per chain are too few")
    grid = last - first + 1
    pick = np.unique(np.linspace(0, chains * grid - 1, min(count, chains * grid)).round().astype(int))
    return pick // grid, first + pick % grid


def exact_continuation(model: Model, data: PyTree, proposal: Proposal, test: AcceptanceTest, estimator: Estimator | None, n: int,
                       starts: jax.Array, chain: np.ndarray, step: np.ndarray, run_key: jax.Array, num_chains: int, steps: int,
                       temperature: float, unravel, centre: PyTree = None) -> tuple:
    """The exact chains from ``starts`` (the run's draws at ``step`` of ``chain``) on the keys the run drew at steps
    ``step + 1 .. step + steps``: each step's flattened positions ``(K, T, d)`` and decisions ``(K, T)``."""
    kernel = exact_kernel_for(model, proposal, test, estimator, n, centre)
    temp = jnp.asarray(temperature, jnp.float32)

    def one(start: jax.Array, c: jax.Array, j: jax.Array, base: jax.Array):
        def move(state, t):
            state, outcome = kernel.step(step_keys(base, j + t, num_chains)[c], state, data, temp)
            return state, (ravel_pytree(state.position)[0], outcome.accepted)

        return jax.lax.scan(move, kernel.init(unravel(start)), jnp.arange(1, steps + 1, dtype=jnp.int32))[1]

    work = float(starts.shape[0]) * steps * n * starts.shape[1]
    run = jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None)), compiler_options=compile_options(work, CONTINUATION_WORK))
    return run(starts, jnp.asarray(chain, jnp.int32), jnp.asarray(step, jnp.int32), run_key)


def from_the_run(draws: np.ndarray, records: dict, chain: np.ndarray, step: np.ndarray, exact: np.ndarray, accepted: np.ndarray):
    """The run's ``X_T`` (its draws ``T`` steps on), per step whether the chains coincided (to float32 rounding: the
    programs differ) and decided differently, and the run's rows over those steps."""
    steps = exact.shape[1]
    ahead = step[:, None] + np.arange(1, steps + 1)
    before = np.concatenate([draws[chain, step][:, None], exact[:, :-1]], axis=1)
    same = np.all(np.isclose(draws[chain[:, None], ahead - 1], before, rtol=1e-5, atol=1e-6), axis=-1)
    split = same & (np.asarray(records["accepted"])[chain[:, None], ahead] != accepted)
    rows = np.asarray(records["batch_size"])[chain[:, None], ahead] + np.asarray(records["hidden_data"])[chain[:, None], ahead]
    return draws[chain, step + steps], split, int(np.sum(rows))


def coupled_run(model: Model, data: PyTree, proposal: Proposal, test: AcceptanceTest, estimator: Estimator | None,
                n: int, starts: jax.Array, key: jax.Array, steps: int, temperature: float, unravel, centre: PyTree = None) -> tuple:
    """``steps`` coupled steps from each start: the run's kernel and the exact one on the same keys (with ``centre``, the
    proxy's, on the estimator's terms with rounding zeroed; else every row's plain ratio). Returns the final flattened
    positions (run, exact), per step whether the chains coincided and decided differently, and the run's rows."""
    run_kernel = build_kernel(model, proposal, test, n, estimator)
    exact_kernel = exact_kernel_for(model, proposal, test, estimator, n, centre)
    temp = jnp.asarray(temperature, jnp.float32)

    def one(k: jax.Array, start: jax.Array):
        def step(carry, t):
            s_run, s_exact = carry
            kt = jax.random.fold_in(k, t)
            same = jnp.all(ravel_pytree(s_run.position)[0] == ravel_pytree(s_exact.position)[0])
            s_run, o_run = run_kernel.step(kt, s_run, data, temp)
            s_exact, o_exact = exact_kernel.step(kt, s_exact, data, temp)
            return (s_run, s_exact), (same & (o_run.accepted != o_exact.accepted), o_run.batch_size + o_run.hidden_data)

        theta = unravel(start)
        (s_run, s_exact), (split, rows) = jax.lax.scan(step, (run_kernel.init(theta), exact_kernel.init(theta)), jnp.arange(steps))
        return ravel_pytree(s_run.position)[0], ravel_pytree(s_exact.position)[0], split, jnp.sum(rows)

    keys = jax.random.split(key, starts.shape[0])
    work = float(starts.shape[0]) * steps * n * starts.shape[1]
    return jax.jit(jax.vmap(one), compiler_options=compile_options(work, CONTINUATION_WORK))(keys, starts)


def estimate(run: np.ndarray, exact: np.ndarray, centre: np.ndarray, sd: np.ndarray, rho: np.ndarray, steps: int):
    """Mean bias (in s.d.), its s.e., relative s.d. error and its s.e. from the paired final positions."""
    k = run.shape[0]
    gain = 1.0 - rho**steps
    a = (exact - run) / gain
    q = ((exact - centre) ** 2 - (run - centre) ** 2) / gain
    dm = a.mean(0)
    var = sd * sd
    dv = q.mean(0) - dm * dm  # E_exact (x - m)^2 = var_exact + (mean_exact - m)^2, m the run's mean
    ratio = np.sqrt(np.maximum(1.0 + dv / var, 0.0))
    mean_se = a.std(0, ddof=1) / np.sqrt(k) / sd
    sd_se = q.std(0, ddof=1) / np.sqrt(k) / var / (2.0 * np.maximum(ratio, 0.5))
    return dm / sd, mean_se, ratio - 1.0, sd_se


def check_posterior(model: Model, data: Any, proposal: Proposal, test: AcceptanceTest, estimator: Estimator | None,
                    positions: PyTree, *, starts: int = STARTS, steps: int = STEPS, temperature: float = 1.0,
                    key: jax.Array | int = 0, warn: bool = True, stratum: bool | None = None,
                    centre: PyTree = None, run_key: jax.Array | int | None = None, records: dict | None = None) -> PosteriorError | None:
    """The coupled exact continuation (module docstring) from ``starts`` thinned ``positions`` (leading axes: chains,
    samples) with the run's ``proposal``, ``test`` and ``estimator``; warns naming the parameters whose mean or s.d. is
    likely off, and what to do (``stratum``: whether the run had the exact stratum on; None: not offered). ``centre``: the
    proxy's centre, whose rows' float32 resolution the exact decision uses (None: every row's plain ratio). With the
    run's ``run_key`` (``sample``'s ``key``) and ``records``, the run's own draws are its side of the coupling (``key``
    unused); else both chains are stepped from ``key``. None where it cannot run: an out-of-core source (the exact chains
    need the rows in memory), or a test that tempers by itself."""
    starts, steps = check_int(starts, "starts", 2), check_int(steps, "steps", 1)
    source = as_data_source(data)
    if is_host_data(source.arrays()) or float(test.temperature_factor(source.n)) != 1.0:
        return None
    t0 = time.perf_counter()
    n = source.n
    starts = int(max(MIN_STARTS, min(starts, MAX_EVALUATIONS // (steps * n)))) if starts > MIN_STARTS else starts
    draws = flat_draws(positions)
    late = draws[:, draws.shape[1] // 2:]
    run_mean, sd = late.reshape(-1, late.shape[2]).mean(0), late.reshape(-1, late.shape[2]).std(0)
    sd = np.maximum(sd, np.finfo(np.float32).tiny)
    first = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)[0, 0]), positions)
    flat0, unravel = ravel_pytree(first)
    if run_key is None or records is None:
        x0 = thinned_starts(positions, starts)
        run, exact, split, rows = coupled_run(model, source.arrays(), proposal, test, estimator, n, jnp.asarray(x0, flat0.dtype),
                                              as_key(key), steps, temperature, unravel, centre)
    else:
        chain, step = start_steps(draws.shape[0], draws.shape[1], starts, steps)
        x0 = draws[chain, step]
        path, accepted = exact_continuation(model, source.arrays(), proposal, test, estimator, n, jnp.asarray(x0, flat0.dtype), chain,
                                            step, as_run_key(run_key, draws.shape[0]), draws.shape[0], steps, temperature, unravel, centre)
        path = np.asarray(path, np.float64)
        run, split, rows = from_the_run(draws, records, chain, step, path, np.asarray(accepted))
        exact = path[:, -1]
    run, exact = np.asarray(run, np.float64), np.asarray(exact, np.float64)
    rho = lag1(late)
    mean_bias, mean_se, sd_error, sd_se = estimate(run, exact, run_mean, sd, rho, steps)
    k = x0.shape[0]
    out = PosteriorError(parameter_names(positions), mean_bias, mean_se, sd_error, sd_se, k, steps, rho,
                         float(np.mean(np.asarray(split))), int(k * steps * n + int(np.sum(np.asarray(rows)))),
                         time.perf_counter() - t0)
    if warn and not out.ok:
        warnings.warn(posterior_warning(out, test, stratum), stacklevel=3)
    return out


def posterior_warning(out: PosteriorError, test: AcceptanceTest, stratum: bool | None) -> str:
    """The warning: which parameters, by how much (with the s.e.), how it was measured, and what to do."""
    parts = []
    for i, name in enumerate(out.names):
        said = []
        if out.mean_flagged[i]:
            said.append(f"mean off by {out.mean_bias[i]:+.2f} s.d. (s.e. {out.mean_se[i]:.2f})")
        if out.sd_flagged[i]:
            said.append(f"s.d. off by {100 * out.sd_error[i]:+.0f}% (s.e. {100 * out.sd_se[i]:.0f}%)")
        if said:
            parts.append(f"{name}: " + ", ".join(said))
    shown = "; ".join(parts[:8]) + (f"; and {len(parts) - 8} more" if len(parts) > 8 else "")
    return (f"the minibatch test moved the posterior: a coupled exact-test continuation ({out.starts} draws x {out.steps} "
            f"steps; exact minus run, tolerance {out.mean_tolerance:g} s.d. in a mean and {100 * out.sd_tolerance:g}% in an "
            f"s.d. beyond {out.z:g} s.e.) estimates {shown}; the two tests decided differently at "
            f"{100 * out.disagreement:.1f}% of steps. {advice(test, stratum)}")


def advice(test: AcceptanceTest, stratum: bool | None) -> str:
    """What to do, naming only options that are off."""
    todo = []
    if stratum is False:
        todo.append("enable the exact stratum (auto_sample(stratum=True)) so rows far from the proxy are read at every step")
    if isinstance(test, COUPLED):
        todo.append(f"a larger minibatch ({test.name} with batch_size above its {test.batch_size} rows)")
    todo.append("or sample with an exact test (MetropolisTest, BarkerTest; 'smh' where the model gives per-row bounds)")
    return "Do one of: " + ", ".join(todo) + "."
