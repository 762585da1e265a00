"""The block runner of an out-of-core run with no host callback in its program, so JAX's persistent cache keeps it.

A block run on an out-of-core ``HostData`` reads its rows through ``jax.pure_callback`` from inside the compiled scan,
and JAX never writes a program with a host callback to its persistent compilation cache: every new process compiled
it again (about 4 CPU seconds of a fit from disk). Here the host reads, before each chunk of steps, the rows every
step's test reads first (``Kernel.first_rows``: a function of the step's key alone; for the bound-based exact tests,
Scalable MH, MH-SS and TunaMH, the first ``thinning.ROWS_AHEAD`` rows of their thinned pass, which their contract's
``rows_ahead`` names from the key and the estimator's state-free ``row_draw``) and the compiled chunk takes them as
an input (``data.planned.PlannedRows``); the next chunk's rows are read while the device runs this one. A step
that read more than its planned rows (a minibatch grown past its first chunk or a thinned pass past its planned rows:
its record's ``batch_size`` exceeds them; ``hidden_data`` counts rows outside its minibatch; a bound-based step fell
back to the full data, ``fallback``) saw wrong rows past them, so that chunk is run again from its start by the
callback runner: the draws are the callback runner's in every
case (to rounding: the two programs fuse the same arithmetic differently). After ``MAX_MISSES`` such chunks in one call
the rest of the call runs on the callback runner. Memory: one chunk's rows, twice (``chunk x chains x m`` rows).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.host import HostData
from minibatch_mcmc.data.planned import read_planned
from minibatch_mcmc.samplers.keys import step_keys

PyTree = Any
MAX_MISSES = 2
"""Chunks of one call that may miss their planned rows before the call's other chunks go to the callback runner."""


class PlannedRunner(NamedTuple):
    """The two compiled functions of an out-of-core run: the rows each step reads first, and a chunk on those rows."""

    plan: Callable[[jax.Array, np.ndarray], jax.Array]
    """``plan(base_key, steps) -> (steps, chains, m)`` row ids each step's test reads first."""
    run: Callable[..., tuple]
    """``run(base_key, states, rows, steps, temps, scale) -> (states, positions, records)``, ``rows`` a ``PlannedRows``
    with leading axes ``(steps, chains)``."""


def make_planned_runner(
    kernel_for_scale: Callable[[jax.Array], Any],
    num_chains: int,
    block: Callable[..., tuple],
    compiler_options: dict[str, Any] | None = None,
) -> PlannedRunner | None:
    """The ``PlannedRunner`` of ``kernel_for_scale`` with ``block`` (``PlannedRunner.run``'s signature, on
    ``scaled_runner.scan_steps``) jitted, or None when its kernel reads no rows it can name first."""

    def first_rows(key: jax.Array) -> jax.Array:
        return kernel_for_scale(jnp.ones((), jnp.float32)).first_rows(key)

    named: list[bool] = []  # traced, not run: building a kernel may compute with its scale
    jax.eval_shape(lambda: named.append(kernel_for_scale(jnp.ones((), jnp.float32)).first_rows is not None))
    if not named[0] or jax.eval_shape(lambda: first_rows(jax.random.key(0))).shape[-1] == 0:
        return None

    @jax.jit
    def plan(base_key: jax.Array, steps: jax.Array) -> jax.Array:
        return jax.vmap(lambda t: jax.vmap(first_rows)(step_keys(base_key, t, num_chains)))(steps)

    return PlannedRunner(plan, jax.jit(block, compiler_options=compiler_options))


def read_only_planned(records: dict, width: int) -> bool:
    """Whether every step of a chunk read only its ``width`` planned rows: a test's ``batch_size`` counts the distinct
    rows it touched (its first ``width`` among them; a bound-based test's, the rows of its thinned pass, in order),
    ``hidden_data`` those it read outside its minibatch, and a bound-based step that fell back to the full data
    (``fallback``) read rows in order, not its planned ones."""
    within = np.all(np.asarray(records["batch_size"]) <= width)
    return bool(within and not np.any(np.asarray(records["hidden_data"])) and not np.any(records["fallback"]))


def run_planned(
    planned: PlannedRunner,
    fallback: Callable[..., tuple],
    chunk: int,
    base_key: jax.Array,
    states: Any,
    data: HostData,
    steps: np.ndarray,
    temps: np.ndarray,
    scale: jax.Array,
) -> list[tuple[Any, PyTree, dict]]:
    """Steps ``steps`` in chunks of ``chunk`` on their planned rows read from ``data``, a chunk that missed rerun by
    ``fallback(base_key, states, data, steps, temps, scale)``: the ``(states, positions, records)`` of every chunk."""

    def read(at: int) -> Any:
        return read_planned(data.rows, np.asarray(planned.plan(base_key, steps[at : at + chunk])))

    pieces, misses, rows = [], 0, None
    for at in range(0, len(steps), chunk):
        piece = (steps[at : at + chunk], temps[at : at + chunk])
        if misses >= MAX_MISSES:
            out = fallback(base_key, states, data, *piece, scale)
        else:
            rows = read(at) if rows is None else rows
            out = planned.run(base_key, states, rows, *piece, scale)  # dispatched: runs while the host reads
            width = rows.ids.shape[-1]
            rows = read(at + chunk) if at + chunk < len(steps) else None
            if not read_only_planned(out[2], width):
                misses += 1
                out = fallback(base_key, states, data, *piece, scale)
        states = out[0]
        pieces.append(out)
    return pieces
