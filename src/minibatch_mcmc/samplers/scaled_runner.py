"""The library's one sampling loop (``scan_steps``) and the jitted block runner of a family ``scale -> Kernel``.

``scan_steps`` runs any vmapped step under ``lax.scan`` with the keys of ``keys.step_keys`` and an optional
``StepHook`` carried beside the chains (per-step tuning, epoch sums); ``driver.sample``, tuning, the warm-up's
efficiency runs, CMINT's epochs and MINTEE's sweeps all run on it. Tuning (``tuning.tune_chains``) runs the block
runner window by window at a new scale each time, and ``driver.sample`` runs it at the tuned scale (``at_scale``), so
the kernel compiles once for both. Steps run in chunks of ``chunk`` steps (the tuning window): a sampling block whose
length is a multiple of it reuses the same compiled scan.
"""

from __future__ import annotations

import functools
from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.host import is_host_data
from minibatch_mcmc.samplers.kernel import ChainState, Kernel
from minibatch_mcmc.samplers.keys import step_keys
from minibatch_mcmc.samplers.planned_runner import PlannedRunner, make_planned_runner, run_planned
from minibatch_mcmc.samplers.results import RECORD_FIELDS
from minibatch_mcmc.samplers.sharding import ChainLayout

PyTree = Any
Block = tuple[ChainState, PyTree, dict]
"""What a block returns: the final chain states, positions ``(step, chain, ...)`` and records ``(step, chain)``."""


class ScaledRunner(NamedTuple):
    """``run_block(base_key, states, data, steps, temps, scale)``, jitted once for the whole family of kernels."""

    kernel_for_scale: Callable[[jax.Array], Kernel]
    run_block: Callable[..., Block]
    num_chains: int
    chunk: int
    """Steps per call of the compiled scan when bound with ``at_scale``."""
    compilations: Callable[[], int]
    """How many times ``run_block`` has been traced (each trace is one compilation)."""
    planned: Callable[[], PlannedRunner | None] = lambda: None
    """The runner of an out-of-core source with no host callback (``planned_runner``), built at its first call; None
    where the kernel reads no rows it can name first, or the chains are split over devices. ``run_on`` chooses."""


class BoundRunner(NamedTuple):
    """A ``ScaledRunner`` at one scale: its kernel and ``run_block(base_key, states, data, steps, temps)``."""

    kernel: Kernel
    run_block: Callable[..., Block]
    num_chains: int
    compilations: Callable[[], int]
    """The ``ScaledRunner``'s compilations so far (tuning's and sampling's together)."""


class StepHook(NamedTuple):
    """A small function carried through the block runner's scan beside the chains: per-step tuning or epoch sums."""

    update: Callable[[PyTree, jax.Array, Any, dict], PyTree]
    """``update(carry, t, states, records) -> carry`` after step ``t``, from the new states and the step's records."""
    scale: Callable[[PyTree, jax.Array], jax.Array] | None = None
    """``scale(carry, scale) -> scale`` a step runs at, from the carry before it (per-step tuning); None: the block's."""


def step_draws(states: Any, rec: dict) -> tuple[PyTree, dict]:
    """What a step of a block hands back by default: the chains' positions and the step's records."""
    return states.position, rec


StepFn = Callable[[jax.Array, jax.Array, Any, PyTree, jax.Array, PyTree], tuple[Any, dict]]
"""``step_all(t, keys, states, data, temp, carry) -> (states, records)``: one step of all chains."""


def scan_steps(
    step_all: StepFn,
    base_key: jax.Array,
    num_chains: int,
    states: Any,
    data: PyTree,
    steps: jax.Array,
    temps: jax.Array,
    carry: PyTree = (),
    hook: StepHook | None = None,
    emit: Callable[[Any, dict], PyTree] | None = step_draws,
    step_data: PyTree | None = None,
) -> tuple[Any, PyTree, PyTree]:
    """The library's one sampling loop: ``step_all`` at each of ``steps`` under ``lax.scan``.

    Step ``t`` gets ``keys.step_keys(base_key, t, num_chains)``, one key per chain; ``hook`` folds each step into
    ``carry``. Returns the final states, ``emit(states, records)`` of every step stacked (None if ``emit`` is None)
    and the carry. ``step_data`` (leading axis ``len(steps)``), where given, is step ``t``'s data in place of ``data``.
    """

    def one_step(c: tuple[Any, PyTree, PyTree], x: tuple):
        states, data, extra = c
        t, temp, own = x
        new_states, rec = step_all(
            t, step_keys(base_key, t, num_chains), states, data if step_data is None else own, temp, extra
        )
        if hook is not None:
            extra = hook.update(extra, t, new_states, rec)
        return (new_states, data, extra), (None if emit is None else emit(new_states, rec))

    xs = (steps, temps, step_data)
    (states, _, carry), out = jax.lax.scan(one_step, (states, data, carry), xs)
    return states, out, carry


def kernel_steps(
    kernel_for_scale: Callable[[jax.Array], Kernel],
    scale: jax.Array,
    hook: StepHook | None,
    keep_on_chains: Callable[[PyTree], PyTree],
    data_axis: int | None = None,
) -> StepFn:
    """``step_all`` of the kernel at ``scale`` (or the hook's) vmapped over the chains, with its ``RECORD_FIELDS``
    (``data_axis=0``: the data split over the chains, each chain's planned rows)."""
    fixed = kernel_for_scale(scale) if hook is None or hook.scale is None else None

    def step_all(t, keys, states, data, temp, carry):
        kernel = fixed if fixed is not None else kernel_for_scale(hook.scale(carry, scale))
        new_states, outcome = jax.vmap(kernel.step, in_axes=(0, 0, data_axis, None))(
            keep_on_chains(keys), states, data, temp
        )
        rec = {k: getattr(outcome, k) for k in RECORD_FIELDS}
        rec["nonfinite"] = outcome.nonfinite
        return keep_on_chains(new_states), rec

    return step_all


