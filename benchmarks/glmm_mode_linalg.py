"""Issue 31: seconds of a GLMM's mode search (``warmup.glmm_mode``) and of its ``d x d`` linear algebra, two versions of the
library side by side in one run.

The model and data are ``glmm_warmup_passes.py``'s (logistic, ``y ~ x1 + x2 + x3 + (1 | g)``, ``--sizes equal``); for
each version one fresh process (both at the same time, so their seconds share the machine) builds the design and model
(``mm.glmm``'s steps) and runs ``glmm_mode`` from ``initial_theta``, counting numpy's ``eigh``/``eigvalsh`` calls and
seconds and scipy's and numpy's Cholesky calls, and the calls of those and numpy's ``inv`` on a matrix larger than
``BIG`` (a ``d x d`` factorisation) and XLA's compilations (``jax_log_compiles``); it reports the mode search's wall and
CPU seconds (the process's, all its threads: the machine is shared), its full passes, those counts, and
the largest distance between the two versions' modes in Laplace s.d.s (0 up to rounding for a pure speed-up):

    python benchmarks/glmm_mode_linalg.py --n 100000 --groups 1000 --before 08c6c6c \\
        --results docs/results/glmm_mode_linalg.json
    python benchmarks/glmm_mode_linalg.py --sizes 20000:200,100000:1000 --before 9a599cb --after 3d51369 \\
        --name glmm_mode_speed --results docs/results/glmm_mode_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = [
    "N",
    "G",
    "d",
    "version",
    "mode s",
    "mode CPU s",
    "compilations",
    "full passes",
    "eigh calls",
    "eigh s",
    "Cholesky calls",
    "large factorisations",
    "mode off (s.d.)",
]


BIG = 64
"""A matrix whose last dimension exceeds this counts as a large (``d x d``) factorisation (the globals' blocks are smaller)."""


def counted(module, name: str, tally: dict) -> None:
    """Replace ``module.name`` by a wrapper adding its calls, seconds and calls on a matrix larger than ``BIG`` to
    ``tally[name]``."""
    fn = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        big = int(np.shape(args[0])[-1] > BIG) if args else 0
        try:
            return fn(*args, **kwargs)
        finally:
            calls, seconds, large = tally[name]
            tally[name] = [calls + 1, seconds + time.perf_counter() - start, large + big]

    tally[name] = [0, 0.0, 0]
    setattr(module, name, wrapper)


def worker(n: int, groups: int, out: str) -> None:
    """One version's mode search (module docstring), written to ``out`` (JSON)."""
    import logging

    import jax
    import pandas as pd
    import scipy.linalg

    compiled = []

    class Compilations(logging.Handler):
        """Counts XLA compilations (``jax_log_compiles``' messages)."""

        def emit(self, record: logging.LogRecord) -> None:
            if "Finished XLA compilation" in record.getMessage():
                compiled.append(1)

    jax.config.update("jax_log_compiles", True)
    logging.getLogger("jax").addHandler(Compilations())
    logging.getLogger("jax").setLevel(logging.WARNING)

    from minibatch_mcmc.data.arrays import as_data_source
    from minibatch_mcmc.interop.formula import formula_design
    from minibatch_mcmc.models.glmm import glmm_model, initial_theta
    from minibatch_mcmc.warmup.glmm_mode import glmm_mode

    rng = np.random.default_rng(0)
    g = rng.permutation(np.repeat(np.arange(groups), n // groups)).astype(np.int32)
    x = rng.normal(size=(g.size, 3)).astype(np.float32)
    eta = -0.5 + x @ np.array([0.5, -0.3, 0.2]) + rng.normal(0.0, 0.5, groups)[g]
    df = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "g": g})
    df["y"] = (rng.random(g.size) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    fitted = formula_design("y ~ x1 + x2 + x3 + (1 | g)", df, "bernoulli")
    model, data = glmm_model(fitted.design, fitted.family, centred="auto")
    tally: dict = {}
    for name in ("eigh", "eigvalsh", "cholesky", "inv"):
        counted(np.linalg, name, tally)
    sc: dict = {}  # scipy's, apart
    counted(scipy.linalg, "cholesky", sc)
    before = len(compiled)
    start, cpu = time.perf_counter(), time.process_time()
    found = glmm_mode(model, as_data_source(data), initial_theta(model), jax.random.key(1))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    mode = found.mode
    result = {
        "seconds": seconds,
        "cpu": cpu,
        "compilations": len(compiled) - before,
        "passes": found.passes,
        "eigh": tally["eigh"][0] + tally["eigvalsh"][0],
        "eigh_s": tally["eigh"][1] + tally["eigvalsh"][1],
        "chol": tally["cholesky"][0] + sc["cholesky"][0],
        "large": sum(t[2] for t in tally.values()) + sc["cholesky"][2],
        "d": int(mode.hessian.shape[0]),
        "mode": np.asarray(jax.flatten_util.ravel_pytree(mode.theta_hat)[0], np.float64).tolist(),
        "sd": np.sqrt(np.diag(np.linalg.inv(-mode.hessian))).tolist(),
    }
    Path(out).write_text(json.dumps(result))


def main() -> None:
    """Both versions on one configuration; the table printed and (``--results``) saved."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--sizes", default=None, help="N:G,N:G,...: several configurations, one table (else --n, --groups)")
    ap.add_argument("--before", default="main", help="git revision of the 'before' version")
    ap.add_argument("--after", default="HEAD", help="git revision of the 'after' version")
    ap.add_argument("--name", default="glmm_mode_linalg")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_results import add_results_option, save_rows
    from revisions import extract_sources, mode_gap, run_workers

    add_results_option(ap)
    args = ap.parse_args()
    if args.worker:
        worker(args.n, args.groups, args.out)
        return
    machine = f"{platform.machine()}, {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"
    sizes = [tuple(int(float(v)) for v in s.split(":")) for s in args.sizes.split(",")] if args.sizes else None
    rows, values = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        versions = extract_sources({"before": args.before, "after": args.after}, Path(tmp))
        for n, groups in sizes or [(args.n, args.groups)]:
            got = run_workers(__file__, versions, ["--n", str(n), "--groups", str(groups)])
            off = mode_gap(got)
            for name, r in got.items():
                row = [f"{n:.0e}", str(groups), str(r["d"]), name, f"{r['seconds']:.1f}", f"{r['cpu']:.1f}"]
                row += [str(r["compilations"]), str(r["passes"])]
                row += [str(r["eigh"]), f"{r['eigh_s']:.1f}", str(r["chol"]), str(r.get("large", "")), f"{off:.1e}"]
                rows.append(row)
                key = f"{args.name}.{n}.{groups}.{name.split()[0]}" if sizes else f"{args.name}.{name.split()[0]}"
                values[f"{key}.seconds"] = f"{r['seconds']:.1f}"
                values[f"{key}.cpu_seconds"] = f"{r['cpu']:.1f}"
                print(dict(zip(COLUMNS, row)), flush=True)
            save_rows(args, COLUMNS, rows, values, machine, complete=False)
    save_rows(args, COLUMNS, rows, values, machine, complete=True)


if __name__ == "__main__":
    main()
