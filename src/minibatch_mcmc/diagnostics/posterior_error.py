"""After sampling, the error of the posterior itself: a coupled exact continuation from thinned draws.

A minibatch test errs at each step (``proxy_check``'s per-step acceptance-probability error); what a user needs is
whether that moved a posterior mean or s.d. The check takes ``K`` thinned draws of the finished run, which follow the
minibatch chain's stationary law ``pi_eps``, and from each runs ``T`` steps of two chains that share every random
number (the proposal's noise, the test's uniforms): one steps with the run's own kernel, the other with the same
proposal and the exact full-data decision on every row's own log-likelihood ratio (``Delta`` above
``exact_twin.exact_threshold``: the Metropolis rule on the penalty or naive test's uniform, Barker's rule on
MHminibatch's normal and correction draws, an exact test's own draws for other tests). The run's chain stays in
``pi_eps``; the exact one drifts towards the posterior ``pi``. For ``f`` a parameter or its square about the run's mean,

    E f(X_T exact) - E f(X_T run) = (pi f - pi_eps f) (1 - rho^T)

to first order, ``rho`` the chain's lag-1 autocorrelation (read from the run's draws), so the mean over starts of the
paired differences, divided by ``1 - rho^T``, estimates the error of each mean and variance; its Monte Carlo s.e. is
the spread of the differences over the starts / ``sqrt(K)``. The coupling keeps the differences small: the chains
coincide until a step whose decisions differ, and proxy HMC's nearly independent moves bring them together again.
Where the exact chain mixes slower than the run, ``1 - rho^T`` is too large and the estimate errs towards 0.

The run's side is the run itself (``run_key``, its ``sample`` key, and ``records``, both what ``auto_sample`` passes, and
what a standalone call passes from its run): a start is the draw at step ``j`` of chain ``c``, the run's ``X_T`` its draw
at ``j + T``, and only the exact twin steps, on the keys the run used at steps ``j + 1 .. j + T``
(``exact_twin.exact_continuation``: the run's kernel proposing, one streamed pass over the rows per step for all ``K``
starts, the decision). A run whose test is exact has nothing to check: the check is skipped and says why
(``PosteriorError.skipped``).

Rule: a mean is flagged when ``|error| - Z_SE * s.e. > MEAN_TOLERANCE`` posterior s.d., an s.d. when its relative error
``|ratio - 1| - Z_SE * s.e. > SD_TOLERANCE``. Cost (``PosteriorError.passes``, plus the run's minibatch rows): with a
proxy and enough rows, every row for 4 starts at the first step, then per step a sample of about ``N / 256`` rows (at
least 3,072) and every row only for a start whose decision the sample leaves open (``twin_sums``: the same decisions as
every row's, to a sampled estimate off by 5 of its s.e., and audited); else ``K T`` passes, one streamed read a step for
all starts. Past ``MAX_EVALUATIONS`` planned the starts are cut (the s.e. grows as ``1 / sqrt(K)``; the warning states
``K`` and each s.e.) down to ``MIN_STARTS``.
It needs the rows in memory (a host-streamed source returns None: ``proxy_check``'s per-step figures then warn as before).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.exact import BarkerTest, MetropolisTest
from minibatch_mcmc.acceptance.registry import contract
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.data.host import is_host_data
from minibatch_mcmc.diagnostics.exact_twin import (
    COUPLED,
    exact_continuation,
    from_the_run,
    start_steps,
    too_few_draws,
    twin_plan,
)
from minibatch_mcmc.diagnostics.twin_sums import Sampling, planned_evaluations
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.keys import as_run_key
from minibatch_mcmc.samplers.phase_cost import COMPILE_SECONDS

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
"""Planned row evaluations (``twin_sums.planned_evaluations``) above which the starts are cut, down to ``MIN_STARTS``."""
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
    """Row evaluations: the exact twin's (``K T N`` where it reads every row at every step), plus the run's minibatch
    rows."""
    seconds: float
    """Wall time of the continuation."""
    n_data: int = 0
    """``N``: rows of the data (``passes`` is ``data_used / N``)."""
    compile_seconds: float = math.nan
    """Of ``seconds``, those spent compiling."""
    skipped: str = ""
    """Why nothing was checked (the run's test is exact), or empty."""
    mean_tolerance: float = MEAN_TOLERANCE
    sd_tolerance: float = SD_TOLERANCE
    z: float = Z_SE

    @property
    def passes(self) -> float:
        """Row evaluations in passes over ``N`` (``K T`` plus the run's rows where every row is read at every step)."""
        return self.data_used / max(self.n_data, 1)

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


def flat_layout(position: PyTree) -> tuple[Any, Any]:
    """``(dtype, unravel)`` of ``ravel_pytree`` on one position, traced for its shapes only: no eager reshape or
    concatenation to compile (its ``unravel`` holds only the leaves' sizes, shapes and dtypes)."""
    got = []

    def flat(p: PyTree) -> jax.Array:
        raveled, unravel = ravel_pytree(p)
        got.append(unravel)
        return raveled

    return jax.eval_shape(flat, position).dtype, got[0]


def lag1(x: np.ndarray) -> np.ndarray:
    """Lag-1 autocorrelation of each column of ``(chains, samples, d)`` draws, pooled over chains, in ``[0, RHO_MAX]``."""
    c = x - x.mean(axis=1, keepdims=True)
    num = np.sum(c[:, 1:] * c[:, :-1], axis=(0, 1))
    den = np.maximum(np.sum(c * c, axis=(0, 1)), np.finfo(float).tiny)
    return np.clip(num / den, 0.0, RHO_MAX)


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


def affordable_starts(starts: int, steps: int, plan: Sampling, n_pop: int) -> int:
    """The most starts, up to ``starts``, whose planned row evaluations (``twin_sums.planned_evaluations``) stay within
    ``MAX_EVALUATIONS``; never below ``MIN_STARTS`` (nor above ``starts``)."""
    fits = [k for k in range(MIN_STARTS, starts + 1) if planned_evaluations(plan, k, steps, n_pop) <= MAX_EVALUATIONS]
    return max(fits, default=min(starts, MIN_STARTS))


def nothing_to_check(test: AcceptanceTest, records: dict) -> str:
    """Why a run's draws carry no minibatch error (its test decides exactly), or empty: a full-data test, or an exact
    bound-based test (``reads_bounds``) whose bounds held at every step."""
    if isinstance(test, (MetropolisTest, BarkerTest)):
        return f"the run's test ({test.name}) decided every step on all rows: there is no minibatch error to measure"
    if contract(test).reads_bounds and not np.any(np.asarray(records.get("bound_exceeded", 0))):
        return f"the run's test ({test.name}) is exact where its per-row bounds hold, and they held at every step"
    return ""


def check_posterior(
    model: Model,
    data: Any,
    proposal: Proposal,
    test: AcceptanceTest,
    estimator: Estimator | None,
    positions: PyTree,
    *,
    run_key: jax.Array | int,
    records: dict,
    starts: int = STARTS,
    steps: int = STEPS,
    temperature: float = 1.0,
    warn: bool = True,
    stratum: bool | None = None,
    centre: PyTree = None,
) -> PosteriorError | None:
    """The coupled exact continuation (module docstring) from ``starts`` of the run's draws ``positions`` (leading axes:
    chains, samples) with the run's ``proposal``, ``test`` and ``estimator``, on the run's keys (``run_key``: the key
    ``sample`` was given) and its ``records`` (``SampleResult.records``); warns naming the parameters whose mean or s.d.
    is likely off, and what to do (``stratum``: whether the run had the exact stratum on; None: not offered). ``centre``:
    the proxy's centre, whose rows' float32 resolution the exact decision uses (None: every row's plain ratio). A run
    whose test is exact is skipped (``skipped`` says why). None where it cannot run: an out-of-core source (the exact
    chains need the rows in memory), or a test that tempers by itself."""
    starts, steps = check_int(starts, "starts", 2), check_int(steps, "steps", 1)
    if run_key is None or records is None:
        raise ValueError(
            "check_posterior continues the run on its own draws and keys: pass run_key= (the key sample was "
            f"given) and records= (its SampleResult.records); got run_key={run_key!r}, records="
            f"{'None' if records is None else 'given'}"
        )
    source = as_data_source(data)
    if is_host_data(source.arrays()) or float(test.temperature_factor(source.n)) != 1.0:
        return None
    t0, c0 = time.perf_counter(), COMPILE_SECONDS[0]
    n = source.n
    names = parameter_names(positions)
    why = nothing_to_check(test, records) or too_few_draws(int(jax.tree_util.tree_leaves(positions)[0].shape[1]), steps)
    if why:
        zero = np.zeros(len(names))
        return PosteriorError(names, zero, zero, zero, zero, 0, 0, zero, 0.0, 0, time.perf_counter() - t0, n, 0.0, why)
    starts = affordable_starts(starts, steps, *twin_plan(estimator, centre, source.arrays(), n, starts, steps))
    draws = flat_draws(positions)
    late = draws[:, draws.shape[1] // 2 :]
    run_mean, sd = late.reshape(-1, late.shape[2]).mean(0), late.reshape(-1, late.shape[2]).std(0)
    sd = np.maximum(sd, np.finfo(np.float32).tiny)
    dtype, unravel = flat_layout(jax.tree_util.tree_map(lambda a: np.asarray(a)[0, 0], positions))
    chain, step = start_steps(draws.shape[0], draws.shape[1], starts, steps)
    x0 = draws[chain, step]
    path, accepted, evaluations = exact_continuation(
        model,
        source.arrays(),
        proposal,
        test,
        estimator,
        n,
        np.asarray(x0, dtype),  # host arrays in: no eager conversion to compile
        chain,
        step,
        as_run_key(run_key, draws.shape[0]),
        draws.shape[0],
        steps,
        temperature,
        unravel,
        centre,
    )
    path = np.asarray(path, np.float64)
    run, split, rows = from_the_run(draws, records, chain, step, path, np.asarray(accepted))
    mean_bias, mean_se, sd_error, sd_se = estimate(
        np.asarray(run, np.float64), path[:, -1], run_mean, sd, lag1(late), steps
    )
    k = x0.shape[0]
    out = PosteriorError(
        names,
        mean_bias,
        mean_se,
        sd_error,
        sd_se,
        k,
        steps,
        lag1(late),
        float(np.mean(split)),
        int(evaluations + rows),
        time.perf_counter() - t0,
        n,
        COMPILE_SECONDS[0] - c0,
    )
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
    return (
        f"the minibatch test moved the posterior: a coupled exact-test continuation ({out.starts} draws x {out.steps} "
        f"steps; exact minus run, tolerance {out.mean_tolerance:g} s.d. in a mean and {100 * out.sd_tolerance:g}% in an "
        f"s.d. beyond {out.z:g} s.e.) estimates {shown}; the two tests decided differently at "
        f"{100 * out.disagreement:.1f}% of steps. {advice(test, stratum)}"
    )


def advice(test: AcceptanceTest, stratum: bool | None) -> str:
    """What to do, naming only options that are off."""
    todo = []
    if stratum is False:
        todo.append(
            "enable the exact stratum (auto_sample(stratum=True)) so rows far from the proxy are read at every step"
        )
    if isinstance(test, COUPLED):
        todo.append(f"a larger minibatch ({test.name} with batch_size above its {test.batch_size} rows)")
    todo.append("or sample with an exact test (MetropolisTest, BarkerTest; 'smh' where the model gives per-row bounds)")
    return "Do one of: " + ", ".join(todo) + "."
