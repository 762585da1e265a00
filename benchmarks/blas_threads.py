"""Issue 31: the host's dense linear algebra on OpenBLAS's default threads against one thread, alone and two at once.

The warm-up's host-side ``d x d`` factorisations (``optim.trust_region``'s ``eigh`` and Cholesky, the Laplace fits'
``eigh``, Cholesky and inverse in ``optim.mode`` and ``warmup.multistart``, and XLA's own CPU ``eigh``/Cholesky, which
call scipy's LAPACK) are timed on a symmetric positive definite matrix at each ``d`` of ``--sizes``, each call once on
OpenBLAS's default thread count and once under ``threadpoolctl.threadpool_limits(1, "blas")``, in one fresh process
("alone") and then in ``--copies`` processes started at once ("at once": the cores oversubscribed, as on a shared
machine). Each row: the call's wall and CPU seconds (``time.process_time``, the process's over all its threads) on the
default threads and on one (the median of ``repeats(d)`` runs, the two alternating), and the ratio default / one (above
1: one thread is faster). The load average at the start
of each part is in the table; the machine is in the results file.

    python benchmarks/blas_threads.py --sizes 200,1000,2000,4000 --name blas_threads \
        --results docs/results/blas_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

COLUMNS = ["d", "call", "processes", "load", "default s", "default CPU s", "1 thread s", "1 thread CPU s", "ratio"]
CALLS = ("numpy eigh", "scipy cholesky", "numpy cholesky + inverse", "numpy inv", "XLA eigh", "XLA cholesky")
"""The calls timed: where each runs in the library is in the module docstring."""
CHOLESKY = ("scipy cholesky", "XLA cholesky")
EIGH_MAX = 2000
"""Above this ``d`` only the Cholesky calls run: an ``eigh``'s work grows as ``d^3``, and on the default threads of the
oversubscribed 2-core machine one at ``d = 4000`` did not finish in the time this benchmark had."""


def calls() -> dict:
    """Each call of ``CALLS`` as ``h -> result`` (the XLA ones compiled once for the shape before timing)."""
    import jax
    import jax.numpy as jnp
    import scipy.linalg

    jax.config.update("jax_enable_x64", True)
    eigh, chol = jax.jit(jnp.linalg.eigh), jax.jit(jnp.linalg.cholesky)
    return {
        "numpy eigh": np.linalg.eigh,
        "scipy cholesky": lambda h: scipy.linalg.cholesky(h, lower=True),
        "numpy cholesky + inverse": lambda h: np.linalg.solve(np.linalg.cholesky(h), np.eye(h.shape[0])),
        "numpy inv": np.linalg.inv,
        "XLA eigh": lambda h: jax.block_until_ready(eigh(h)),
        "XLA cholesky": lambda h: jax.block_until_ready(chol(h)),
    }


def spd(d: int) -> np.ndarray:
    """A fixed ``d x d`` symmetric positive definite matrix (``A A^T / d + I``, ``A`` standard normal, seed 0)."""
    a = np.random.default_rng(0).standard_normal((d, d))
    return a @ a.T / d + np.eye(d)


def timed(fn, h) -> tuple[float, float, list]:
    """Wall and CPU seconds of ``fn(h)``, and its outputs as numpy arrays."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(h)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def repeats(d: int) -> int:
    """Times each call runs at ``d`` (the median kept): 7 below ``d = 500``, 3 below 2000, else 1."""
    return 7 if d < 500 else 3 if d < 2000 else 1


