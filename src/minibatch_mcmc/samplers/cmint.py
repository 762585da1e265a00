"""Cyclic MINT (CMINT, Li and Wong Section 4.3.1): a cyclic Langevin step-size schedule and a snapshot ensemble.

MINT runs with a Langevin (SGLD) proposal followed by its minibatch test. CMINT changes only the
proposal's step size over epochs: within a round of ``R`` epochs the step is multiplied by a
factor in ``(0, 1)`` every ``r`` epochs; after the round a snapshot of the parameters joins the
ensemble and the step is multiplied by a factor ``> 1``; ``K`` rounds give ``K`` snapshots. The
ensemble predicts with the average of the snapshots' predictive probabilities.

Each epoch runs on the library's one loop, the block runner (``scaled_runner.scan_steps``, ``sample``'s key
schedule), with the step size as its traced scale and the epoch's sums carried in a ``StepHook``, so a whole
schedule compiles once. The Langevin drift targets the same tempered
posterior as the test (``T = n^(1 - lambda)`` for MINT), so proposal and test agree.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.mint import MINT, mint
from minibatch_mcmc.checks import check_int, check_positive, check_probability, check_real
from minibatch_mcmc.data.arrays import DataSource, as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.langevin import tempered_langevin
from minibatch_mcmc.samplers.kernel import ChainState, build_kernel
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.scaled_runner import StepHook, make_hooked_runner

PyTree = Any


class CMINTSchedule(NamedTuple):
    """CMINT's step-size schedule over epochs: shrink every ``r`` epochs, grow after each round of ``R``."""

    step_size: float
    """Initial Langevin step size ``alpha_0``."""
    decay_every: int = 5
    """``r``: epochs between two multiplications by ``decay_factor`` within a round."""
    decay_factor: float = 0.9
    """Factor in ``(0, 1)`` applied every ``r`` epochs."""
    cycle_length: int = 50
    """``R >= r``: epochs per round; a snapshot is taken at the end of each round."""
    increase_factor: float = 2.0
    """Factor ``> 1`` applied to the step size after each round (after the snapshot)."""
    num_cycles: int = 10
    """``K``: number of rounds, hence of snapshots in the ensemble."""

    def validate(self) -> None:
        """Raise a ValueError naming the first bad parameter."""
        check_positive(self.step_size, "step_size")
        r = check_int(self.decay_every, "decay_every (r)", 1)
        big_r = check_int(self.cycle_length, "cycle_length (R)", 1)
        if r > big_r:
            raise ValueError(f"decay_every r={r} must not exceed cycle_length R={big_r} (the paper's r <= R)")
        check_probability(self.decay_factor, "decay_factor")
        check_real(self.increase_factor, "increase_factor", 1.0, low_open=True)
        check_int(self.num_cycles, "num_cycles (K)", 1)

    @property
    def total_epochs(self) -> int:
        """``K R`` epochs in all."""
        return int(self.num_cycles) * int(self.cycle_length)

    @property
    def decays_per_cycle(self) -> int:
        """Decays applied within one round before its snapshot: ``floor((R - 1) / r)``."""
        return (int(self.cycle_length) - 1) // int(self.decay_every)

    def step_size_at(self, epoch: int | np.ndarray) -> float | np.ndarray:
        """Step size during 0-based ``epoch``: ``alpha_0 (g d^D)^c d^floor(j / r)`` with ``c, j = divmod(epoch, R)``.

        ``d`` is ``decay_factor``, ``g`` is ``increase_factor`` and ``D = floor((R - 1) / r)`` the decays
        of a full round: each round starts from the previous round's last step size times ``g``.
        """
        e = np.asarray(epoch)
        if not np.issubdtype(e.dtype, np.integer) or np.any(e < 0) or np.any(e >= self.total_epochs):
            raise ValueError(f"epoch={epoch!r} must be an integer in [0, {self.total_epochs}) (K R epochs)")
        c, j = np.divmod(e, int(self.cycle_length))
        per_round = float(self.increase_factor) * float(self.decay_factor) ** self.decays_per_cycle
        out = float(self.step_size) * per_round**c * float(self.decay_factor) ** (j // int(self.decay_every))
        return float(out) if np.ndim(out) == 0 else out

    def epoch_step_sizes(self) -> np.ndarray:
        """The step size of every epoch, shape ``(K R,)``."""
        return self.step_size_at(np.arange(self.total_epochs))

    def snapshot_epochs(self) -> tuple[int, ...]:
        """Epoch counts after which snapshots are taken: ``R, 2R, ..., K R`` (just before each increase)."""
        return tuple(int(self.cycle_length) * (c + 1) for c in range(int(self.num_cycles)))


def cmint_schedule(
    step_size: float,
    decay_every: int = 5,
    decay_factor: float = 0.9,
    cycle_length: int = 50,
    increase_factor: float = 2.0,
    num_cycles: int = 10,
) -> CMINTSchedule:
    """A validated CMINT schedule (defaults: the paper's r=5, 0.9, R=50, 2, K=10)."""
    s = CMINTSchedule(step_size, decay_every, decay_factor, cycle_length, increase_factor, num_cycles)
    s.validate()
    return s


class EpochStats(NamedTuple):
    """What one epoch of Langevin-MH steps reports."""

    acceptance_rate: jax.Array
    """Fraction of the epoch's proposals accepted."""
    position_sum: PyTree
    """Sum of the epoch's positions (one per step), for running averages of the samples."""
    nonfinite: jax.Array
    """True when some step met a non-finite log-likelihood ratio."""


class EpochRunner(NamedTuple):
    """A jitted epoch of Langevin-MH steps and the settings it was built for (reusable across runs)."""

    run: Callable[[jax.Array, jax.Array, ChainState, PyTree, jax.Array], tuple[ChainState, EpochStats]]
    """``run(key, epoch, state, data, step_size) -> (state, stats)``."""
    model: Model
    test: AcceptanceTest
    n_data: int
    batch_size: int
    steps_per_epoch: int
    temperature_factor: float


def epoch_sums(carry: tuple[jax.Array, PyTree, jax.Array], t: jax.Array, states: ChainState, rec: dict):
    """The ``StepHook`` update of an epoch: decisions, positions and non-finite steps summed over its steps."""
    acc, psum, bad = carry
    return (
        acc + rec["accepted"].astype(jnp.float32),
        jax.tree_util.tree_map(jnp.add, psum, states.position),
        bad | rec["nonfinite"],
    )


def make_epoch_runner(
    model: Model,
    test: AcceptanceTest,
    n_data: int,
    batch_size: int,
    steps_per_epoch: int,
    temperature_factor: float = 1.0,
) -> EpochRunner:
    """A jitted ``run(key, epoch, state, data, step_size) -> (state, stats)`` doing ``steps_per_epoch`` steps.

    Each step is ``build_kernel``'s MH transition with a ``tempered_langevin`` proposal (gradient
    minibatch ``batch_size``) and ``test``, on the block runner (``scaled_runner.scan_steps``) as one chain:
    step ``j`` of epoch ``e`` has ``sample``'s key of step ``e * steps_per_epoch + j``, the step size is the
    runner's traced scale and the epoch's sums are its ``StepHook``, so any schedule compiles once.
    """
    spe = check_int(steps_per_epoch, "steps_per_epoch", 1)
    # the kernel already tempers the drift by the test's own factor (MINT's T): the proposal adds only the rest
    extra_factor = float(temperature_factor) / float(test.temperature_factor(n_data))

    def kernel_for(step_size: jax.Array):
        return build_kernel(
            model, tempered_langevin(model.log_prior, step_size, batch_size, extra_factor), test, n_data
        )

    block = make_hooked_runner(kernel_for, 1, StepHook(epoch_sums), keep_draws=False)

    @jax.jit
    def run(
        key: jax.Array, epoch: jax.Array, state: ChainState, data: PyTree, step_size: jax.Array
    ) -> tuple[ChainState, EpochStats]:
        states = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], state)  # one chain
        steps = epoch * spe + jnp.arange(spe, dtype=jnp.int32)
        zero = (jnp.zeros(1, jnp.float32), jax.tree_util.tree_map(jnp.zeros_like, states.position), jnp.zeros(1, bool))
        states, _, _, (acc, psum, bad) = block(key, states, data, steps, jnp.ones(spe, jnp.float32), step_size, zero)
        first = partial(jax.tree_util.tree_map, lambda a: a[0])
        return first(states), EpochStats(acc[0] / spe, first(psum), bad[0])

    return EpochRunner(run, model, test, int(n_data), int(batch_size), spe, float(temperature_factor))


