"""What the warm-up's new checks (issue 19: no-mode check, multi-start mode search) cost on a well-behaved model.

Logistic regression (``make_logistic_data``, the peers benchmark's model) at ``N`` rows, ``d = 10``:
``auto_sample`` with the multi-start search on (``num_starts=8``, the default) and off (``num_starts=0``),
same seed, run alternately ``--repeats`` times. On a unimodal posterior the search finds no other mode,
so the draws are identical (checked) and ESS is the same; the cost is the extra warm-up seconds. The
table gives the median warm-up and sampling seconds of each, the ESS, and the ratio of ESS per second
with the warm-up counted (on / off).

    .venv/bin/python benchmarks/warmup_checks_cost.py [--n 100000] [--samples 2000] [--repeats 3] [--results FILE]
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

COLUMNS = ["N", "num_starts", "warm-up s", "sampling s", "min ESS", "ESS/s (with warm-up)"]


def one_run(data, d: int, samples: int, num_starts: int):
    """Seconds of warm-up and sampling, the draws, and min bulk ESS."""
    t0 = time.perf_counter()
    res, w = auto_sample(logistic_regression(prior_scale=10.0), data, jnp.zeros(d), num_samples=samples, num_chains=4, key=1,
                         progress=False, num_starts=num_starts)
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
    times = {0: [], 8: []}
    for _ in range(args.repeats):
        for starts in (0, 8):
            warm, run, draws, ess = one_run(data, args.d, args.samples, starts)
            times[starts].append((warm, run, ess, draws))
    assert np.array_equal(times[0][0][3], times[8][0][3]), "draws differ: the search found another mode"
    rows, rate = [], {}
    for starts in (0, 8):
        warm, run, ess = (float(np.median([t[i] for t in times[starts]])) for i in range(3))
        rate[starts] = ess / (warm + run)
        rows.append([str(args.n), str(starts), f"{warm:.1f}", f"{run:.1f}", f"{ess:.0f}", f"{rate[starts]:.1f}"])
    ratio = rate[8] / rate[0]
    print(" | ".join(COLUMNS))
    for r in rows:
        print(" | ".join(r))
    print(f"ESS/s with the checks / without: {ratio:.3f} (draws identical)")
    save(args.results, "warmup_checks_cost", config=args, tables={"cost": table(COLUMNS, rows)},
         values={"ess_per_s_ratio": round(ratio, 3)})


if __name__ == "__main__":
    main()
