"""The BLAS threads of the host's dense linear algebra (issue 31): one below ``THREADED_DIM``, else the idle cores.

OpenBLAS (numpy's, and scipy's, which XLA's CPU ``eigh`` and Cholesky call too) runs as many threads as the machine
has cores, and they wait for one another by spinning: where the cores are oversubscribed (other processes, XLA's own
threads) a ``d x d`` factorisation on the default threads took many times its one-thread seconds, while on one thread
it cost little more where the machine was free (docs/benchmarks.md, "BLAS threads"; ``benchmarks/blas_threads.py``).
The warm-up's mode searches and Laplace fits (``warmup.centre.find_centre``, ``warmup.glmm_mode.glmm_mode``,
``optim.mode.find_mode``) run inside ``host_blas(d)``. From ``THREADED_DIM`` on, where a factorisation is long enough
for threads to pay on a free many-core machine, the count is the cores the load average leaves idle: the last bits of
such a factorisation (and so of the mode) then depend on the machine's load, as OpenBLAS's results differ with its
thread count.
"""

from __future__ import annotations

import os

from threadpoolctl import threadpool_limits

THREADED_DIM = 2048
"""From this ``d`` on, the idle cores' threads (``idle_cores``); below it, one."""


def idle_cores() -> int:
    """The cores this process may use that the 1-minute load average leaves idle (counting this process's own thread as
    idle), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, int(cores - os.getloadavg()[0] + 1.0)))


def blas_threads(d: int) -> int:
    """BLAS threads for ``d x d`` factorisations: 1 below ``THREADED_DIM``, else ``idle_cores()``."""
    return 1 if d < THREADED_DIM else idle_cores()


def host_blas(d: int) -> threadpool_limits:
    """A context in which numpy's, scipy's and XLA's CPU LAPACK calls run on ``blas_threads(d)`` threads; the caller's
    counts are restored on leaving it."""
    return threadpool_limits(limits=blas_threads(d), user_api="blas")
