"""The driver: run many chains of a kernel under ``lax.scan`` with ``vmap`` over chains."""

from __future__ import annotations

import functools
import os
import time
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.registry import contract
from minibatch_mcmc.compiling import use_compilation_cache
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.data.arrays import DataSource, as_data_source, is_host_data
from minibatch_mcmc.data.host import DataChangedError, host_read_errors
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers import buffers, checkpoint
from minibatch_mcmc.samplers.buffers import DrawBuffers
from minibatch_mcmc.samplers.diagnose import nonfinite_error
from minibatch_mcmc.samplers.kernel import ChainState, Kernel, build_kernel
from minibatch_mcmc.samplers.keys import as_run_key
from minibatch_mcmc.samplers.progress import SamplingBar
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult, constrain_draws
from minibatch_mcmc.samplers.run_checks import warn_run
from minibatch_mcmc.samplers.run_options import RunOptions, merged_run
from minibatch_mcmc.samplers.run_start import check_args, check_initial, initial_positions, temperature_schedule
from minibatch_mcmc.samplers.scaled_runner import BoundRunner, at_scale, make_scaled_runner
from minibatch_mcmc.samplers.sharding import ChainLayout, chain_layout, place, place_data, shard_chains, to_host

PyTree = Any


class Finished(NamedTuple):
    """What a run holds after ``done`` steps: the chain states and the finished steps' draws and records."""

    states: ChainState
    draws: DrawBuffers | None
    """Host buffers for the whole run's positions and records, steps ``[0, done)`` written (``None`` before any)."""
    done: int
    wall_time: float
    """Seconds the finished blocks took (in an earlier, checkpointed run too)."""


def make_block_runner(
    kernel: Kernel, num_chains: int, layout: ChainLayout | None = None, compiler_options: dict[str, Any] | None = None
):
    """A jitted function ``(base_key, states, data, steps, temps)`` running one block of steps for all chains under ``lax.scan``.

    With a ``layout`` the chain axis of the states stays split over the devices of its mesh; the
    keys are split over all ``num_chains`` before that, so they do not depend on the layout.
    ``compiler_options`` go to XLA (``compiling.compile_options``).
    """
    runner = make_scaled_runner(lambda scale: kernel, num_chains, layout, compiler_options=compiler_options)

    def run(base_key, states, data, steps, temps):
        if is_host_data(data) and runner.planned() is not None:  # no host callback compiled: JAX's cache keeps it
            return at_scale(runner, 1.0, states.position).run_block(base_key, states, data, steps, temps)
        return runner.run_block(base_key, states, data, steps, temps, 1.0)

    return run


def _restore(
    chunks: list[checkpoint.Chunk], states: ChainState, temps: np.ndarray, num_samples: int, where: str
) -> Finished:
    """States, finished blocks and step counter from the chunks of a checkpoint."""
    done = chunks[-1].end
    if done > num_samples:
        raise ValueError(f"checkpoint {where} already holds {done} steps, more than num_samples={num_samples}")
    saved_temps = np.concatenate([c.temperature for c in chunks])
    if not np.array_equal(saved_temps.astype(np.float32), temps[:done].astype(np.float32)):
        t = int(np.flatnonzero(saved_temps.astype(np.float32) != temps[:done].astype(np.float32))[0])
        raise ValueError(
            f"cannot resume {where}: the temperature at step {t} was {saved_temps[t]} in the checkpoint but is {temps[t]} now"
        )
    leaves, treedef = jax.tree_util.tree_flatten(states)
    saved = chunks[-1].state
    if len(saved) != len(leaves) or any(np.shape(a) != np.shape(b) for a, b in zip(saved, leaves)):
        raise ValueError(f"cannot resume {where}: its chain states do not match this kernel's state layout")
    restored = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(a, b.dtype) for a, b in zip(saved, leaves)])
    missing = sorted(set(RECORD_FIELDS) - set(chunks[0].records))
    if missing:
        raise ValueError(
            f"cannot resume {where}: it was written without the records {missing} (an older version); start a new run"
        )
    draws = None
    for c in chunks:
        draws = buffers.store(draws, num_samples, c.start, c.positions, {k: c.records[k] for k in RECORD_FIELDS})
    return Finished(restored, draws, done, sum(c.wall_time for c in chunks))