class LangevinRun(NamedTuple):
    """The outcome of an epoch-wise Langevin-MH run (MINT, CMINT or SGLD)."""

    final: ChainState
    """State after the last epoch."""
    snapshots: tuple
    """Positions saved after the requested epochs (CMINT: the ensemble), in epoch order."""
    snapshot_epochs: tuple[int, ...]
    """Epoch counts at which the snapshots were taken."""
    step_sizes: np.ndarray
    """Step size of each epoch."""
    acceptance: np.ndarray
    """Acceptance rate of each epoch."""
    steps_per_epoch: int


def run_langevin_epochs(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    *,
    step_sizes: Sequence[float] | np.ndarray,
    batch_size: int,
    test: AcceptanceTest,
    key: jax.Array | int = 0,
    steps_per_epoch: int | None = None,
    temperature_factor: float | None = None,
    snapshot_epochs: Sequence[int] = (),
    callback: Callable[[int, ChainState, EpochStats], None] | None = None,
    runner: EpochRunner | None = None,
) -> LangevinRun:
    """Langevin proposals plus ``test`` for ``len(step_sizes)`` epochs, one step size per epoch.

    An epoch is ``steps_per_epoch`` steps (default ``N // batch_size``). ``temperature_factor`` is
    the ``T`` the proposal's drift tempers the likelihood by; by default the test's own
    (``MINT.temperature_factor(N)``), else 1. ``callback(epoch, state, stats)`` runs after each
    epoch (``epoch`` counts finished epochs from 1); positions after the epochs in ``snapshot_epochs``
    are kept. ``runner`` reuses the compiled epoch of an earlier run with the same settings.
    """
    source = as_data_source(data)
    n = source.n
    arrays = source.arrays()
    b = check_int(batch_size, "batch_size", 1)
    if b > n:
        raise ValueError(f"batch_size={b} exceeds the number of data points N={n}")
    spe = max(1, n // b) if steps_per_epoch is None else check_int(steps_per_epoch, "steps_per_epoch", 1)
    alphas = np.asarray(step_sizes, dtype=np.float64)
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError(f"step_sizes must be a non-empty 1-D sequence (one per epoch); got shape {alphas.shape}")
    if not np.all(np.isfinite(alphas)) or np.any(alphas <= 0):
        raise ValueError(f"step sizes must be positive and finite; got values in [{alphas.min()}, {alphas.max()}]")
    wanted = tuple(int(e) for e in snapshot_epochs)
    bad = [e for e in wanted if not 1 <= e <= alphas.size]
    if bad:
        raise ValueError(f"snapshot epochs {bad} lie outside [1, {alphas.size}] (epochs are counted from 1)")
    if temperature_factor is None:
        temperature_factor = float(test.temperature_factor(n))
    t = check_positive(temperature_factor, "temperature_factor")
    base_key = as_key(key)

    wanted_runner = (model, test, n, b, spe, t)
    if runner is None:
        runner = make_epoch_runner(*wanted_runner)
    elif tuple(runner[1:]) != wanted_runner:
        fields = EpochRunner._fields[1:]
        diff = [f for f, a, w in zip(fields, runner[1:], wanted_runner) if a != w]
        raise ValueError(
            f"runner was built for a different {', '.join(diff)}; build one with make_epoch_runner for this run"
        )
    run = runner.run
    state = ChainState(initial_position, jnp.asarray(model.log_prior(initial_position)))
    if not np.isfinite(float(state.log_prior)):
        raise ValueError(
            f"the initial position has log prior {float(state.log_prior)}; start inside the prior's support"
        )
    snaps, acc = [], np.empty(alphas.size)
    for epoch in range(alphas.size):
        state, stats = run(base_key, np.int32(epoch), state, arrays, np.float32(alphas[epoch]))
        acc[epoch], bad_epoch = jax.device_get((stats.acceptance_rate, stats.nonfinite))
        if bad_epoch:
            raise FloatingPointError(
                f"non-finite log-likelihood ratio during epoch {epoch + 1}; check the data and the step size"
            )
        if epoch + 1 in wanted:
            snaps.append(jax.device_get(state.position))
        if callback is not None:
            callback(epoch + 1, state, stats)
    return LangevinRun(state, tuple(snaps), tuple(sorted(set(wanted))), alphas, acc, spe)


CMINT_ALPHA = 0.99
"""CMINT's default ``lambda / tau`` (the paper's ``lambda = 0.99 tau``)."""


def cmint_test(batch_size: int, n_data: int, test: AcceptanceTest | None = None) -> AcceptanceTest:
    """CMINT's test on its one minibatch size ``m = batch_size``: MINT at ``alpha = 0.99`` by default.

    A given MINT test must draw the same ``m`` points as the Langevin gradient's minibatch (one setting,
    not two that can drift apart); other tests are taken as given.
    """
    m = check_int(batch_size, "batch_size", 1)
    if test is None:
        return mint(batch_size=m, alpha=CMINT_ALPHA)
    if isinstance(test, MINT):
        m_test = test.settings(n_data).batch_size
        if m_test != m:
            raise ValueError(
                f"the MINT test draws m={m_test} points but batch_size={m}: CMINT's gradient minibatch and its "
                f"test share one size; pass batch_size={m_test} or test=mint(batch_size={m}, ...)"
            )
    return test


def cmint(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    schedule: CMINTSchedule,
    *,
    batch_size: int,
    test: AcceptanceTest | None = None,
    key: jax.Array | int = 0,
    steps_per_epoch: int | None = None,
    callback: Callable[[int, ChainState, EpochStats], None] | None = None,
    runner: EpochRunner | None = None,
) -> LangevinRun:
    """CMINT: MINT with Langevin proposals under ``schedule``; ``snapshots`` is the ensemble of ``K`` models.

    ``batch_size`` is CMINT's one minibatch size ``m``: the Langevin gradient's minibatch and the MINT
    test's (see ``cmint_test``: by default ``mint(batch_size=batch_size, alpha=0.99)``, the paper's
    ``lambda = 0.99 tau``; a given MINT test must use the same ``m``).
    """
    if not isinstance(schedule, CMINTSchedule):
        raise ValueError(f"schedule must be a CMINTSchedule (see cmint_schedule); got {type(schedule).__name__}")
    schedule.validate()
    source = as_data_source(data)
    return run_langevin_epochs(
        model,
        source,
        initial_position,
        step_sizes=schedule.epoch_step_sizes(),
        batch_size=batch_size,
        test=cmint_test(batch_size, source.n, test),
        key=key,
        steps_per_epoch=steps_per_epoch,
        snapshot_epochs=schedule.snapshot_epochs(),
        callback=callback,
        runner=runner,
    )


def ensemble_predict_proba(
    predict_proba: Callable[[PyTree, Any], jax.Array], snapshots: Sequence[PyTree], x: Any
) -> jax.Array:
    """The ensemble's prediction: the average of the snapshots' predictive probabilities at ``x``."""
    if len(snapshots) == 0:
        raise ValueError("the ensemble is empty: need at least one snapshot")
    total = predict_proba(snapshots[0], x)
    for s in snapshots[1:]:
        total = total + predict_proba(s, x)
    return total / len(snapshots)
