"""Issue 31's stuck intercept and heaviest level at a cheap size: the level-by-level Gibbs route before and after.

At ``N = 10^7``, ``G = 10^5`` (``glmm_large.py``) the intercept and the effect of the level with the most rows (63k)
mixed far worse than everything else. The same shows at ``N`` a tenth of that when one level holds ``--heavy`` of the
rows (default 5%: ``5 x 10^4`` rows at ``N = 10^6``), the rest the long tail of ``glmm.py``'s ``--sizes tail``
(logistic, ``eta = -0.5 + x . (0.5, -0.3, 0.2) + u[g]``, group s.d. 0.5, the same seeds). One run, the same rows and
keys, ``warmup.gibbs_route.group_gibbs`` three ways:

- ``before``: the sweep as it was (``climb_levels=False``, ``centre_location=False``);
- ``climb``: the warm-up's climbing sweeps also climb each level whose Newton point lies over ``FAR_SDS`` of its
  Laplace s.d.s away (``group_gibbs.effects_step``), ``centre_location=False``;
- ``after``: that and step 4 with the effects partly centred in location (``warmup.glmm_location``): the defaults.

Per variant: bulk ESS per kept sweep (all chains) and split R-hat of the intercept, of the heaviest level's effect,
of the group s.d., and the least ESS / largest R-hat over every parameter; the heaviest level's ``intercept + u``
(which its rows pin) per chain after the warm-up; wall and CPU seconds of the variant (the box's load beside them):

    python benchmarks/glmm_ridge.py --n 1000000 --groups 20000 --heavy 0.03 --chains 4 --warmup 50 --draws 50 \
        --results docs/results/glmm_ridge.json
    python benchmarks/glmm_ridge.py --n 1000000 --groups 100000 --heavy 0.05 --chains 4 --warmup 50 --draws 50 \
        --variants before after --name glmm_ridge_g1e5 --results docs/results/glmm_ridge_g1e5.json

(at ``G = 2 x 10^4`` every chain of ``before`` happened to start on the good side of the heaviest level's mode; at
``G = 10^5`` one did not).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import arviz as az
import jax
import numpy as np
from bench_results import add_results_option, machine_line, save, table
from glmm import GROUP_SD, group_sizes

from minibatch_mcmc.models.glmm import glmm_model, initial_theta
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor
from minibatch_mcmc.warmup.gibbs_route import group_gibbs

VARIANTS = {
    "before": {"climb_levels": False, "centre_location": False},
    "climb": {"climb_levels": True, "centre_location": False},
    "after": {"climb_levels": True, "centre_location": True},
}
COLUMNS = [
    "variant",
    "intercept ESS/sweep",
    "intercept R-hat",
    "heaviest u ESS/sweep",
    "heaviest u R-hat",
    "sd ESS/sweep",
    "sd R-hat",
    "least ESS/sweep (all)",
    "largest R-hat (all)",
    "heaviest intercept + u per chain (last draw)",
    "seconds",
    "CPU s",
    "load",
]


def heavy_sizes(n: int, groups: int, heavy: float, rng: np.random.Generator) -> np.ndarray:
    """``glmm.group_sizes``'s long tail with its largest level raised to ``heavy * n`` rows, taken from the others in
    proportion to their rows beyond the first (every level keeps at least 1)."""
    sizes = group_sizes(n, groups, "tail", rng)
    big = int(np.argmax(sizes))
    extra = int(heavy * n) - int(sizes[big])
    if extra > 0:
        others = np.arange(groups) != big
        spare = sizes[others] - 1
        take = np.floor(spare * extra / spare.sum()).astype(np.int64)
        sizes[others] -= take
        sizes[big] += int(take.sum())
    return sizes


def simulate(n: int, groups: int, heavy: float) -> tuple[GLMMDesign, np.ndarray]:
    """The rows as a ``GLMMDesign`` (``y ~ x1 + x2 + x3 + (1 | g)``, logistic) and the level sizes."""
    rng = np.random.default_rng(0)
    sizes = heavy_sizes(n, groups, heavy, rng)
    g = rng.permutation(np.repeat(np.arange(groups), sizes)).astype(np.int32)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    eta = -0.5 + x @ np.array([0.5, -0.3, 0.2]) + rng.normal(0.0, GROUP_SD, groups)[g]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float32)
    design = np.c_[np.ones(n, np.float32), x]
    factor = GroupFactor("g", g, np.ones((n, 1), np.float32), tuple(f"g{k}" for k in range(groups)), ("1",))
    return GLMMDesign(y=y, x=design, fixed=("Intercept", "x1", "x2", "x3"), factors=(factor,)), sizes


def mixing(draws: np.ndarray) -> tuple[float, float]:
    """Bulk ESS per draw (all chains) and split R-hat of one parameter's ``(chains, draws)``."""
    return float(az.ess(draws, method="bulk")) / draws.size, float(az.rhat(draws))


