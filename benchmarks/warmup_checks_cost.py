"""What issue 19's checks cost on a well-behaved model: multi-start search, influential-rows pass, proxy check.

Logistic regression (``make_logistic_data``, the peers benchmark's model) at ``N`` rows, ``d = 10``:
``auto_sample`` (its default proposal and test: proxy-gradient MALA and MHminibatch when
``docs/results/warmup_checks_cost.json`` was measured, proxy HMC and the penalty test since issue 21) with all of issue 19's protections on (the defaults: ``num_starts=8``, ``stratum=True``,
``check_draws=100``) and off (``num_starts=0, stratum=False, check_draws=0``), same seed, run alternately
``--repeats`` times. On a unimodal posterior with no influential rows the search finds no other mode and the
stratum is empty, so the draws are identical (checked) and ESS is the same; the cost is the extra warm-up
and check seconds. The table gives the median warm-up (check included), sampling seconds, ESS, and ESS per
second with the warm-up counted; the results file records the load average (on a shared machine the
ratio carries its noise).

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/warmup_checks_cost.py --results docs/results/warmup_checks_cost.json
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup import auto_sample

COLUMNS = ["N", "protections", "warm-up + check s", "sampling s", "min ESS", "ESS/s (with warm-up)"]
SETTINGS = {"off": {"num_starts": 0, "stratum": False, "check_draws": 0}, "on": {}}
"""``auto_sample`` options of each setting (``on``: the defaults)."""


def one_run(data, d: int, samples: int, setting: str):
    """Seconds of warm-up (and check) and sampling, the draws, and min bulk ESS."""
    t0 = time.perf_counter()
    res, w = auto_sample(
        logistic_regression(prior_scale=10.0),
        data,
        jnp.zeros(d),
        num_samples=samples,
        num_chains=4,
        key=1,
        progress=False,
        **SETTINGS[setting],
    )
    total = time.perf_counter() - t0
    draws = np.asarray(res.positions)
    ess = float(np.min(check_moments(draws, draws.mean(axis=(0, 1)), draws.var(axis=(0, 1))).ess))
    return total - res.wall_time, res.wall_time, draws, ess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    add_results_option(parser)
    args = parser.parse_args()
    data, _ = make_logistic_data(jax.random.key(0), args.n, args.d)
    times = {"off": [], "on": []}
    for _ in range(args.repeats):
        for setting in times:
            warm, run, draws, ess = one_run(data, args.d, args.samples, setting)
            times[setting].append((warm, run, ess, draws))
    assert np.array_equal(times["off"][0][3], times["on"][0][3]), "draws differ: a mode or a stratum was found"
    rows, rate = [], {}
    for setting in times:
        warm, run, ess = (float(np.median([t[i] for t in times[setting]])) for i in range(3))
        rate[setting] = ess / (warm + run)
        rows.append([str(args.n), setting, f"{warm:.1f}", f"{run:.1f}", f"{ess:.0f}", f"{rate[setting]:.1f}"])
    ratio = rate["on"] / rate["off"]
    print(" | ".join(COLUMNS))
    for r in rows:
        print(" | ".join(r))
    print(f"ESS/s with the checks / without: {ratio:.3f} (draws identical)")
    save(
        args.results,
        "warmup_checks_cost",
        config=args,
        tables={"cost": table(COLUMNS, rows)},
        values={"ess_per_s_ratio": round(ratio, 3)},
    )


if __name__ == "__main__":
    main()
