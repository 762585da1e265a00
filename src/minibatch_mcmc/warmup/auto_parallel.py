"""``auto_sample`` with the rows split between processes: when it runs data-parallel, the warm-up's settings for it, and
its sampling by ``samplers.data_parallel_run.sample_data_parallel`` (each process its own rows, one ``psum`` a step).

The switch is the data source: rows opened per process (``data.shards.open_npy_rows``, ``open_parquet_rows``,
``open_parquet_files``) under ``jax.distributed`` with ``P > 1`` processes say that no process holds the whole table,
so ``auto_sample`` samples them data-parallel unless told ``data_parallel=False`` (then every minibatch is gathered
from its owners, one exchange a read). ``data_parallel=True`` also splits in-memory rows over one process's devices.
The warm-up is the data-parallel one (every pass over ``N`` local, then one all-gather); it runs without an exact
stratum (the stratified estimator draws every row from its shard) and with the penalty test, whose minibatch it sizes;
sampling keeps that minibatch fixed (at least two rows a shard).
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from minibatch_mcmc.acceptance.penalty import PenaltyTest
from minibatch_mcmc.acceptance.registry import decision_rule, named_test
from minibatch_mcmc.data.shards import partition_of
from minibatch_mcmc.diagnostics.proxy_check import timed_check
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.data_parallel_run import sample_data_parallel
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.run_options import RunOptions
from minibatch_mcmc.warmup.api import Warmup
from minibatch_mcmc.warmup.tuning import dispersed_starts

PyTree = Any
TEST = "penalty"
"""The test data-parallel sampling runs (``samplers.data_parallel``): the penalty test on a fixed minibatch."""


def runs_data_parallel(data: PyTree, data_parallel: bool | None) -> bool:
    """Whether ``auto_sample`` samples data-parallel: as told, or (None) when ``data`` holds this process's rows of a
    table split over more than one ``jax.distributed`` process."""
    if data_parallel is not None and not isinstance(data_parallel, bool):
        raise ValueError(f"data_parallel={data_parallel!r}: expected True, False or None (decided by the data source)")
    part = partition_of(data)
    if data_parallel and part is None and jax.process_count() > 1:
        raise ValueError(
            f"data_parallel=True over {jax.process_count()} processes needs each process's own rows: open the data with "
            "data.open_npy_rows, open_parquet_rows or open_parquet_files in every process"
        )
    if data_parallel is None:
        return part is not None and part.count > 1
    return data_parallel


def parallel_options(options: dict, run: RunOptions) -> dict:
    """The warm-up's options for data-parallel sampling: the penalty test (refusing another), no exact stratum."""
    test = options["test"]
    named = named_test(test) if isinstance(test, str) else test
    if named is not None and not isinstance(named, PenaltyTest):
        raise ValueError(
            f"test={named.name!r}: data-parallel sampling runs the penalty test on a fixed minibatch; "
            f"pass test=None or {TEST!r}, or data_parallel=False"
        )
    if run.data_sharding is not None or isinstance(run.devices, int):
        raise ValueError(
            f"data-parallel sampling lays the rows out itself: pass devices=None, 'all' or a list of devices (got "
            f"devices={run.devices!r}) and no data_sharding (got {run.data_sharding!r})"
        )
    return {**options, "test": TEST if test is None else test, "stratum": False}


def sample_split(
    model: Model,
    data: PyTree,
    w: Warmup,
    keys: tuple[jax.Array, jax.Array],
    num_samples: int,
    num_chains: int,
    temperature: float,
    run: RunOptions,
) -> SampleResult:
    """Sampling with the warm-up ``w``: its proposal and proxy, ``num_chains`` dispersed Laplace starts, its penalty
    test's minibatch stratified over the shards; a warning when the records' median ``s2`` passes ``sigma_max^2``."""
    if w.mode_kernels:
        raise ValueError(
            f"the warm-up found {len(w.modes)} modes; data-parallel sampling runs one kernel for all chains: pass "
            "num_starts=0 (sample the main mode) or data_parallel=False"
        )
    k_start, k_run = keys
    devices = None if run.devices in (None, "all") else list(run.devices)
    shards = len(jax.devices() if devices is None else devices)
    batch = max(int(w.test.batch_size), 2 * shards)
    result = sample_data_parallel(
        model,
        data,
        dispersed_starts(w, num_chains, k_start),
        proposal=w.proposal,
        estimator=w.proxy,
        batch_size=batch,
        num_samples=num_samples,
        num_chains=num_chains,
        key=k_run,
        temperature=temperature,
        devices=devices,
        block_size=run.block_size,
        checkpoint_dir=run.checkpoint_dir,
        resume=run.resume,
        batched_init=True,
    )
    s2 = float(np.median(result.records["s2"]))
    if s2 >= w.test.sigma_max**2:
        warnings.warn(
            f"data-parallel sampling kept the minibatch at {batch} rows, and the median estimated variance of the "
            f"log acceptance ratio was s2 = {s2:.3g} >= sigma_max^2 = {w.test.sigma_max**2:.3g} (the penalty test "
            "would have read more rows): the penalty lowers acceptance; pass a larger test, e.g. "
            f"test=penalty_test({2 * batch})",
            stacklevel=3,
        )
    return result


def checked_split(
    model: Model,
    data: PyTree,
    w: Warmup,
    result: SampleResult,
    check_draws: int,
    temperature: float,
    progress: bool,
    key: jax.Array,
) -> Warmup:
    """``w`` with the proxy's check after data-parallel sampling (Pareto-k on ``check_draws`` draws, the minibatch's
    normality at the run's batch size; rows gathered from their owners) and its cost."""
    checked, cost = timed_check(
        model,
        data,
        w.proxy,
        w.proxy.centre,
        result.kernel_positions,
        num_draws=check_draws,
        temperature=temperature,
        records={"batch_size": result.records["batch_size"]},
        rule=decision_rule(w.test),
        progress=progress,
        key=key,
        stratum=False,
    )
    return w._replace(proxy_check=checked, cost={**w.cost, "check": cost})
