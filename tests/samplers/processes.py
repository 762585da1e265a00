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


def cpu_env() -> dict:
    """This process's environment for a CPU JAX worker with one device (any simulated device count dropped)."""
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
    return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)


def run_commands(commands: list[list[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Start every command at once (``cpu_env``), wait for each (killed past ``timeout``): ``(returncode, out, err)``."""
    procs = [
        subprocess.Popen(c, env=cpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands
    ]
    got = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        got.append((p.returncode, out, err))
    return got


def run_workers(script: str, count: int, args: list[str], timeout: float = 180) -> None:
    """Start ``count`` CPU processes (one device each) running ``script PID COUNT PORT *args``; all must exit 0."""
    port = free_port()
    got = run_commands(
        [[sys.executable, "-c", script, str(i), str(count), str(port), *args] for i in range(count)], timeout
    )
    assert all(code == 0 for code, _, _ in got), "\n".join(err[-1500:] for _, _, err in got)


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
