"""``optim.host_blas``: the BLAS threads of the host's dense linear algebra (issue 31).

What each test would catch: a limit that is not applied (OpenBLAS left at its default count, where on an oversubscribed
machine a ``d x d`` ``eigh`` took many times its one-thread seconds: docs/benchmarks.md), a limit not restored after
(the caller's own BLAS work then single-threaded), a count above the threaded dimension that follows the load, and a
mode search (``find_mode``, ``find_centre``) that does not run inside the limit.
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
import scipy.linalg  # noqa: F401 - its OpenBLAS (the one XLA's CPU LAPACK calls) loaded, so that it is limited too
from threadpoolctl import threadpool_info

from minibatch_mcmc.optim.host_blas import THREADED_DIM, blas_threads, host_blas


def blas_counts() -> list[int]:
    """The thread count of every BLAS library loaded (numpy's and scipy's OpenBLAS)."""
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_one_thread_below_the_threaded_dimension_and_the_callers_count_restored():
    """Inside ``host_blas(d)`` for ``d < THREADED_DIM`` every BLAS library runs one thread; after it, the count it had."""
    before = blas_counts()
    assert before, "no BLAS library loaded"
    with host_blas(THREADED_DIM - 1):
        assert blas_counts() == [1] * len(before)
    assert blas_counts() == before


def test_the_threaded_dimension_keeps_blas_count_whatever_the_load(monkeypatch):
    """At and above ``THREADED_DIM`` BLAS keeps its own count, on a free machine as on an oversubscribed one: a count
    that followed the load would make the mode's last bits, and so the draws, depend on the machine's other work."""
    before = blas_counts()
    for load in (0.0, 50.0):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert blas_threads(THREADED_DIM) is None and blas_threads(THREADED_DIM - 1) == 1
        with host_blas(THREADED_DIM):
            assert blas_counts() == before


def test_find_mode_runs_inside_the_limit(monkeypatch):
    """``find_mode``'s Adam and Newton phases (where its ``eigh`` and Cholesky run) see one BLAS thread at ``d = 2``;
    the caller's count is restored after."""
    from minibatch_mcmc import models
    from minibatch_mcmc.optim import mode

    seen = []
    real = mode.run_newton

    def spy(*args, **kwargs):
        seen.append(blas_counts())
        return real(*args, **kwargs)

    monkeypatch.setattr(mode, "run_newton", spy)
    before = blas_counts()
    data = np.random.default_rng(0).normal(size=(200, 2)).astype(np.float32)
    mode.find_mode(models.gaussian_mean(), data, jnp.zeros(2), key=0, adam_steps=5, batch_size=50, newton_steps=2)
    assert seen == [[1] * len(before)] and blas_counts() == before