def make_scaled_runner(
    kernel_for_scale: Callable[[jax.Array], Kernel],
    num_chains: int,
    layout: ChainLayout | None = None,
    chunk: int = 50,
    compiler_options: dict[str, Any] | None = None,
) -> ScaledRunner:
    """The jitted block runner of ``kernel_for_scale(scale)`` for ``num_chains`` vmapped chains, ``scale`` traced.

    With a ``layout`` the chain axis of the states stays split over the devices of its mesh; the keys are split
    over all ``num_chains`` before that, so they do not depend on the layout. ``compiler_options`` go to XLA
    (``compiling.compile_options``).
    """
    traces = [0]

    def keep_on_chains(tree: PyTree) -> PyTree:
        return tree if layout is None else jax.lax.with_sharding_constraint(tree, layout.chains)

    @partial(jax.jit, compiler_options=compiler_options)
    def run_block(base_key, states, data, steps, temps, scale):
        traces[0] += 1  # once per trace, i.e. per compilation
        step_all = kernel_steps(kernel_for_scale, scale, None, keep_on_chains)
        states, (positions, recs), _ = scan_steps(step_all, base_key, num_chains, states, data, steps, temps)
        return states, positions, recs

    def planned_block(base_key, states, rows, steps, temps, scale):
        step_all = kernel_steps(kernel_for_scale, scale, None, keep_on_chains, data_axis=0)
        states, (positions, recs), _ = scan_steps(
            step_all, base_key, num_chains, states, (), steps, temps, step_data=rows
        )
        return states, positions, recs

    planned = functools.cache(
        lambda: (
            None
            if layout is not None
            else make_planned_runner(kernel_for_scale, num_chains, planned_block, compiler_options)
        )
    )
    return ScaledRunner(kernel_for_scale, run_block, num_chains, chunk, lambda: traces[0], planned)


def run_on(runner: ScaledRunner, base_key, states, data, steps, temps, scale) -> list[Block]:
    """``runner.run_block`` on ``steps`` (numpy) in calls of at most ``runner.chunk`` steps, an out-of-core ``data`` on
    the planned runner where there is one (no host callback compiled: ``planned_runner``): each call's block."""
    planned = runner.planned() if is_host_data(data) else None
    if planned is not None:
        return run_planned(planned, runner.run_block, runner.chunk, base_key, states, data, steps, temps, scale)
    pieces = []
    for at in range(0, len(steps), runner.chunk):
        states, pos, recs = runner.run_block(
            base_key, states, data, steps[at : at + runner.chunk], temps[at : at + runner.chunk], scale
        )
        pieces.append((states, pos, recs))
    return pieces


def make_hooked_runner(
    kernel_for_scale: Callable[[jax.Array], Kernel],
    num_chains: int,
    hook: StepHook,
    keep_draws: bool = True,
    compiler_options: dict[str, Any] | None = None,
):
    """The block runner with ``hook`` carried through it, jitted: ``(base_key, states, data, steps, temps, scale, carry)
    -> (states, positions, records, carry)`` (positions and records None unless ``keep_draws``)."""

    @partial(jax.jit, compiler_options=compiler_options)
    def run_block(base_key, states, data, steps, temps, scale, carry):
        step_all = kernel_steps(kernel_for_scale, scale, hook, lambda tree: tree)
        emit = step_draws if keep_draws else None
        states, out, carry = scan_steps(step_all, base_key, num_chains, states, data, steps, temps, carry, hook, emit)
        positions, recs = out if keep_draws else (None, None)
        return states, positions, recs, carry

    return run_block


def scale_array(scale: Any, like: PyTree) -> jax.Array:
    """``scale`` as a scalar array of the positions' floating dtype (what the runner is traced with)."""
    leaves = [x for x in jax.tree_util.tree_leaves(like) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return jnp.asarray(scale, jnp.asarray(leaves[0]).dtype if leaves else jnp.float32)


def at_scale(runner: ScaledRunner, scale: float, like: PyTree) -> BoundRunner:
    """``runner`` at a fixed ``scale``: steps run in chunks of ``runner.chunk`` (one compilation for any multiple of it)."""
    s = scale_array(scale, like)

    def run_block(base_key, states, data, steps, temps) -> Block:
        steps, temps = np.asarray(steps), np.asarray(temps)  # sliced on the host: no compiled slices
        blocks = run_on(runner, base_key, states, data, steps, temps, s)
        states, pieces = blocks[-1][0], [(pos, recs) for _, pos, recs in blocks]
        if len(pieces) == 1:
            return states, pieces[0][0], pieces[0][1]
        pieces = jax.device_get(pieces)
        pos = jax.tree_util.tree_map(lambda *a: np.concatenate(a, axis=0), *[p for p, _ in pieces])
        return states, pos, {k: np.concatenate([r[k] for _, r in pieces], axis=0) for k in pieces[0][1]}

    return BoundRunner(runner.kernel_for_scale(s), run_block, runner.num_chains, runner.compilations)
