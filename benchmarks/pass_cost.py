"""The lean warm-up's streamed full-data pass (``warmup.lean_pass.stream``) at 10^7 rows from ``.npy``, one source tree
against another, side by side: CPU and wall seconds of a pass with and without the influence probes and far points.

Each round runs one fresh child process per tree (``--before``, then ``--after``, alternating, so both see the same
load): it opens ``DATA/N/npy/{x,y}.npy`` (``make tall-data``), builds the pass's chunk function for the d = 10
``logistic_regression(10.0)`` of ``benchmarks/tall.py`` and streams it at the data's true ``theta`` in 16,384-row chunks
(``lean.lean_mode``'s): first a pass without probes (the fit's first Newton pass, compiling the chunk function), then
``--passes`` of each kind: without probes, and with the 16 probes at 3 s.d.s and the two far points at 64 s.d.s (the
fit's last Newton pass, which is also the proxy pass), with s.d.s of ``1 / sqrt(N / 5)`` (a logistic row's information at
``p = 1/2`` is ``x x' / 4``). The child reports each pass's process CPU seconds (all threads) and wall seconds; the
smallest over its rounds is the figure (a loaded machine only ever adds). Every child's sums and deviations are also
hashed, so a change that should compute the same floats can be seen to.

    git worktree add /tmp/base main
    python benchmarks/pass_cost.py --before /tmp/base/src --after src --data data/tall --results docs/results/pass_cost.json
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_results import add_results_option, machine_line, save, table  # noqa: E402

CHUNK = 16384
"""Rows per chunk, as ``lean.lean_mode`` streams them (``data.passes.DEFAULT_CHUNK``)."""
BULK = 2048
"""The bulk level's rows (``lean.BULK_ROWS``): the residuals a chunk hands back where the tree's ``chunk_pass`` takes
``head``."""


def child(path: Path, passes: int) -> dict:
    """Stream the passes in this process (the tree on ``PYTHONPATH``): CPU and wall seconds of each, and a hash of the
    outputs."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from minibatch_mcmc.control_variates.influence import kept_rows, probe_points, probe_steps
    from minibatch_mcmc.data import open_npy
    from minibatch_mcmc.models import logistic_regression
    from minibatch_mcmc.warmup.lean_pass import chunk_pass, stream

    source = open_npy({"x": path / "x.npy", "y": path / "y.npy"})
    n, arrays = source.n, source.arrays()
    c = jnp.asarray(np.load(path / "theta.npy"), jnp.float32)
    d = int(c.shape[0])
    sd = 1.0 / np.sqrt(n / 5.0)
    points = probe_points(c, probe_steps(sd * np.eye(d), jax.random.key(1)))
    far = jnp.asarray(np.asarray(c)[None] + np.outer([64.0, -64.0], sd * np.eye(d)[0]), jnp.float32)
    unmoved = jnp.stack([c, c])
    keep, level = kept_rows(n), np.zeros((points.shape[0], 1))
    # the base tree's chunk_pass has no head (it hands back every row's residuals)
    head = {"head": BULK} if "head" in inspect.signature(chunk_pass).parameters else {}
    part = chunk_pass(logistic_regression(10.0), lambda x: x, 2, **head)
    kinds = {"first": (None, unmoved), "plain": (None, unmoved), "probed": (level, far)}
    out: dict = {k: [] for k in kinds}
    digest = hashlib.sha256()
    for kind in ["first"] + ["plain", "probed"] * passes:
        bulk, far_points = kinds[kind]
        t, cpu = time.perf_counter(), time.process_time()
        sums, top = stream(part, arrays, n, CHUNK, c, points, bulk, keep, 1.0, far_points)
        out[kind].append({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - t})
        for leaf in jax.tree_util.tree_leaves((sums, top)):
            digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return {"n": n, "passes": out, "hash": digest.hexdigest()[:16], "load": os.getloadavg()[0]}


def run_child(src: str, path: Path, passes: int) -> dict:
    """This script's child on the tree ``src`` (fresh process, no compilation cache)."""
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), MINIBATCH_MCMC_COMPILATION_CACHE="off")
    argv = [sys.executable, __file__, "--child", str(path), "--passes", str(passes)]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def seconds(runs: list[dict], kind: str, clock: str) -> tuple[float, float]:
    """The smallest and the median ``clock`` seconds of pass ``kind`` over the runs."""
    import numpy as np

    got = [p[clock] for r in runs for p in r["passes"][kind]]
    return min(got), float(np.median(got))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="the base tree's src directory (required)")
    parser.add_argument("--after", default="src", help="the changed tree's src directory")
    parser.add_argument("--data", default="data/tall", help="the tall data's root (make tall-data N=...)")
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--rounds", type=int, default=3, help="child processes per tree, alternating")
    parser.add_argument("--passes", type=int, default=2, help="passes of each kind per child after the first")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_results_option(parser)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(Path(args.child), args.passes)))
        return
    if args.before is None:
        parser.error("--before: the base tree's src directory is required")
    path = Path(args.data) / str(int(args.rows)) / "npy"
    machine, load0 = machine_line(), os.getloadavg()[0]
    runs: dict = {"before": [], "after": []}
    for _ in range(args.rounds):
        for name in runs:
            runs[name].append(run_child(getattr(args, name), path, args.passes))
            print(name, json.dumps(runs[name][-1]), flush=True)
    kinds = {
        "first": "first pass, no probes (compiles the chunk function)",
        "plain": "pass without probes (the fit's first Newton pass)",
        "probed": "pass with probes and far points (the last Newton pass, also the proxy's)",
    }
    rows, values = [], {}
    for kind, label in kinds.items():
        cpu = [seconds(runs[k], kind, "cpu_s") for k in runs]
        wall = [seconds(runs[k], kind, "wall_s") for k in runs]
        rows.append(
            [label]
            + [f"{cpu[0][i]:.2f}; {cpu[1][i]:.2f} ({cpu[1][i] / cpu[0][i]:.2f})" for i in (0, 1)]
            + [f"{wall[0][i]:.2f}; {wall[1][i]:.2f}" for i in (0, 1)]
        )
        for i, stat in enumerate(("min", "median")):
            values.update(
                {
                    f"pass_cost.{kind}.{stat}.before_cpu_s": f"{cpu[0][i]:.2f}",
                    f"pass_cost.{kind}.{stat}.after_cpu_s": f"{cpu[1][i]:.2f}",
                    f"pass_cost.{kind}.{stat}.cpu_ratio": f"{cpu[1][i] / cpu[0][i]:.2f}",
                }
            )
    same = len({r["hash"] for k in runs for r in runs[k]}) == 1
    values["pass_cost.same_floats"] = "the same" if same else "not the same"
    values["pass_cost.rounds"] = str(args.rounds)
    loads = [r["load"] for k in runs for r in runs[k]]
    values["pass_cost.load"] = f"{min(loads):.0f} to {max(loads):.0f}"
    columns = [
        f"pass at N = {args.rows:.0e}",
        "CPU s before; after (after / before): smallest",
        "the same: median",
        "wall s before; after: smallest",
        "the same: median",
    ]
    tabs = {"pass_cost": table(columns, rows)}
    for row in [columns] + rows:
        print(" | ".join(row))
    save(
        args.results,
        "pass_cost",
        config=vars(args),
        tables=tabs,
        values=values,
        extra={"machine": machine, "load average at start": load0, "children": runs},
    )


if __name__ == "__main__":
    main()
