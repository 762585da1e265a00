"""The exact twin of a finished run, stepped from its draws on the keys the run drew (``posterior_error``'s continuation).

A start is the run's draw at step ``j`` of chain ``c``; the twin steps ``T`` times on the keys the run used at steps
``j + 1 .. j + T`` (``keys.step_keys``), with the run's own proposal and the exact full-data decision on the run's test's
random numbers (``coupled_accept``). So it coincides with the run until their decisions first differ.

The twin is two compiled functions called from the host, each compiled once for all ``K`` starts, all ``T`` steps and
every sample, larger sample and full read (nothing else is compiled: host arrays in, no eager operation). The step
(``advance``): the previous step's decision (``Delta > tau`` on the threshold its proposal drew; none at the first step,
which takes the starts' states) and the run's kernel proposing (``build_kernel`` with ``ProposeOnly``: the proposal,
prior, proposal ratio and the control variate's known sum, nothing read per row; fast compilation; also each start's
threshold ``tau``, ``exact_threshold``). Then the step's sums of residuals. Init, proposing and deciding were three
programs (4 compilations a check warm, 13 in a fresh process with the eager conversions; now 2).

With a proxy and enough rows the sums are read from a sample of the rows wherever it settles the decision (``twin_sums``: about ``4 N + K T m`` row evaluations, ``m``
a few thousand rows or ``N / 256``, per check); otherwise by one streamed pass over the rows for all ``K`` starts at
once (the starts vmapped inside each chunk, so each step reads the data once: ``T`` reads of ``N`` per check, ``K T N``
row evaluations). Compiled apart from the sums, the step skips LLVM's optimisation and the pass's per-row body is compiled
once (equal chunks, the last one overlapping and masked; ``PASS_ELEMENTS``), where one fused program compiled the
proposal at full optimisation and the row body three times (the first row's shift, the loop, the remainder chunk).

Known limit (issue 32): the twin's ``Delta`` counts each residual within its row's float32 resolution as 0
(``influence.without_rounding``), which also drops true residuals below that floor; on the Student-t regression with
``nu`` and ``sigma`` estimated (a declared shared term) their sum left the twin's full-data ``Delta`` further from
float64 than the plain float32 sum of the run's own terms at N = 10^5 and 3 x 10^5 (not at 10^6, where the plain sum's
rounding grows past it), and a few of the check's differing steps were the twin's (``benchmarks/twin_gap.py``; figures
in ``docs/benchmarks.md``). Most were the run's: its minibatch's float32 rounding.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.base import (
    Statistics,
    TestOutcome,
    data_free_delta,
    full_data_outcome,
    no_checks,
    no_rows_first,
    uniform_from_bits,
    untempered,
)
from minibatch_mcmc.acceptance.correction import correction_from_uniforms
from minibatch_mcmc.acceptance.mhminibatch import MHMinibatch, random_inputs
from minibatch_mcmc.acceptance.naive import NaiveMinibatch
from minibatch_mcmc.acceptance.penalty import PenaltyTest
from minibatch_mcmc.acceptance.streaming import order_and_uniform
from minibatch_mcmc.compiling import fast_compile_options
from minibatch_mcmc.control_variates.base import Estimator, plain
from minibatch_mcmc.control_variates.influence import without_rounding
from minibatch_mcmc.data.arrays import DistinctRows, distinct_rows, slice_rows, take
from minibatch_mcmc.data.passes import DEFAULT_CHUNK
from minibatch_mcmc.diagnostics.twin_sums import (
    Sampling,
    StepReader,
    first_reading,
    gathered_sums,
    planned_evaluations,
    read_step,
    sampling_plan,
    slots_for,
)
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.kernel import build_kernel, gradient_data_used
from minibatch_mcmc.samplers.keys import split_step, step_keys

PyTree = Any

CONTINUATION_WORK = 5e7
"""Largest ``K T N d`` (the check's row evaluations x d) whose full-data pass compiles fast (``compiling.FAST_COMPILE``).
Measured on the loaded 2-core machine, one fused program: the linear model on Cauchy noise (d = 3, N = 10^5, K = 128,
T = 8: ``3e8``) compiled in 24 s and ran in 22 s, fast 9 s and 87 s; the Student-t regression (d = 5, N = 20,000:
``1e8``) 27 s and 0.5 s, fast 17 s and 3 s. The proposing and deciding functions compile fast below it too, with the
rows a gradient proposal reads counted in."""
GATHERED_WORK = 1e7
"""Largest planned ``row evaluations x d`` whose gathered sums (``twin_sums.gathered_sums``) compile fast: far below
``CONTINUATION_WORK``, the gathered function being small. Measured on the loaded 2-core machine, the Student-t
regression (d = 5, 2 starts x 6,144 rows a call): compiling 1.7-1.9 CPU s at XLA's defaults, 1.25 fast; a call 1.3 ms
CPU, fast 4.5 ms (0.11 and 0.36 us a row evaluation), so the defaults repay their compilation past about 2 x 10^6
row evaluations (at N = 10^5, K = 100, T = 16 the plan is 5.7 x 10^6: work 2.8e7, compiled fast before)."""
PASS_ELEMENTS = 1 << 17
"""On the CPU, row evaluations per chunk of the twin's pass (``K`` starts x the chunk's rows; all starts are evaluated on a
chunk before the next is read), so a chunk's intermediates stay in cache. Measured on the loaded 2-core machine, the
Student-t regression's pass (d = 5): at N = 10^5 and K = 100, 2.0 s at 16,384 rows a chunk, 1.0 s at 4,096, 0.8 s at
1,024; at N = 10^6 and K = 32, 4.9 s at 16,384 rows, 2.4 s at 4,096. Elsewhere (not measured) a chunk is
``data.passes.DEFAULT_CHUNK`` rows, as before."""

COUPLED = (PenaltyTest, MHMinibatch, NaiveMinibatch)
"""Tests whose random numbers ``coupled_accept`` reuses; any other test's exact twin draws its own (weaker coupling)."""


