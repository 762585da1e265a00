"""Memory of a run grows by the draws it keeps, not by the number of blocks it ran in."""

import os
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
from minibatch_mcmc.samplers import driver
from minibatch_mcmc.samplers.progress import SamplingBar

BLOCKS, BLOCK_SIZE = 200, 2
MARGIN = 1536
"""Bytes per block allowed beyond twice the kept draws': measured 50-150 B per block of RSS and ~100 B of traced memory
(this test's own log) after the fix, 4.0 KB and 3.0 KB before; a one-off 132 KB heap extension adds ~450 B per block."""


def resident_bytes() -> int:
    """Resident set size of this process (0 where ``/proc`` is missing)."""
    if not os.path.exists("/proc/self/statm"):
        return 0
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def growth_per_block(log: list) -> np.ndarray:
    """Least-squares slope over the blocks (the first tenth left out) of each column of ``log``."""
    rows = np.asarray(log[len(log) // 10 :], np.float64)
    return np.polyfit(np.arange(len(rows)), rows, 1)[0]


def test_memory_per_block_is_bounded_by_the_kept_draws(monkeypatch):
    """Would catch the driver keeping anything per block beyond the draws: a list of per-block host arrays (a Python
    object each) whose zero-copy views kept each block's XLA buffers alive grew RSS by ~4 KB and traced memory by ~3 KB
    per 2-step block of one chain, whose draws and records take 94 B (28 KB per 20-step block in the issue)."""
    log = []

    class MeasuredBar(SamplingBar):
        def advance(self, recs: dict, length: int, seconds: float) -> None:
            super().advance(recs, length, seconds)
            log.append((resident_bytes(), tracemalloc.get_traced_memory()[0]))

    monkeypatch.setattr(driver, "SamplingBar", MeasuredBar)
    data = make_mixture_data(jax.random.key(0), 1000)
    tracemalloc.start()
    try:
        res = sample(
            gaussian_mixture(),
            data,
            jnp.zeros(2),
            proposal=random_walk(cov=0.15 * np.eye(2)),
            test=mh_minibatch(50),
            num_samples=BLOCKS * BLOCK_SIZE,
            block_size=BLOCK_SIZE,
            progress=False,
            temperature=200.0,
        )
    finally:
        tracemalloc.stop()
    assert len(log) == BLOCKS
    kept = (
        sum(a.nbytes for a in jax.tree_util.tree_leaves(res.positions)) + sum(a.nbytes for a in res.records.values())
    ) / BLOCKS
    rss, traced = growth_per_block(log)
    bound = 2 * kept + MARGIN
    assert traced <= bound, f"traced memory grew {traced:.0f} B per block; the kept draws take {kept:.0f} B"
    assert rss <= bound, f"RSS grew {rss:.0f} B per block; the kept draws take {kept:.0f} B"
