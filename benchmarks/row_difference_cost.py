"""What each row's integrated difference costs: ``auto_sample`` on ``first_fit.py``'s models, this tree against another.

``models.shared_term.row_difference`` computes each row's ``l_i(theta') - l_i(theta)`` in float32 as the integral of
its derivative along the move (``ROW_NODES`` forward-mode evaluations) instead of one subtraction. This runs
``first_fit.py``'s ``auto_sample`` (``from_numpyro``, the warm-up, sampling and the check after it) on each model with
this tree's library and with the library at ``--before`` (a source tree, e.g. ``git archive main src | tar -x -C
/tmp/before``), each run its own process, the two alternating (before first for even models, after first for odd ones)
so the box's load falls on both alike. Reported per model and tree: the sampling phase's seconds and compilation
seconds, steps per second of sampling after compilation (chains times draws over the two's difference), the whole
fit's seconds and its process's CPU seconds, the minibatch and the acceptance; and the ratio after/before.

    .venv/bin/python benchmarks/row_difference_cost.py --before /tmp/before/src --n 100000 \
        [--results docs/results/row_difference_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

COLUMNS = [
    "model",
    "library",
    "sampling s",
    "compile s",
    "steps/s",
    "fit s",
    "CPU s",
    "m",
    "acceptance",
    "steps/s after / before",
]
HERE = Path(__file__).resolve().parent


def one(name: str, n: int, draws: int, chains: int) -> dict:
    """One ``auto_sample`` fit of ``first_fit``'s model ``name`` in this process: its costs as a dict."""
    import numpy as np
    from first_fit import MODELS, make_data

    from minibatch_mcmc.interop import from_numpyro
    from minibatch_mcmc.warmup import auto_sample

    start, cpu = time.perf_counter(), time.process_time()
    conv = from_numpyro(MODELS[name], *make_data(name, n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, w = auto_sample(
            conv.model, conv.data, conv.init, num_samples=draws, num_chains=chains, key=1, progress=False
        )
    sampling = w.cost["sampling"]
    return {
        "sampling": sampling.seconds,
        "compile": sampling.compile_seconds,
        "steps_per_s": chains * draws / (sampling.seconds - np.nan_to_num(sampling.compile_seconds)),
        "fit": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "m": int(np.median(np.asarray(res.records["batch_size"]))),
        "acceptance": float(np.mean(np.asarray(res.records["accepted"]))),
    }


def spawn(src: str, name: str, args: argparse.Namespace) -> dict:
    """``one`` in a fresh process whose library is the tree at ``src`` (compilation cache off)."""
    env = dict(os.environ, PYTHONPATH=src, MINIBATCH_MCMC_COMPILATION_CACHE="off")
    cmd = [sys.executable, __file__, "--one", name, "--n", str(args.n), "--draws", str(args.draws)]
    out = subprocess.run(
        [*cmd, "--chains", str(args.chains)], env=env, capture_output=True, text=True, check=True, cwd=HERE
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=False, help="source tree (the folder holding minibatch_mcmc) to compare with")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--models", nargs="+", default=["robust", "poisson", "logistic", "mixture"])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--name", default="row_difference_cost")
    ap.add_argument("--results", default=None, metavar="FILE")
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.n, args.draws, args.chains)))
        return
    if args.before is None or not (Path(args.before) / "minibatch_mcmc").is_dir():
        raise SystemExit(f"--before={args.before!r}: give the source tree (holding minibatch_mcmc/) to compare with")
    from bench_results import save, table

    trees = {"before": str(Path(args.before).resolve()), "after": str(HERE.parent / "src")}
    print(f"load average at start {os.getloadavg()}", flush=True)
    rows, values = [], {}
    for k, name in enumerate(args.models):
        order = ["before", "after"] if k % 2 == 0 else ["after", "before"]
        got = {tree: spawn(trees[tree], name, args) for tree in order}
        ratio = got["after"]["steps_per_s"] / got["before"]["steps_per_s"]
        for tree in ("before", "after"):
            g = got[tree]
            rows.append(
                [
                    name,
                    tree,
                    f"{g['sampling']:.1f}",
                    f"{g['compile']:.1f}",
                    f"{g['steps_per_s']:.0f}",
                    f"{g['fit']:.1f}",
                    f"{g['cpu']:.1f}",
                    str(g["m"]),
                    f"{g['acceptance']:.3f}",
                    f"{ratio:.2f}" if tree == "after" else "",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
        values[f"{args.name}.{name}_ratio"] = f"{ratio:.2f}"
    print(f"load average at end {os.getloadavg()}")
    save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
