"""The BLAS threads of the host's dense linear algebra (issue 31): one below ``THREADED_DIM``, else BLAS's own count.

OpenBLAS (numpy's, and scipy's, which XLA's CPU ``eigh`` and Cholesky call too) runs as many threads as the machine
has cores, and they wait for one another by spinning: where the cores are oversubscribed (other processes, XLA's own
threads) a ``d x d`` factorisation on the default threads took many times its one-thread seconds, while on one thread
it cost little more where the machine was free (docs/benchmarks.md, "BLAS threads"; ``benchmarks/blas_threads.py``).
The warm-up's mode searches and Laplace fits (``warmup.centre.find_centre``, ``warmup.glmm_mode.glmm_mode``,
``optim.mode.find_mode``) run inside ``host_blas(d)``. From ``THREADED_DIM`` on, where a factorisation is long enough
for threads to pay on a free many-core machine, BLAS keeps its own count. The rule reads ``d`` alone, never the
machine's load: OpenBLAS's results differ in their last bits with its thread count, so a count that followed the load
would make a fit's mode, and so its draws, depend on what else the machine was running.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

THREADED_DIM = 2048
"""From this ``d`` on, BLAS's own thread count; below it, one."""


def blas_threads(d: int) -> int | None:
    """BLAS threads for ``d x d`` factorisations: 1 below ``THREADED_DIM``, else ``None`` (BLAS's own count)."""
    return 1 if d < THREADED_DIM else None


def host_blas(d: int) -> threadpool_limits:
    """A context in which numpy's, scipy's and XLA's CPU LAPACK calls run on ``blas_threads(d)`` threads; the caller's
    counts are restored on leaving it."""
    return threadpool_limits(limits=blas_threads(d), user_api="blas")
