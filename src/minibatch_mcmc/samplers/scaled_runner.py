"""One jitted block runner for a family of kernels ``scale -> Kernel``: the proposal scale is a traced argument.

Tuning (``tuning.tune_chains``) runs it window by window at a new scale each time, and ``driver.sample`` runs it at
the tuned scale (``at_scale``), so the kernel compiles once for both. Steps run in chunks of ``chunk`` steps (the
tuning window): a sampling block whose length is a multiple of it reuses the same compiled scan.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.samplers.kernel import ChainState, Kernel
from minibatch_mcmc.samplers.keys import step_keys
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


class BoundRunner(NamedTuple):
    """A ``ScaledRunner`` at one scale: its kernel and ``run_block(base_key, states, data, steps, temps)``."""

    kernel: Kernel
    run_block: Callable[..., Block]
    num_chains: int
    compilations: Callable[[], int]
    """The ``ScaledRunner``'s compilations so far (tuning's and sampling's together)."""


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
        kernel = kernel_for_scale(scale)

        def one_step(carry: tuple[ChainState, PyTree], x: tuple[jax.Array, jax.Array]):
            states, data = carry
            t, temp = x
            keys = keep_on_chains(step_keys(base_key, t, num_chains))
            new_states, outcome = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(keys, states, data, temp)
            new_states = keep_on_chains(new_states)
            rec = {k: getattr(outcome, k) for k in RECORD_FIELDS}
            rec["nonfinite"] = outcome.nonfinite
            return (new_states, data), (new_states.position, rec)

        (states, _), (positions, recs) = jax.lax.scan(one_step, (states, data), (steps, temps))
        return states, positions, recs

    return ScaledRunner(kernel_for_scale, run_block, num_chains, chunk, lambda: traces[0])


def scale_array(scale: Any, like: PyTree) -> jax.Array:
    """``scale`` as a scalar array of the positions' floating dtype (what the runner is traced with)."""
    leaves = [x for x in jax.tree_util.tree_leaves(like) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return jnp.asarray(scale, jnp.asarray(leaves[0]).dtype if leaves else jnp.float32)


def at_scale(runner: ScaledRunner, scale: float, like: PyTree) -> BoundRunner:
    """``runner`` at a fixed ``scale``: steps run in chunks of ``runner.chunk`` (one compilation for any multiple of it)."""
    s = scale_array(scale, like)

    def run_block(base_key, states, data, steps, temps) -> Block:
        steps, temps, pieces = np.asarray(steps), np.asarray(temps), []  # sliced on the host: no compiled slices
        for at in range(0, len(steps), runner.chunk):
            states, pos, recs = runner.run_block(base_key, states, data, steps[at : at + runner.chunk], temps[at : at + runner.chunk], s)
            pieces.append((pos, recs))
        if len(pieces) == 1:
            return states, pieces[0][0], pieces[0][1]
        pieces = jax.device_get(pieces)
        pos = jax.tree_util.tree_map(lambda *a: np.concatenate(a, axis=0), *[p for p, _ in pieces])
        return states, pos, {k: np.concatenate([r[k] for _, r in pieces], axis=0) for k in pieces[0][1]}

    return BoundRunner(runner.kernel_for_scale(s), run_block, runner.num_chains, runner.compilations)