def coupled_threshold(test: Any, key: jax.Array, dtype: Any) -> jax.Array:
    """``tau``: the exact decision at ``Delta`` is ``Delta > tau``, from the uniforms ``test`` draws from ``key``:
    ``tau = log u`` on the penalty test's (or the naive test's) ``u``; for MHminibatch ``-(N(0, sigma^2) + X_corr)`` on
    its normal and correction uniforms (Barker's rule, up to the correction table's CDF error)."""
    if isinstance(test, NaiveMinibatch):
        return jnp.log(order_and_uniform(key, dtype)[1])
    u = uniform_from_bits(random_inputs(key)[1], dtype)
    if isinstance(test, PenaltyTest):
        return jnp.log(u[0])
    x_n = jnp.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * u[0] - 1.0) * test.sigma
    return -(x_n + correction_from_uniforms(u[1], u[2], test.correction).astype(dtype))


def exact_threshold(test: Any, key: jax.Array, dtype: Any) -> jax.Array:
    """``coupled_threshold`` for the tests it knows; for any other, that of the full-data test of its rule on its own
    draws from ``key`` (``BarkerTest``'s logistic for Barker's rule, else ``MetropolisTest``'s uniform, as they draw
    them)."""
    if isinstance(test, COUPLED):
        return coupled_threshold(test, key, dtype)
    if test.decision_rule == "barker":
        return -jax.random.logistic(key, (), dtype)
    return jnp.log(jax.random.uniform(key, (), dtype, minval=jnp.finfo(dtype).tiny))


def coupled_accept(test: Any, key: jax.Array, delta: jax.Array) -> jax.Array:
    """The exact decision at ``delta`` on the run's random numbers: ``delta > coupled_threshold``."""
    return delta > coupled_threshold(test, key, delta.dtype)


