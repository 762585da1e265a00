"""What the warm-up costs, phase by phase, before and after the lean warm-up of issue 21.

Logistic regression (``make_logistic_data``, prior N(0, 10^2)), d = 10, at each N of ``--sizes``: ``warmup`` then
``sample`` as ``auto_sample`` runs them (MHminibatch m=50, 4 chains x ``--samples`` draws), for each of
``--proposals`` (proxy-gradient MALA, whose scale is tuned, and proxy HMC, which has nothing to tune),
in a fresh process per setting, so that each pays its own compilations, as a user's first fit does:

* ``before``: the warm-up as it was before issue 21's lean warm-up, from the source tree ``--before-src`` (e.g.
  ``git archive fbe9fab src | tar -x -C /tmp/before``); without it, ``after`` alone (issue 30 removed the earlier
  search from the tree);
* ``after``: this tree's warm-up.

Per phase: passes over N (rows read / N), rows, seconds and, for ``after``, the seconds JAX spent compiling
(``samplers.phase_cost``; ``before`` gives the total compile seconds of its warm-up only); and the
compilations of the tuning window. The issue's targets: warm-up <= 3 passes over N and <= the sampling time of
4 x 2000 draws (``sampling s``, compilation included, as the user waits for it). The machine's load average
is recorded with each run: on a shared machine the seconds carry its noise.

    PYTHONPATH=src .venv/bin/python benchmarks/warmup_cost.py --before-src /tmp/before/src --results docs/results/warmup_cost.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_results import add_results_option, save, table

COLUMNS = ["N", "warm-up", "proposal", "phase", "passes", "rows", "seconds", "compile s"]
TOTALS = [
    "N",
    "warm-up",
    "proposal",
    "passes",
    "warm-up s",
    "compile s",
    "tuning compilations",
    "sampling s (4 x draws)",
    "load avg",
]


def child(n: int, variant: str, samples: int, proposal: str) -> dict:
    """One setting in this process: per-phase costs of the warm-up and the sampling seconds."""
    import jax
    import jax.numpy as jnp
    from jax import monitoring

    wm = importlib.import_module(
        "minibatch_mcmc.warmup.api"
    )  # the module defining the warm-up (mm.warmup is the function)
    from minibatch_mcmc.models import logistic_regression, make_logistic_data
    from minibatch_mcmc.samplers.driver import sample

    compile_s = [0.0]
    events = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )
    monitoring.register_event_duration_secs_listener(
        lambda e, d, **_: compile_s.__setitem__(0, compile_s[0] + d) if e in events else None
    )
    tunings = []
    original = wm.tune

    def counted(*args, **kwargs):
        out = original(*args, **kwargs)
        tuned = out[0] if isinstance(out, tuple) else out  # this tree's tune returns (result, runner)
        tunings.append(getattr(tuned, "compilations", None))
        return out

    wm.tune = counted
    data, _ = make_logistic_data(jax.random.key(0), n, 10)
    load = os.getloadavg()[0]
    c0, t0 = compile_s[0], time.perf_counter()
    w = wm.warmup(logistic_regression(prior_scale=10.0), data, jnp.zeros(10), key=0, proposal=proposal)
    warm_s, warm_compile = time.perf_counter() - t0, compile_s[0] - c0
    res = sample(
        logistic_regression(prior_scale=10.0),
        data,
        wm.dispersed_starts(w, 4, jax.random.key(1)),
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=samples,
        num_chains=4,
        key=2,
        batched_init=True,
        progress=False,
    )
    phases = {
        k: {
            "passes": c.data / n,
            "rows": int(c.data),
            "seconds": float(c.seconds),
            "compile_seconds": float(getattr(c, "compile_seconds", float("nan"))),
        }
        for k, c in w.cost.items()
    }
    return {
        "n": n,
        "variant": variant,
        "proposal": proposal,
        "phases": phases,
        "warmup_seconds": warm_s,
        "warmup_compile_seconds": warm_compile,
        "passes": sum(p["passes"] for p in phases.values()),
        "tuning_compilations": tunings[0] if tunings else None,
        "sampling_seconds": float(res.wall_time),
        "load_average": [load, os.getloadavg()[0]],
    }


def run_child(n: int, variant: str, samples: int, proposal: str, before_src: str | None) -> dict:
    """``child`` in a fresh process (its own compilations), on the ``before`` tree where one is given."""
    here = Path(__file__).resolve()
    src = before_src if (variant == "before" and before_src) else str(here.parents[1] / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(here.parent)]))
    out = subprocess.run(
        [sys.executable, str(here), "--child", str(n), variant, str(samples), proposal],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument(
        "--proposals",
        nargs="+",
        default=["langevin", "proxy_hmc"],
        help="warmup proposals: langevin (scale-tuned) and proxy_hmc (the default, no tuning)",
    )
    parser.add_argument("--before-src", default=None, help="source tree (its src/) of the warm-up before issue 21")
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    add_results_option(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1], int(args.child[2]), args.child[3])))
        return
    variants = ("before", "after") if args.before_src else ("after",)
    runs = [
        run_child(n, v, args.samples, p, args.before_src) for n in args.sizes for p in args.proposals for v in variants
    ]
    rows, totals, values = [], [], {}
    for r in runs:
        for k, p in r["phases"].items():
            rows.append(
                [
                    str(r["n"]),
                    r["variant"],
                    r["proposal"],
                    k,
                    f"{p['passes']:.2f}",
                    f"{p['rows']:,}",
                    f"{p['seconds']:.2f}",
                    "" if p["compile_seconds"] != p["compile_seconds"] else f"{p['compile_seconds']:.2f}",
                ]
            )
        totals.append(
            [
                str(r["n"]),
                r["variant"],
                r["proposal"],
                f"{r['passes']:.2f}",
                f"{r['warmup_seconds']:.2f}",
                f"{r['warmup_compile_seconds']:.2f}",
                str(r["tuning_compilations"]),
                f"{r['sampling_seconds']:.2f}",
                f"{r['load_average'][0]:.1f}-{r['load_average'][1]:.1f}",
            ]
        )
        tag = f"{r['variant']}_{r['proposal']}_{r['n']}"
        values[f"passes_{tag}"] = round(r["passes"], 2)
        values[f"warmup_s_{tag}"] = round(r["warmup_seconds"], 2)
        values[f"sampling_s_{tag}"] = round(r["sampling_seconds"], 2)
        if r["variant"] == "after":
            values[f"passes_target_met_{r['proposal']}_{r['n']}"] = r["passes"] <= 3
            values[f"time_target_met_{r['proposal']}_{r['n']}"] = r["warmup_seconds"] <= r["sampling_seconds"]
    for t in (COLUMNS, *rows, [], TOTALS, *totals):
        print(" | ".join(t))
    save(
        args.results,
        "warmup_cost",
        config=args,
        tables={"phases": table(COLUMNS, rows), "totals": table(TOTALS, totals)},
        values=values,
        extra={"runs": runs},
    )


if __name__ == "__main__":
    main()
