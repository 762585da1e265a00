"""What one ``auto_sample`` costs before and after tuning and sampling share one compiled kernel (issue 21).

Logistic regression (``make_logistic_data``, prior N(0, 10^2)), d = 10, N = ``--n``: ``auto_sample`` with 4 chains x
``--samples`` draws (MHminibatch m = 50, the default warm-up) for each of ``--proposals`` (the scale-tuned
proxy-gradient MALA and the proxy-HMC + random-walk mixture). ``before`` runs the source tree ``--before-src`` (e.g.
``git archive 3b73c49 src | tar -x -C /tmp/before``: one chain tuned on its own compiled window, then ``sample``
compiling the kernel again); ``after`` this tree (all chains tuned on the runner sampling then reuses). Each run is a
fresh process, so each pays its own compilations as a user's first fit does; the two alternate, ``--repeats`` times,
in turn order before/after then after/before, so the machine's load drifts over both alike. Per run: total seconds,
``Warmup.summary()`` phases (seconds, compile seconds, passes), sampling seconds (``result.wall_time``), compile
seconds in all, the block function's compilations (``after``), the tuned scale, the sampling acceptance rate and the
smallest bulk ESS, and the load average before and after.

    PYTHONPATH=src .venv/bin/python benchmarks/auto_sample_cost.py --before-src /tmp/before/src --results docs/results/auto_sample_cost.json
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
from bench_results import add_results_option, save, table

RUNS = [
    "proposal",
    "repeat",
    "variant",
    "total s",
    "warm-up s",
    "tuning s",
    "tuning compile s",
    "sampling s",
    "compile s",
    "compilations",
    "tuning passes",
    "scale",
    "accept",
    "min ESS",
    "load avg",
]
SUMMARY = [
    "proposal",
    "before total s",
    "after total s",
    "ratio after/before",
    "before tuning+sampling s",
    "after tuning+sampling s",
    "after warm-up s",
    "after sampling s",
]


def child(n: int, samples: int, proposal: str) -> dict:
    """One ``auto_sample`` in this process: its seconds, phases and compilations."""
    import arviz as az
    import jax
    import jax.numpy as jnp
    from jax import monitoring

    from minibatch_mcmc.models import logistic_regression, make_logistic_data
    from minibatch_mcmc.warmup import auto_sample

    compile_s = [0.0]
    events = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )
    monitoring.register_event_duration_secs_listener(
        lambda e, d, **_: compile_s.__setitem__(0, compile_s[0] + d) if e in events else None
    )
    data, _ = make_logistic_data(jax.random.key(0), n, 10)
    load = os.getloadavg()[0]
    c0, t0 = compile_s[0], time.perf_counter()
    res, w = auto_sample(
        logistic_regression(prior_scale=10.0),
        data,
        jnp.zeros(10),
        num_samples=samples,
        num_chains=4,
        key=0,
        progress=False,
        proposal=proposal,
    )
    total, compiled = time.perf_counter() - t0, compile_s[0] - c0
    runner = getattr(w, "runner", None)
    ess = az.ess(az.convert_to_dataset(np.asarray(res.positions)))
    return {
        "n": n,
        "proposal": proposal,
        "total_seconds": total,
        "compile_seconds": compiled,
        "summary": w.summary(),
        "sampling_seconds": float(res.wall_time),
        "compilations": None if runner is None else runner.compilations(),
        "scale": float(w.scale),
        "accept": float(np.mean(res.records["accepted"])),
        "min_ess": float(np.min(ess.to_array().values)),
        "load_average": [load, os.getloadavg()[0]],
    }


def run_child(variant: str, n: int, samples: int, proposal: str, before_src: str) -> dict:
    """``child`` in a fresh process on the ``before`` or this tree."""
    here = Path(__file__).resolve()
    src = before_src if variant == "before" else str(here.parents[1] / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(here.parent)]))
    out = subprocess.run(
        [sys.executable, str(here), "--child", str(n), str(samples), proposal],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]), variant=variant)


def run_row(r: dict, repeat: int) -> list[str]:
    """One run's row of the ``runs`` table."""
    tuning = r["summary"]["phases"]["tuning"]
    return [
        r["proposal"],
        str(repeat),
        r["variant"],
        f"{r['total_seconds']:.2f}",
        f"{r['summary']['total_seconds']:.2f}",
        f"{tuning['seconds']:.2f}",
        f"{tuning['compile_seconds']:.2f}",
        f"{r['sampling_seconds']:.2f}",
        f"{r['compile_seconds']:.2f}",
        str(r["compilations"]),
        f"{tuning['passes']:.2f}",
        f"{r['scale']:.3f}",
        f"{r['accept']:.3f}",
        f"{r['min_ess']:.0f}",
        f"{r['load_average'][0]:.1f}-{r['load_average'][1]:.1f}",
    ]


def summary_rows(runs: list[dict], proposals: list[str]) -> tuple[list[list[str]], dict]:
    """Per proposal, the medians over repeats of each variant's seconds, the ratio of medians, and the prose values."""
    rows, values = [], {}
    for p in proposals:
        med = {}
        for v in ("before", "after"):
            mine = [r for r in runs if r["proposal"] == p and r["variant"] == v]
            med[v] = {
                "total": float(np.median([r["total_seconds"] for r in mine])),
                "both": float(
                    np.median([r["summary"]["phases"]["tuning"]["seconds"] + r["sampling_seconds"] for r in mine])
                ),
                "warm": float(np.median([r["summary"]["total_seconds"] for r in mine])),
                "sampling": float(np.median([r["sampling_seconds"] for r in mine])),
            }
        ratio = med["after"]["total"] / med["before"]["total"]
        rows.append(
            [
                p,
                f"{med['before']['total']:.2f}",
                f"{med['after']['total']:.2f}",
                f"{ratio:.2f}",
                f"{med['before']['both']:.2f}",
                f"{med['after']['both']:.2f}",
                f"{med['after']['warm']:.2f}",
                f"{med['after']['sampling']:.2f}",
            ]
        )
        values.update(
            {
                f"auto_sample_cost.before_total_{p}": f"{med['before']['total']:.1f}",
                f"auto_sample_cost.after_total_{p}": f"{med['after']['total']:.1f}",
                f"auto_sample_cost.ratio_{p}": f"{ratio:.2f}",
            }
        )
    return rows, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--proposals", nargs="+", default=["langevin", "mixture"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--before-src", required="--child" not in sys.argv, help="source tree (its src/) before the shared runner"
    )
    parser.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    add_results_option(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), int(args.child[1]), args.child[2])))
        return
    runs, rows = [], []
    for k in range(args.repeats):
        for p in args.proposals:
            for v in ("before", "after") if k % 2 == 0 else ("after", "before"):
                r = run_child(v, args.n, args.samples, p, args.before_src)
                runs.append(dict(r, repeat=k))
                rows.append(run_row(r, k))
                print(" | ".join(rows[-1]), flush=True)
    summary, values = summary_rows(runs, args.proposals)
    for t in ([], SUMMARY, *summary):
        print(" | ".join(t))
    save(
        args.results,
        "auto_sample_cost",
        config=args,
        tables={"auto_sample_cost_runs": table(RUNS, rows), "auto_sample_cost_summary": table(SUMMARY, summary)},
        values=values,
        extra={"runs": runs},
    )


if __name__ == "__main__":
    main()