class Pending(NamedTuple):
    """What one call of the twin's step function hands the next: the states, each start's candidate, the data-free part
    of its ``Delta`` and its threshold (``exact_threshold``)."""

    states: Any
    moved: Any
    free: jax.Array
    tau: jax.Array


class Fixed(NamedTuple):
    """The twin's inputs every step reads: the starts (flat), their chains and steps in the run, the run's key."""

    starts: np.ndarray
    chain: np.ndarray
    step: np.ndarray
    base: jax.Array


class ProposeOnly(NamedTuple):
    """A test that accepts every candidate and hands back the data-free part of ``Delta`` (``psi``, plus the control
    variate's known sum with ``known``) as ``delta_star``: the run's kernel with it proposes and reads no row."""

    known: bool = True
    name: str = "propose_only"
    decision_rule = "metropolis"
    validate = staticmethod(no_checks)
    temperature_factor = staticmethod(untempered)
    first_rows = staticmethod(no_rows_first)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept, with ``delta_star`` the data-free part of ``Delta``."""
        del key
        free = data_free_delta(stats) if self.known else stats.psi
        return full_data_outcome(jnp.ones((), bool), free, jnp.zeros((), bool), 0)


def residual_pass(model: Model, estimator: Estimator, n_pop: int, centre: PyTree, chunk: int):
    """``(population, currents, candidates) -> (Lambda, bad)``, each ``(K,)``: ``sum_i`` of the estimator's per-row terms
    for every start's pair, in one streamed pass of equal chunks (the last overlapping, its repeated rows masked), and
    whether a term was not finite. With ``centre`` each term within its row's float32 resolution counts as 0
    (``influence.without_rounding``); without, the plain ratios are summed relative to the first row's (``exact_delta``'s
    shift: a common offset of ``N`` terms does not accumulate rounding)."""
    size = max(1, min(chunk, n_pop))
    count = -(-n_pop // size)
    flat_c, unravel_c = ravel_pytree(centre) if centre is not None else (None, None)

    def terms(current: PyTree, candidate: PyTree, rows: PyTree) -> jax.Array:
        r = estimator.log_ratio(model, current, candidate)(rows)
        return r if centre is None else without_rounding(r, model, flat_c, unravel_c, rows)

    def run(population: PyTree, currents: PyTree, candidates: PyTree) -> tuple[jax.Array, jax.Array]:
        many = jax.vmap(terms, in_axes=(0, 0, None))
        k = jax.tree_util.tree_leaves(currents)[0].shape[0]
        r0 = jnp.zeros((k,), jnp.float32)
        if centre is None:
            r0 = many(currents, candidates, take(population, jnp.zeros((1,), jnp.int32)))[:, 0]
            r0 = jnp.where(jnp.isfinite(r0), r0, 0.0)

        def body(i: jax.Array, acc: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            start = jnp.minimum(i * size, n_pop - size)
            v = many(currents, candidates, slice_rows(population, start, size)) - r0[:, None]
            v = jnp.where(start + jnp.arange(size) >= i * size, v, 0.0)
            return acc[0] + jnp.sum(v, axis=1), acc[1] | jnp.any(~jnp.isfinite(v), axis=1)

        lam, bad = jax.lax.fori_loop(0, count, body, (jnp.zeros((k,), jnp.float32), jnp.zeros((k,), bool)))
        lam = lam + jnp.asarray(n_pop, jnp.float32) * r0
        return lam, bad | ~jnp.isfinite(lam)

    return run


def too_few_draws(samples: int, steps: int) -> str:
    """Why ``samples`` draws per chain leave no start in their second half with ``steps`` draws after it, or empty."""
    if samples - 1 - steps >= samples // 2:
        return ""
    return (
        f"the run has {samples} draws per chain and the check continues {steps} steps from draws in their second half: "
        f"it needs at least {2 * steps + 1}; draw more to have the posterior checked"
    )


def start_steps(chains: int, samples: int, count: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(chain, step)`` of ``count`` starts evenly spaced over the second half of every chain, each ``steps`` before its end."""
    why = too_few_draws(samples, steps)
    if why:
        raise ValueError(why)
    first, last = samples // 2, samples - 1 - steps
    grid = last - first + 1
    pick = np.unique(np.linspace(0, chains * grid - 1, min(count, chains * grid)).round().astype(int))
    return pick // grid, first + pick % grid


