"""A GLMM warm-up's passes over ``N`` phase by phase, two versions of the library side by side in one run.

The model and data are ``benchmarks/glmm.py``'s (logistic, ``y ~ x1 + x2 + x3 + (1 | g)``, group intercepts of s.d.
0.5, ``--sizes equal`` or ``tail``; ``--sizes unequal``: the issue's 16-group shape, groups of very unequal size, the
largest ``RATIO`` times the smallest; ``--sizes issue``: ``glmm_proxy.simulated_design``, the issue's own shape, 16
intercepts of s.d. 0.3 on geometric group sizes from 30 rows, 7 covariates, written non-centred with a half-normal
prior on the s.d., as ``glmm_centring.py`` fits it; ``--groups`` is ignored there). For each configuration and each
version one fresh process (so neither version's compilations serve the other; the two run at the same time, so their
seconds share the machine) builds the design and model (``mm.glmm``'s steps: ``formula_design``, ``glmm_model``,
centring ``"auto"``) and runs ``warmup.warmup`` as ``auto_sample`` would (4 chains, the default test and proposal); it
reports each phase's passes over ``N`` (rows read / ``N``), its seconds, and the largest distance between the two
versions' centres (``Warmup.centre``, the proxy's) in Laplace s.d.s. The versions are git revisions (``--before``,
default ``main``; ``--after``, default ``HEAD``), each read by ``git archive``:

    python benchmarks/glmm_warmup_passes.py --n 200000 --groups 1000 16 --sizes equal unequal \\
        --results docs/results/glmm_warmup_passes.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RATIO = 3000.0
"""``--sizes unequal``: the largest group's rows over the smallest's."""
PHASES = ("mode", "proxy", "influence", "tuning", "batch", "setup")
COLUMNS = [
    "N",
    "G",
    "sizes",
    "version",
    *(f"{p} passes" for p in PHASES),
    "total passes",
    "warm-up s",
    "centre off (s.d.)",
]


def sizes_for(n: int, groups: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Group sizes: ``glmm.py``'s ``equal``/``tail``, or ``unequal``: geometric weights, the largest ``RATIO`` times the
    smallest (16 groups at ``N = 2e5``: 41 % of the rows down to 28 rows)."""
    if kind != "unequal":
        from glmm import group_sizes

        return group_sizes(n, groups, kind, rng)
    w = rng.permutation(RATIO ** (-np.arange(groups) / max(groups - 1, 1)))
    sizes = np.maximum(np.round(w / w.sum() * n).astype(np.int64), 1)
    sizes[np.argmax(sizes)] += n - sizes.sum()
    return sizes


def worker(n: int, groups: int, kind: str, out: str) -> None:
    """One version's warm-up (module docstring), its phases' costs and mode written to ``out`` (JSON)."""
    import pandas as pd

    from minibatch_mcmc.interop.formula import formula_design
    from minibatch_mcmc.models.glmm import glmm_model

    if kind == "issue":
        from glmm_proxy import simulated_design

        from minibatch_mcmc.models.glmm import GLMMPrior

        prior = GLMMPrior(sd="half_normal", sd_scale=1.0)
        model, data = glmm_model(simulated_design(n), "bernoulli", centred=False, prior=prior)
        return finish(model, data, out)
    rng = np.random.default_rng(0)
    g = rng.permutation(np.repeat(np.arange(groups), sizes_for(n, groups, kind, rng))).astype(np.int32)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    eta = -0.5 + x @ np.array([0.5, -0.3, 0.2]) + rng.normal(0.0, 0.5, groups)[g]
    df = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "g": g})
    df["y"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    fitted = formula_design("y ~ x1 + x2 + x3 + (1 | g)", df, "bernoulli")
    model, data = glmm_model(fitted.design, fitted.family, centred="auto")
    finish(model, data, out)


def finish(model, data, out: str) -> None:
    """The warm-up as ``auto_sample`` runs it, its phases' costs and mode written to ``out`` (JSON)."""
    import jax

    from minibatch_mcmc.models.glmm import initial_theta
    from minibatch_mcmc.warmup import warmup

    warm = warmup(model, data, initial_theta(model), key=jax.random.key(1), num_chains=4, num_samples=1000)
    summary = warm.summary()
    result = {
        "phases": {k: v["passes"] for k, v in summary["phases"].items()},
        "total": summary["total_passes"],
        "seconds": summary["total_seconds"],
        "mode": np.asarray(warm.centre, np.float64).tolist(),
        "sd": np.sqrt(np.diag(warm.covariance)).tolist(),
    }
    Path(out).write_text(json.dumps(result))


def main() -> None:
    """Each configuration, both versions; the table printed and (``--results``) saved after each."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[200_000])
    ap.add_argument("--groups", type=int, nargs="+", default=[1000])
    ap.add_argument("--sizes", nargs="+", default=["equal"], choices=("equal", "tail", "unequal", "issue"))
    ap.add_argument("--before", default="main", help="git revision of the 'before' version")
    ap.add_argument("--after", default="HEAD", help="git revision of the 'after' version")
    ap.add_argument("--name", default="glmm_warmup_passes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_results import add_results_option, save_rows
    from revisions import extract_sources, mode_gap, run_workers

    add_results_option(ap)
    args = ap.parse_args()
    if args.worker:
        worker(args.n[0], args.groups[0], args.sizes[0], args.out)
        return
    machine = f"{platform.machine()}, {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"
    rows, values = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        versions = extract_sources({"before": args.before, "after": args.after}, Path(tmp))
        for n in args.n:
            for groups, kind in zip(args.groups, args.sizes):
                got = run_workers(__file__, versions, ["--n", str(n), "--groups", str(groups), "--sizes", kind])
                off = mode_gap(got)
                for name, r in got.items():
                    row = [f"{n:.0e}", str(groups), kind, name]
                    row += [f"{r['phases'].get(p, float('nan')):.2f}" for p in PHASES]
                    row += [f"{r['total']:.2f}", f"{r['seconds']:.1f}", f"{off:.2f}"]
                    rows.append(row)
                    values[f"{args.name}.{n}.{groups}.{kind}.{name.split()[0]}.passes"] = f"{r['total']:.2f}"
                    print(dict(zip(COLUMNS, row)), flush=True)
                save_rows(args, COLUMNS, rows, values, machine, complete=False)
    save_rows(args, COLUMNS, rows, values, machine, complete=True)


if __name__ == "__main__":
    main()
