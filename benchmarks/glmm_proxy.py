"""Rows read per test and acceptance of ``auto_sample`` on a simulated hierarchical logistic regression (issue 31's
shape: 16 groups of very unequal size down to ~30 rows, group s.d. 0.3, 7 fixed effects besides the intercept,
non-centred), with the GLMM proxy in predictor space against the dense Taylor proxy in ``theta``.

    PYTHONPATH=src python benchmarks/glmm_proxy.py --rows 50000 --proxy glmm [--centred auto|true|false] [--as-written] [--newton-steps 50]

``--proxy taylor`` drops the model's GLMM structure (``Model.glmm = None``) so the warm-up builds the dense proxy.
Prints one JSON line: the warm-up's phases (rows, passes), the proposal, acceptance, rows per test, wall seconds,
and the posterior means and s.d.s of ``beta[0]`` and ``sd_g``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import minibatch_mcmc as mm
from minibatch_mcmc.models.glmm import GLMMPrior, glmm_model, initial_theta
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor

GROUPS = 16
FIXED = 7
GROUP_SD = 0.3
SMALLEST = 30


def group_sizes(n: int, groups: int = GROUPS, smallest: int = SMALLEST) -> np.ndarray:
    """Geometric group sizes from ``smallest`` rows up, summing to ``n``."""
    ratio = (n / smallest) ** (1.0 / (groups - 1))
    raw = smallest * ratio ** np.arange(groups)
    sizes = np.maximum(np.round(raw / raw.sum() * n).astype(int), smallest)
    sizes[-1] += n - sizes.sum()
    return sizes


def simulated_design(n: int, seed: int = 0) -> GLMMDesign:
    """The issue's shape: intercept ``mu``, 7 standard normal covariates, 16 group intercepts of s.d. 0.3."""
    rng = np.random.default_rng(seed)
    sizes = group_sizes(n)
    codes = rng.permutation(np.repeat(np.arange(GROUPS), sizes)).astype(np.int32)
    x = np.c_[np.ones(n), rng.normal(size=(n, FIXED))]
    beta = np.r_[-1.0, rng.normal(0.0, 0.3, FIXED)]
    eta = x @ beta + GROUP_SD * rng.normal(size=GROUPS)[codes]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float64)
    factor = GroupFactor("g", codes, np.ones((n, 1)), tuple(str(g) for g in range(GROUPS)), ("1",))
    return GLMMDesign(y=y, x=x, fixed=("mu",) + tuple(f"x{j}" for j in range(FIXED)), factors=(factor,))


def main() -> None:
    """Fit once and print the JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--proxy", choices=("glmm", "taylor"), default="glmm")
    parser.add_argument("--centred", choices=("auto", "true", "false"), default="false")
    parser.add_argument("--as-written", action="store_true", help="sample as written (the pilot's weights otherwise)")
    parser.add_argument("--newton-steps", type=int, default=10)
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args()
    centred = {"auto": "auto", "true": True, "false": False}[args.centred]
    model, data = glmm_model(
        simulated_design(args.rows),
        "bernoulli",
        centred=centred,
        prior=GLMMPrior(sd="half_normal", sd_scale=1.0),
        sample_as_written=args.as_written,
    )
    theta0 = initial_theta(model)
    if args.proxy == "taylor":
        model = model._replace(glmm=None)
    start = time.perf_counter()
    result, warm = mm.auto_sample(
        model,
        data,
        theta0,
        num_samples=args.samples,
        num_chains=4,
        key=0,
        progress=False,
        newton_steps=args.newton_steps,
    )
    post = result.summary()["posterior"]
    print(
        json.dumps(
            {
                "rows": args.rows,
                "proxy": type(warm.proxy).__name__,
                "centred": args.centred,
                "as_written": args.as_written,
                "kind": warm.kind,
                "stratum": 0 if warm.influence is None else int(warm.influence.rows.size),
                "warmup": {k: [int(v.data), round(float(v.passes), 2)] for k, v in warm.cost.items()},
                "acceptance": float(np.mean(result.records["accepted"])),
                "rows_per_test": float(np.mean(result.records["batch_size"]) + np.mean(result.records["hidden_data"])),
                "seconds": round(time.perf_counter() - start, 1),
                "beta0": [float(post.loc["beta[0]", "mean"]), float(post.loc["beta[0]", "sd"])],
                "sd_g": [float(post.loc["sd_g[0]", "mean"]), float(post.loc["sd_g[0]", "sd"])],
            }
        )
    )


if __name__ == "__main__":
    main()
