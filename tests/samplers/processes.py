"""Several CPU JAX processes on this machine (``jax.distributed`` on 127.0.0.1), for the multi-process tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np


def free_port() -> int:
    """An unused TCP port on 127.0.0.1 (the coordinator's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script: str, count: int, args: list[str], timeout: float = 180) -> None:
    """Start ``count`` CPU processes (one device each) running ``script PID COUNT PORT *args``; all must exit 0."""
    port = free_port()
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i), str(count), str(port), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    errs = []
    for p in procs:
        try:
            errs.append(p.communicate(timeout=timeout)[1])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(e[-1500:] for e in errs)


U32, U64 = 2.0**-24, 2.0**-53


def logistic_abs_sums(data: dict, centre: np.ndarray) -> dict:
    """Sums over rows of the magnitudes of each row's log-likelihood, gradient and Hessian at ``centre``, in float64
    from their closed forms (``l = y z - log(1 + e^z)``, ``g = (y - s) x``, ``H = -s (1 - s) x x'``, ``z = x . c``)."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    z = x @ np.asarray(centre, np.float64)
    sig = 1 / (1 + np.exp(-z))
    return {
        "v": np.abs(y * z - np.logaddexp(0, z)).sum(),
        "g": np.abs((y - sig)[:, None] * x).sum(axis=0),
        "h": np.einsum("i,ij,ik->jk", sig * (1 - sig), np.abs(x), np.abs(x)),
    }


def sum_bound(s: np.ndarray, terms: int, count: int) -> np.ndarray:
    """Largest difference two float32 summations of the same per-row terms may show.

    Each result sums float32 terms whose magnitudes add to ``s``: a float32 sum of at most ``terms`` partial results
    is within ``terms * u32 * s`` of the exact sum whatever the order (recursive summation bound, ``gamma_n``),
    plus 16 ulps of each term for its own evaluation in a differently shaped program; the processes' partial results
    are then combined (``count`` float64 additions, or float32 for a traced pass: covered by ``terms``) and the
    proxy stores the float64 sum rounded to float32 (one more ulp of ``s``). Two results: twice that."""
    return 2 * ((terms + 16 + 1) * U32 + count * U64) * s