def _restore_or_start(
    checkpoint_dir: str | os.PathLike, settings: dict, resume: bool, states: ChainState, temps: np.ndarray
) -> Finished:
    """Open the checkpoint directory; continue from its finished blocks, or else start from ``states``."""
    chunks = checkpoint.open_checkpoint(checkpoint_dir, settings, resume)
    if chunks:
        return _restore(chunks, states, temps, len(temps), str(checkpoint_dir))
    return Finished(states, None, 0, 0.0)


def _place(finished: Finished, arrays: PyTree, base_key: jax.Array, layout: ChainLayout, data_sharding: Any):
    """States split over the mesh's chain axis, the data placed (replicated unless ``data_sharding``), the key replicated."""
    finished = finished._replace(states=shard_chains(finished.states, layout))
    if not is_host_data(arrays):  # out-of-core sources stay on the host
        arrays = place_data(arrays, layout, data_sharding)
    return finished, arrays, place(base_key, layout.replicated)


def _write_block(checkpoint_dir, start: int, draws: DrawBuffers, temps: np.ndarray, states: ChainState, wall: float):
    """Write one finished block of ``len(temps)`` steps from ``start`` to the checkpoint directory."""
    positions, records = buffers.block(draws, start, start + len(temps))
    chunk = checkpoint.Chunk(
        start=start,
        end=start + len(temps),
        positions=positions,
        records=records,
        temperature=temps,
        state=jax.tree_util.tree_leaves(to_host(states)),
        wall_time=wall,
    )
    checkpoint.write_chunk(checkpoint_dir, chunk)


def _run_pieces(
    run_block,
    states: ChainState,
    draws: DrawBuffers | None,
    num_samples: int,
    block_temps: np.ndarray,
    done: int,
    bar: SamplingBar,
    diagnose,
) -> tuple[DrawBuffers, ChainState]:
    """One block run in the pieces the bar asks for, each copied into the host buffers: the buffers and the final states."""
    at, length = 0, bar.piece(len(block_temps), done)
    while at < len(block_temps):
        start = time.perf_counter()
        piece_temps = block_temps[at : at + length]
        steps = np.arange(done + at, done + at + len(piece_temps), dtype=np.int32)  # numpy: no eager op to compile
        new_states, pos, recs = run_block(states, steps, np.asarray(piece_temps, np.float32))
        recs = to_host(recs)
        nonfinite = np.asarray(recs.pop("nonfinite"))
        if nonfinite.any():
            raise diagnose(to_host(states.position), to_host(pos), nonfinite, done + at)
        states = new_states
        draws = buffers.store(draws, num_samples, done + at, to_host(pos), recs)  # copied: no device buffer kept alive
        bar.advance(recs, len(piece_temps), time.perf_counter() - start)
        at += len(piece_temps)
    return draws, states


