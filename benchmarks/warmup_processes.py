"""Wall time of the data-parallel warm-up against the number of ``jax.distributed`` processes (CPU, 127.0.0.1).

A d=10 logistic regression of ``--rows`` rows is written as a ``.npy`` pair; for each ``P`` in ``--processes``,
``P`` processes each open only their rows (``open_npy_rows``; ``open_npy`` for ``P = 1``) and run ``warmup`` twice
(the first pays compilation, the second is the steady state), timing each call from a barrier; the table reports the
slowest process's seconds, the warm-up's passes over ``N`` and its phases. The machine's core count is recorded: past
it, ``P`` processes share the cores and their time cannot fall as ``1 / P``.

    python benchmarks/warmup_processes.py --rows 400000 --processes 1 2 4 --results docs/results/warmup_processes.json
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
    pid, count, port, path, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    if count > 1:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid)
    import numpy as np
    from jax.experimental import multihost_utils
    from minibatch_mcmc import warmup
    from minibatch_mcmc.data import open_npy
    from minibatch_mcmc.data.shards import open_npy_rows
    from minibatch_mcmc.models import logistic_regression
    files = {"x": path + "/x.npy", "y": path + "/y.npy"}
    runs = []
    for call in range(2):
        if count > 1:
            multihost_utils.sync_global_devices(f"call{call}")
        t = time.perf_counter()
        data = open_npy_rows(files) if count > 1 else open_npy(files)
        w = warmup(logistic_regression(), data, np.zeros(10, np.float32), key=0)
        runs.append({"seconds": time.perf_counter() - t, "passes": float(np.nansum([c.passes for c in w.cost.values()])),
                     "phases": {k: c.seconds for k, c in w.cost.items()}, "batch": int(w.test.batch_size),
                     "centre": np.asarray(w.centre, np.float64).tolist()})
    json.dump(runs, open(f"{out}-{count}-{pid}.json", "w"))
    """
)


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(count: int, path: str, out: str) -> list[list[dict]]:
    """Every process's two timed warm-ups with ``count`` processes."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(i), str(count), str(port), path, out],
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
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    add_results_option(parser)
    args = parser.parse_args(argv)
    import jax

    from minibatch_mcmc.models import make_logistic_data

    rows, values, raw = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        data, _ = make_logistic_data(jax.random.key(0), args.rows, 10)
        for k, v in data.items():
            np.save(Path(tmp) / f"{k}.npy", np.asarray(v))
        base, centre = None, None
        for count in args.processes:
            outs = run(count, tmp, str(Path(tmp) / "out"))
            raw[str(count)] = outs
            first, second = (max(o[c]["seconds"] for o in outs) for c in (0, 1))
            base = second if base is None else base
            steady = outs[0][1]
            here = np.asarray([o[1]["centre"] for o in outs])
            centre = here[0] if centre is None else centre
            off = float(np.abs(here - centre).max())
            phases = ", ".join(f"{k} {v:.2f}" for k, v in steady["phases"].items())
            rows.append(
                [
                    str(count),
                    f"{first:.1f}",
                    f"{second:.1f}",
                    f"{base / second:.2f}",
                    f"{steady['passes']:.1f}",
                    str(steady["batch"]),
                    f"{off:.1e}",
                    phases,
                ]
            )
            values[f"warmup_processes.p{count}_s"] = f"{second:.1f}"
            print(rows[-1], flush=True)
    cores = os.cpu_count()
    tables = {
        "warmup_processes": table(
            [
                "processes",
                "first warm-up s (compiling)",
                "second warm-up s",
                "speed-up",
                "passes over N",
                "batch size",
                "max |centre - first row's centre|",
                f"phases s (second call; {cores} cores: past {cores} processes they share them)",
            ],
            rows,
        )
    }
    save(
        args.results,
        "warmup_processes",
        config=args,
        tables=tables,
        values=values,
        extra={"cores": cores, "workers": raw},
    )


if __name__ == "__main__":
    main()