def worker(sizes: list[int], out: str) -> None:
    """Every call at every ``d``, default threads then one; ``{d: {call: [wall, cpu, wall 1, cpu 1, same]}}`` to ``out``
    (``same``: the two outputs bitwise equal)."""
    import jax.numpy as jnp
    from threadpoolctl import threadpool_limits

    table: dict = {}
    fns = calls()
    for name, fn in fns.items():  # each library loaded and its threads started before any timing
        fn(jnp.asarray(spd(50)) if name.startswith("XLA") else spd(50))
    for d in sizes:
        h = spd(d)
        for name, fn in fns.items():
            if d > EIGH_MAX and name not in CHOLESKY:
                continue
            arg = jnp.asarray(h) if name.startswith("XLA") else h
            if name.startswith("XLA"):
                fn(arg)  # compiled before timing
            runs = []
            for _ in range(repeats(d)):  # the two thread counts alternate, so that they share the machine's moments
                wall, cpu, first = timed(fn, arg)
                with threadpool_limits(limits=1, user_api="blas"):
                    wall1, cpu1, second = timed(fn, arg)
                runs.append([wall, cpu, wall1, cpu1])
            same = all(np.array_equal(a, b) for a, b in zip(first, second))
            table.setdefault(str(d), {})[name] = [*np.median(runs, axis=0).tolist(), same]
            print(json.dumps({"pid": os.getpid(), "d": d, "call": name, "times": table[str(d)][name]}), flush=True)
    Path(out).write_text(json.dumps(table))


def spawn(copies: int, sizes: list[int], tmp: Path) -> list[dict]:
    """``copies`` workers started at once; each one's table."""
    procs = []
    for i in range(copies):
        out = tmp / f"{copies}_{i}.json"
        cmd = [sys.executable, __file__, "--worker", "--sizes", ",".join(map(str, sizes)), "--out", str(out)]
        procs.append((subprocess.Popen(cmd), out))
    for proc, _ in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"a worker failed (exit {proc.returncode})")
    return [json.loads(out.read_text()) for _, out in procs]


def rows_for(copies: int, load: float, tables: list[dict]) -> tuple[list, dict, list]:
    """The table's rows for one part (the mean over its processes), its ratios by ``(d, call)``, and any call whose
    outputs differed between the thread counts."""
    rows, ratios, differ = [], {}, []
    for d in tables[0]:
        for name in tables[0][d]:  # the calls run at this d
            got = np.mean([t[d][name][:4] for t in tables], axis=0)
            ratio = got[0] / max(got[2], 1e-9)
            ratios[(d, name)] = ratio
            differ += [f"{name} at d = {d}"] if not all(t[d][name][4] for t in tables) else []
            rows.append([d, name, str(copies), f"{load:.1f}", *(f"{v:.3f}" for v in got), f"{ratio:.2f}"])
    return rows, ratios, differ


def main() -> None:
    """Alone, then ``--copies`` at once; the side-by-side table printed and (``--results``) saved."""
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200,1000,4000")
    ap.add_argument("--copies", type=int, default=2, help="processes at once in the oversubscribed part")
    ap.add_argument("--name", default="blas_threads")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_results import add_results_option, save_rows

    add_results_option(ap)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        worker(sizes, args.out)
        return
    import platform

    import scipy.linalg  # noqa: F401 - its OpenBLAS loaded, so that the machine line names it
    from threadpoolctl import threadpool_info

    libs = sorted(
        {f"{lib['internal_api']} {lib['version']} ({lib['num_threads']} threads)" for lib in threadpool_info()}
    )
    machine = f"{platform.machine()}, {os.cpu_count()} cores; BLAS: {', '.join(libs) or 'none loaded'}"
    rows, values, differ = [], {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (1, args.copies):
            load = os.getloadavg()[0]
            part, ratios, diff = rows_for(copies, load, spawn(copies, sizes, Path(tmp)))
            rows += part
            differ += diff
            for (d, name), ratio in ratios.items():
                values[f"{args.name}.{copies}.{d}.{name.replace(' ', '_')}.ratio"] = f"{ratio:.2f}"
            for row in part:
                print(dict(zip(COLUMNS, row)), flush=True)
    values[f"{args.name}.differ"] = "; ".join(sorted(set(differ))) or "none"
    save_rows(args, COLUMNS, rows, values, machine, complete=True)


if __name__ == "__main__":
    main()