def equal_block(steps: int, block_size: int) -> int:
    """The block length for ``steps``: ``block_size``, or the length of equal blocks, as many as ``block_size`` gives,
    where they divide ``steps`` (400 steps in blocks of 250 run as 2 x 200: one compiled block length, not two)."""
    blocks = -(-steps // block_size)
    return steps // blocks if steps % block_size and steps % blocks == 0 else block_size


def _run_blocks(
    run_block: Callable[[ChainState, jax.Array, jax.Array], tuple[ChainState, PyTree, dict]],
    temps: np.ndarray,
    block_size: int,
    finished: Finished,
    checkpoint_dir: str | os.PathLike | None,
    bar: SamplingBar,
    diagnose: Callable[[PyTree, PyTree, np.ndarray, int], FloatingPointError],
) -> tuple[Finished, bool]:
    """Run blocks until all ``len(temps)`` steps are done or Ctrl-C; the finished blocks and whether it was interrupted."""
    states, draws, done = finished.states, finished.draws, finished.done
    interrupted = False
    length = equal_block(len(temps) - done, block_size)
    try:
        while done < len(temps):
            block_start = time.perf_counter()
            block_temps = temps[done : done + min(length, len(temps) - done)]
            draws, states = _run_pieces(run_block, states, draws, len(temps), block_temps, done, bar, diagnose)
            if checkpoint_dir is not None:
                _write_block(checkpoint_dir, done, draws, block_temps, states, time.perf_counter() - block_start)
            done += len(block_temps)
    except KeyboardInterrupt:
        interrupted = True
        warnings.warn(f"sampling interrupted; returning the {done} finished draws")
    except DataChangedError as err:
        err.finished = Finished(states, draws, done, finished.wall_time)
        raise
    return Finished(states, draws, done, finished.wall_time), interrupted


def _stack_result(
    finished: Finished,
    model: Model,
    test: AcceptanceTest,
    n: int,
    temps: np.ndarray,
    wall: float,
    interrupted: bool,
    exact_rows: int = 0,
) -> SampleResult:
    """The finished blocks joined into ``(chain, draw, ...)`` arrays (reported through ``model.constrain`` if it has one)."""
    if finished.draws is None or not finished.done:
        raise KeyboardInterrupt("sampling interrupted before the first block finished; nothing to return")
    all_pos, all_rec = buffers.finished(
        finished.draws, finished.done, jax.tree_util.tree_structure(finished.states.position)
    )
    draws = all_rec["accepted"].shape[1]
    exceeded = int(np.sum(all_rec["bound_exceeded"]))
    if exceeded:
        warnings.warn(
            f"{exceeded} of {all_rec['bound_exceeded'].size} steps evaluated a per-datum term above the estimator's bound: "
            f"{test.name} is not exact with these bounds (records['bound_exceeded'] marks the steps)"
        )
    warn_run(all_rec, test, n)  # chains that accepted nothing, mostly-fallback or over-cost tests
    return SampleResult(
        positions=all_pos if model.constrain is None else constrain_draws(model.constrain, all_pos),
        records=all_rec,
        method=test.name,
        n_data=n,
        temperature=temps[:draws] * float(test.temperature_factor(n)),  # a test that tempers by itself (MINT)
        wall_time=wall,
        interrupted=interrupted,
        unconstrained=None if model.constrain is None else all_pos,
        filled=contract(test).records,
        exact_rows=exact_rows,
    )


def sample(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    *,
    proposal: Proposal,
    test: AcceptanceTest,
    num_samples: int,
    estimator: Estimator | None = None,
    key: jax.Array | int = 0,
    num_chains: int = 1,
    temperature: float | Sequence[float] | np.ndarray = 1.0,
    batched_init: bool = False,
    run: RunOptions | None = None,
    **run_options: Any,
) -> SampleResult:
    """Draw ``num_samples`` MH steps per chain for ``num_chains`` vmapped chains.

    Steps run in jitted blocks of ``block_size`` (or of equal shorter blocks where they divide the run:
    ``equal_block``); finished blocks are kept if the run is interrupted (Ctrl-C), and a non-finite log-likelihood stops
    the run with the step and chain named. The progress bar's rate leaves out the first piece (compilation), whose time
    it shows as ``startup``. The draws do not depend on the device layout, and a resumed run draws exactly what an
    uninterrupted run with the same seed draws.

    Args:
        model: The ``Model`` (``log_prior`` plus per-datum ``log_lik``).
        data: The rows: a pytree of arrays with a leading axis ``N``, or a ``DataSource`` (memory-mapped, Parquet).
        initial_position: The start (a pytree), the same for every chain unless ``batched_init``.
        proposal: The ``Proposal`` (``random_walk``, ``langevin``, ``proxy_hmc``, ...).
        test: The acceptance test (``penalty_test``, ``mh_minibatch``, ``MetropolisTest()``, ...).
        num_samples: Steps (draws) per chain.
        estimator: How the kernel estimates the log-likelihood difference: the plain per-datum ratio if None, or a
            control variate (``taylor_proxy``) for temperature 1 on tall data.
        key: A seed, a key, or one key per chain (shape ``(num_chains,)``): ``jax.random.split(k, C)`` draws what
            ``numpyro.infer.MCMC(MinibatchMH(...), num_chains=C).run(k)`` draws (``samplers.keys``).
        num_chains: Chains, vmapped.
        temperature: A constant ``K`` (each log-likelihood divided by it), or one value per step (e.g. 100 then 1).
        batched_init: ``initial_position`` has a leading axis of ``num_chains``: one start per chain.
        run: How the chains run, one ``RunOptions`` (``block_size``, ``progress``, ``devices``, ``data_sharding``,
            ``checkpoint_dir``, ``resume``; its defaults if None).
        **run_options: Any field of ``RunOptions`` by name (e.g. ``progress=False``, ``checkpoint_dir=...``),
            replacing that field of ``run``.

    Returns:
        The ``SampleResult``: draws with leading axes ``(chain, draw)``, the per-step records and the run's metadata.
    """
    return sample_compiled(
        model,
        data,
        initial_position,
        proposal=proposal,
        test=test,
        num_samples=num_samples,
        estimator=estimator,
        key=key,
        num_chains=num_chains,
        temperature=temperature,
        batched_init=batched_init,
        run=merged_run(run, **run_options),
    )


def sample_compiled(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    *,
    proposal: Proposal,
    test: AcceptanceTest,
    num_samples: int,
    estimator: Estimator | None = None,
    key: jax.Array | int = 0,
    num_chains: int = 1,
    temperature: float | Sequence[float] | np.ndarray = 1.0,
    batched_init: bool = False,
    run: RunOptions = RunOptions(),
    runner: BoundRunner | None = None,
    compiler_options: dict[str, Any] | None = None,
) -> SampleResult:
    """``sample`` with what ``auto_sample`` decides about compilation (not public): an already compiled ``runner`` of this
    kernel (``scaled_runner.at_scale``, ``Warmup.runner``; not with devices) run instead of compiling the kernel again,
    or XLA's ``compiler_options`` for the block runner (``compiling.FAST_COMPILE`` for a short run on the CPU: the draws
    then differ from XLA's defaults' by rounding, fused multiply-adds, so a resumed run must be given the same options)."""
    block_size, progress, devices, data_sharding, checkpoint_dir, resume = run
    use_compilation_cache()  # before anything compiles: a new process reads what an earlier one compiled
    num_samples, num_chains, block_size = check_args(
        num_samples, num_chains, block_size, resume, checkpoint_dir, devices, data_sharding
    )
    with checkpoint.run_directory(checkpoint_dir, resume):  # refused at once if in use, not writable or not resumable
        layout = None if devices is None else chain_layout(devices, num_chains)
        source = as_data_source(data)
        arrays = source.arrays()
        temps = temperature_schedule(temperature, num_samples)
        base_key = as_run_key(key, num_chains)
        positions = initial_positions(initial_position, num_chains, batched_init)
        check_initial(model, arrays, source.n, positions, num_chains)

        if runner is not None and (devices is not None or runner.num_chains != num_chains):
            raise ValueError(
                f"runner runs {runner.num_chains} chains on the default device; got num_chains={num_chains}, devices={devices!r}"
            )
        kernel = build_kernel(model, proposal, test, source.n, estimator) if runner is None else runner.kernel
        finished = Finished(jax.jit(jax.vmap(kernel.init))(positions), None, 0, 0.0)  # compiled: op by op took seconds
        if checkpoint_dir is not None:
            settings = checkpoint.run_settings(
                key=base_key,
                model=model,
                test=test,
                proposal=proposal,
                num_chains=num_chains,
                n_data=source.n,
                positions=positions,
                estimator=estimator,
                data=arrays,
            )
            finished = _restore_or_start(checkpoint_dir, settings, resume, finished.states, temps)
        run_key = base_key
        if layout is not None:
            finished, arrays, run_key = _place(finished, arrays, base_key, layout, data_sharding)

        blocks = make_block_runner(kernel, num_chains, layout, compiler_options) if runner is None else runner.run_block

        def run_block(states: ChainState, steps: jax.Array, block_temps: jax.Array):
            with host_read_errors(arrays):  # a data file changed under the run: its own error, naming the file
                return jax.block_until_ready(blocks(run_key, states, arrays, steps, block_temps))

        exact_rows = 0 if estimator is None else source.n - estimator.population_size(source.n)  # a stratum's rows
        diagnose = functools.partial(nonfinite_error, model, proposal, source, base_key, num_chains)
        bar = SamplingBar(progress, num_samples, finished.done, test.name)
        start = time.perf_counter()
        try:
            finished, interrupted = _run_blocks(run_block, temps, block_size, finished, checkpoint_dir, bar, diagnose)
        except DataChangedError as err:  # the finished draws travel with the error, never lost
            if err.finished.done:
                err.result = _stack_result(
                    err.finished, model, test, source.n, temps, time.perf_counter() - start, True, exact_rows
                )
                err.add_note(
                    f"the {err.finished.done} finished steps are in this error's .result"
                    + (f" and in {checkpoint_dir}" if checkpoint_dir is not None else "")
                )
            raise
        finally:
            bar.close()
        wall = finished.wall_time + time.perf_counter() - start
        return _stack_result(finished, model, test, source.n, temps, wall, interrupted, exact_rows)