def exact_continuation(
    model: Model,
    data: PyTree,
    proposal: Proposal,
    test: Any,
    estimator: Estimator | None,
    n: int,
    starts: jax.Array,
    chain: np.ndarray,
    step: np.ndarray,
    run_key: jax.Array,
    num_chains: int,
    steps: int,
    temperature: float,
    unravel,
    centre: PyTree = None,
) -> tuple:
    """The exact chains from ``starts`` (the run's draws at ``step`` of ``chain``) on the keys the run drew at steps
    ``step + 1 .. step + steps``: each step's flattened positions ``(K, T, d)``, decisions ``(K, T)`` and the row
    evaluations it made (module docstring; ``twin_sums`` for which rows each step reads)."""
    run_estimator = plain() if estimator is None else estimator
    exact = run_estimator if centre is not None else plain()
    kernel = build_kernel(model, proposal, ProposeOnly(known=centre is not None), n, run_estimator)
    k, d = starts.shape
    temp = np.float32(temperature)  # a host scalar: no eager conversion to compile
    n_pop = exact.population_size(n)
    small = fast_compile_options(float(k) * steps * d * max(1, gradient_data_used(proposal, n)), CONTINUATION_WORK)

    def propose(t: jax.Array, states, cs: jax.Array, js: jax.Array, base: jax.Array, rows: PyTree):
        def one(state, c, j):
            key = step_keys(base, j + t, num_chains)[c]
            moved, outcome = kernel.step(key, state, rows, temp)
            k_test = split_step(key)[1]
            return moved, outcome.delta_star, exact_threshold(test, k_test, outcome.delta_star.dtype)

        return jax.vmap(one)(states, cs, js)

    def advance(t: jax.Array, pending: Pending, lam: jax.Array, bad: jax.Array, fixed: Fixed, rows: PyTree):
        """Step ``t - 1``'s decision (none at ``t = 1``: the starts' states) and step ``t``'s candidates."""
        fresh = jax.vmap(lambda x: kernel.init(unravel(x)))(fixed.starts)
        first = t == 1
        states = jax.tree_util.tree_map(lambda a, b: jnp.where(first, a, b), fresh, pending.states)
        accepted = (lam / temp + pending.free > pending.tau) & ~bad & ~first
        states = jax.tree_util.tree_map(
            lambda new, old: jnp.where(accepted.reshape((-1,) + (1,) * (new.ndim - 1)), new, old),
            pending.moved,
            states,
        )
        flat = jax.vmap(lambda p: ravel_pytree(p)[0])(states.position)
        return Pending(states, *propose(t, states, fixed.chain, fixed.step, fixed.base, rows)), flat, accepted

    advance = jax.jit(advance, compiler_options=small)
    fixed = Fixed(np.asarray(starts), np.asarray(chain, np.int32), np.asarray(step, np.int32), run_key)

    # what ``advance`` hands on, as host zeros of the starts' states' shapes (only ``init`` traced, nothing compiled);
    # unread at ``t = 1``. A candidate's state has its start's structure, ``Delta`` the log prior's dtype.
    shapes = jax.eval_shape(jax.vmap(lambda x: kernel.init(unravel(x))), fixed.starts)
    zeros = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), shapes)
    pending = Pending(zeros, zeros, zeros.log_prior, zeros.log_prior)
    units = distinct_rows(exact.population(data), n_pop)
    plan = sampling_plan(units.position.size, k, steps, centre)
    if plan.rows:
        reader, reading = sampled_reader(model, exact, centre, k, d, steps, plan, n_pop, units), first_reading()
    else:
        chunk = max(64, PASS_ELEMENTS // k) if jax.default_backend() == "cpu" else DEFAULT_CHUNK
        pass_ = residual_pass(model, exact, n_pop, centre, chunk)
        sums = jax.jit(
            lambda rows, currents, candidates: pass_(exact.population(rows), currents, candidates),
            compiler_options=fast_compile_options(float(k) * steps * n * d, CONTINUATION_WORK),
        )
    path, accepted, evaluations = [], [], 0
    lam, bad = np.zeros(k, np.float32), np.ones(k, bool)
    for t in range(1, steps + 2):
        pending, flat, acc = advance(np.int32(t), pending, lam, bad, fixed, data)
        if t > 1:
            path.append(np.asarray(flat))
            accepted.append(np.asarray(acc))
        if t > steps:
            break
        states, moved, free, tau = pending.states, pending.moved, pending.free, pending.tau
        if plan.rows:
            at, to = (jax.tree_util.tree_map(np.asarray, p) for p in (states.position, moved.position))
            edge = (np.asarray(tau, np.float64) - np.asarray(free, np.float64)) * temperature
            lam, bad, reading = read_step(reader, reading, t, data, at, to, edge)
            lam, bad, evaluations = np.asarray(lam, np.float32), np.asarray(bad), reading.rows
        else:
            (lam, bad), evaluations = sums(data, states.position, moved.position), evaluations + k * n_pop
    return np.stack(path, axis=1), np.stack(accepted, axis=1), evaluations


def twin_plan(
    estimator: Estimator | None, centre: PyTree, data: PyTree, n: int, starts: int, steps: int
) -> tuple[Sampling, int]:
    """How the twin reads the rows (``twin_sums.sampling_plan``) and how many distinct rows a full read evaluates."""
    exact = plain() if estimator is None or centre is None else estimator
    rows = distinct_rows(exact.population(data), exact.population_size(n)).position.size
    return sampling_plan(rows, starts, steps, centre), rows


def sampled_reader(
    model, exact, centre, k: int, d: int, steps: int, plan: Sampling, n_pop: int, units: DistinctRows | None = None
):
    """``twin_sums.StepReader``: its gathered sums compiled for the ``k`` starts (``twin_sums.slots_for``), reading the
    population's distinct rows ``units`` (``data.arrays.distinct_rows``; None: each of the ``n_pop`` positions is one)."""
    run = gathered_sums(model, exact, centre)
    units = distinct_rows(None, n_pop) if units is None else units
    work = float(planned_evaluations(plan, k, steps, units.position.size)) * d
    gathered = jax.jit(
        lambda rows, *args: run(exact.population(rows), *args),
        compiler_options=fast_compile_options(work, GATHERED_WORK),
    )
    return StepReader(gathered, plan, n_pop, 0, slots_for(k), units)


def from_the_run(
    draws: np.ndarray, records: dict, chain: np.ndarray, step: np.ndarray, exact: np.ndarray, accepted: np.ndarray
):
    """The run's ``X_T`` (its draws ``T`` steps on), per step whether the chains coincided (to float32 rounding: the
    programs differ) and decided differently, and the run's rows over those steps."""
    steps = exact.shape[1]
    ahead = step[:, None] + np.arange(1, steps + 1)
    before = np.concatenate([draws[chain, step][:, None], exact[:, :-1]], axis=1)
    same = np.all(np.isclose(draws[chain[:, None], ahead - 1], before, rtol=1e-5, atol=1e-6), axis=-1)
    split = same & (np.asarray(records["accepted"])[chain[:, None], ahead] != accepted)
    rows = (
        np.asarray(records["batch_size"])[chain[:, None], ahead]
        + np.asarray(records["hidden_data"])[chain[:, None], ahead]
    )
    return draws[chain, step + steps], split, int(np.sum(rows))
