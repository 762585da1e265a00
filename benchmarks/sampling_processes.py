"""Wall time of the data-parallel warm-up and sampling against the number of ``jax.distributed`` processes (CPU,
127.0.0.1).

A d=10 logistic regression of ``--rows`` rows is written as a ``.npy`` pair; for each ``P`` in ``--processes``, ``P``
processes each open only their rows (``open_npy_rows``; ``open_npy`` for ``P = 1``), run ``warmup`` once, then
``sample_data_parallel`` twice from the warm-up's centre (its Taylor proxy as the estimator, an independence move
from its Laplace fit, ``--batch-size`` rows a step stratified over the processes): the first sampling call pays
compilation (the persistent compilation cache is on, so the second loads it), and a third call of twice the steps
gives the time per step, ``(third - second) / steps``, free of the fixed costs. Each call is timed from a barrier;
the table reports the slowest process's seconds. The machine's core count is recorded: past it, ``P`` processes share the cores and their time cannot
fall as ``1 / P``.

    python benchmarks/sampling_processes.py --rows 200000 --processes 1 2 4 --results docs/results/sampling_processes.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
from bench_results import add_results_option, save, table

WORKER = textwrap.dedent(
    """
    import json, sys, time
    import jax
    pid, count, port, path, out, steps, chains, m = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:6], \\
        *map(int, sys.argv[6:9])
    if count > 1:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    import numpy as np
    from jax.experimental import multihost_utils
    from minibatch_mcmc import independence_gaussian, sample_data_parallel, warmup
    from minibatch_mcmc.data import open_npy
    from minibatch_mcmc.data.shards import open_npy_rows
    from minibatch_mcmc.models import logistic_regression

    def barrier(name):
        if count > 1:
            multihost_utils.sync_global_devices(name)

    files = {"x": path + "/x.npy", "y": path + "/y.npy"}
    model, res = logistic_regression(), {}
    barrier("warm")
    t = time.perf_counter()
    data = open_npy_rows(files) if count > 1 else open_npy(files)
    w = warmup(model, data, np.zeros(10, np.float32), key=0)
    res["warmup"] = time.perf_counter() - t
    move = independence_gaussian(np.asarray(w.centre), cov=1.2**2 * np.asarray(w.covariance))
    for call, length in (("first", steps), ("second", steps), ("double", 2 * steps)):
        barrier(call)
        t = time.perf_counter()
        r = sample_data_parallel(model, data, w.centre, proposal=move, estimator=w.proxy, batch_size=m,
                                 num_samples=length, num_chains=chains, key=1)
        res[call] = time.perf_counter() - t
    res.update(accept=float(r.records["accepted"].mean()), s2=float(np.median(r.records["s2"])),
               mean=np.asarray(r.positions, np.float64).reshape(-1, 10).mean(0).tolist())
    json.dump(res, open(f"{out}-{count}-{pid}.json", "w"))
    """
)


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(count: int, path: str, out: str, args: argparse.Namespace) -> list[dict]:
    """Every process's timings with ``count`` processes."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(i),
                str(count),
                str(port),
                path,
                out,
                str(args.steps),
                str(args.chains),
                str(args.batch_size),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    errs = [p.communicate(timeout=1800)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("\n".join(e[-2000:] for e in errs))
    return [json.load(open(f"{out}-{count}-{i}.json")) for i in range(count)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=400)
    add_results_option(parser)
    args = parser.parse_args(argv)
    import jax

    from minibatch_mcmc.models import make_logistic_data

    rows, values, raw = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        data, _ = make_logistic_data(jax.random.key(0), args.rows, 10)
        for k, v in data.items():
            np.save(Path(tmp) / f"{k}.npy", np.asarray(v))
        base = None
        for count in args.processes:
            outs = run(count, tmp, str(Path(tmp) / "out"), args)
            raw[str(count)] = outs
            warm, first, second, double = (max(o[k] for o in outs) for k in ("warmup", "first", "second", "double"))
            step_ms = 1e3 * (double - second) / args.steps
            base = (warm, step_ms) if base is None else base
            rows.append(
                [
                    str(count),
                    f"{warm:.1f}",
                    f"{first:.1f}",
                    f"{second:.1f}",
                    f"{step_ms:.2f}",
                    f"{base[0] / warm:.2f}",
                    f"{base[1] / step_ms:.2f}",
                    f"{outs[0]['accept']:.2f}",
                    f"{outs[0]['s2']:.3f}",
                ]
            )
            values[f"sampling_processes.p{count}_step_ms"] = f"{step_ms:.2f}"
            print(rows[-1], flush=True)
    cores = os.cpu_count()
    tables = {
        "sampling_processes": table(
            [
                "processes",
                "warm-up s",
                f"first sampling s ({args.steps} steps, compiling)",
                "second sampling s",
                "ms per step (third - second)",
                "warm-up speed-up",
                "per-step speed-up",
                "acceptance",
                f"median s2 ({cores} cores: past {cores} processes they share them)",
            ],
            rows,
        )
    }
    save(
        args.results,
        "sampling_processes",
        config=args,
        tables=tables,
        values=values,
        extra={"cores": cores, "workers": raw},
    )


if __name__ == "__main__":
    main()