def run_variant(model, data, sizes: np.ndarray, args, options: dict) -> tuple[list, dict]:
    """One variant's row and its values."""
    start, cpu = time.perf_counter(), time.process_time()
    result, _ = group_gibbs(
        model,
        data,
        initial_theta(model),
        num_samples=args.draws,
        num_chains=args.chains,
        key=jax.random.PRNGKey(1),
        num_warmup=args.warmup,
        **options,
    )
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    big = int(np.argmax(sizes))
    pos = {k: np.asarray(v, np.float64) for k, v in result.positions.items()}
    intercept, u_big, sd = pos["beta"][..., 0], pos["u_g"][..., big, 0], pos["sd_g"][..., 0]
    flat = np.concatenate([pos["beta"], pos["u_g"][..., 0], pos["sd_g"]], axis=-1)
    every = {"v": flat}
    ess = np.asarray(az.ess(every, method="bulk")["v"]) / (flat.shape[0] * flat.shape[1])
    rhat = np.asarray(az.rhat(every)["v"])
    stats = [mixing(intercept), mixing(u_big), mixing(sd)]
    pinned = " ".join(f"{c:.3f}" for c in (intercept + u_big)[:, -1])
    cells = [f"{v:.3f}" for pair in stats for v in pair]
    load = os.getloadavg()[0]
    row = [*cells, f"{ess.min():.3f}", f"{rhat.max():.3f}", pinned, f"{seconds:.0f}", f"{cpu:.0f}", f"{load:.1f}"]
    names = ("intercept", "heaviest", "sd")
    values = {f"{n}_{k}": f"{v:.3f}" for n, pair in zip(names, stats) for k, v in zip(("ess", "rhat"), pair)}
    values.update(min_ess=f"{ess.min():.3f}", max_rhat=f"{rhat.max():.3f}")
    return row, values


def main() -> None:
    """Every variant on the same rows; the table printed and (``--results``) saved."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--heavy", type=float, default=0.05, help="the largest level's share of the rows")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--draws", type=int, default=50)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--name", default="glmm_ridge")
    add_results_option(ap)
    args = ap.parse_args()
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    design, sizes = simulate(args.n, args.groups, args.heavy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, data = glmm_model(design, "bernoulli")
    print(f"heaviest level {int(sizes.max())} rows, median {np.median(sizes):.0f}", flush=True)
    rows, values = [], {"heaviest_rows": str(int(sizes.max()))}
    for name in args.variants:
        row, found = run_variant(model, data, sizes, args, VARIANTS[name])
        rows.append([name, *row])
        values.update({f"{args.name}.{name}.{k}": v for k, v in found.items()})
        print(" | ".join(rows[-1]), flush=True)
    values = {k if k.startswith(args.name) else f"{args.name}.{k}": v for k, v in values.items()}
    extra = {"machine": machine, "load average at end": os.getloadavg()[0]}
    save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values, extra=extra)


if __name__ == "__main__":
    main()
