"""Where a level-by-level Gibbs sweep's time goes (issue 31): each step of ``warmup.group_gibbs.sweep``, timed alone.

On ``benchmarks/glmm.py``'s rows (``--sizes tail``, logistic, ``y ~ x1 + x2 + x3 + (1 | g)``), at ``mm.glmm``'s start
(``initial_theta``, chains spread as ``gibbs_route`` spreads them), every piece compiled once and then timed as the
median of ``--reps`` calls, vmapped over ``--chains`` chains as ``gibbs_route.block_runner`` runs them:

- ``row derivatives``: each row's log density and its first two derivatives in ``eta`` (one pass's work);
- ``effects step``: step 1, every level's Newton MH move (two level fits, two passes);
- ``globals fit``: step 4's gradient and clipped Hessian at one point (``globals_fit``), and the same without the
  rows' Hessian term (``J' H J`` over the rows: ``J`` each row's ``d(eta, phi)/dx``, ``H`` its second derivatives);
  and with it as the 3-operand ``einsum`` the code used before (the same sum in another order);
- ``globals step``: step 4 (two fits);
- ``sweep``: steps 1 to 4 (the data-free steps 2 and 3 are the rest);
- ``spread weights``: the warm-up's per-block re-read of step 4's weights.

The process's peak resident memory while the pieces ran (``glmm.PeakRSS``; the rows, the DataFrame and the design
count) is the value ``NAME.peak_rss_gb``; the rows are each compiled piece's argument, as ``gibbs_route`` passes them
(not a constant baked into each compiled piece). Each pass reads the
rows in chunks of ``group_gibbs.ROW_CHUNK``, each chain holding one chunk's row terms.

    python benchmarks/gibbs_sweep_profile.py --n 1000000 --groups 10000 --results docs/results/gibbs_sweep_profile.json
"""

from __future__ import annotations

import argparse
import inspect
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, machine_line, save_rows
from glmm import PeakRSS, formula, simulate

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.interop.formula import formula_design
from minibatch_mcmc.models.glmm import glmm_model, initial_theta
from minibatch_mcmc.warmup import group_gibbs as gg
from minibatch_mcmc.warmup.gibbs_route import INIT_RADIUS, chain_spreads, problem_for

COLUMNS = ["N", "G", "chains", "step", "ms per call (all chains)", "passes over N per chain"]


def timed(fns: list, args: tuple, reps: int) -> list[float]:
    """Median milliseconds per call of each compiled function in ``fns`` on ``args`` (each compiled and run once
    first), the calls interleaved so that a shared machine's changing load falls on all of them alike."""
    for fn in fns:
        jax.block_until_ready(fn(*args))
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            out.append(time.perf_counter() - start)
    return [float(np.median(t)) * 1e3 for t in times]


def variant(replacement: str) -> object:
    """``globals_fit`` with the rows' Hessian term ``J' H J`` computed as ``replacement`` (to time that term)."""
    src = inspect.getsource(gg.globals_fit)
    old = "h = rows_j.reshape(-1, m).T @ weighted.reshape(-1, m)"
    if old not in src:
        raise RuntimeError("globals_fit no longer has the product this profile times")
    space = dict(vars(gg))
    exec(src.replace(old, replacement), space)  # noqa: S102 (a profiling variant)
    return space["globals_fit"]


def main() -> None:
    """Time each piece and save the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--name", default="gibbs_sweep_profile")
    add_results_option(ap)
    args = ap.parse_args()
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    df = simulate(args.n, args.groups, "bernoulli", "tail", False)
    model, data = glmm_model(formula_design(formula(False), df, "bernoulli").design, "bernoulli")
    arrays = as_data_source(data).arrays()
    problem = problem_for(model, arrays)
    rows = jax.tree_util.tree_map(jnp.asarray, arrays)
    theta0 = jnp.asarray(initial_theta(model))
    key = jax.random.PRNGKey(0)
    starts = theta0[None] + jax.random.uniform(key, (args.chains, theta0.size), theta0.dtype, -INIT_RADIUS, INIT_RADIUS)
    states = jax.vmap(lambda th: gg.from_flat(problem.layout, th))(starts)
    spread = chain_spreads(problem, True)(states, rows)
    rho = jnp.zeros((args.chains, len(problem.layout.levels) + 1))
    keys = jax.random.split(key, args.chains)

    def fit_with(fit_fn):
        return jax.jit(
            jax.vmap(lambda st, sp, d: fit_fn(problem, st, d, sp)(gg.globals_vector(st)), in_axes=(0, 0, None))
        )

    pieces = [
        (
            "row derivatives",
            jax.jit(jax.vmap(lambda st, d: gg.row_terms(problem, st, d), in_axes=(0, None))),
            (states, rows),
            1,
        ),
        (
            "effects step",
            jax.jit(jax.vmap(lambda k, st, r, d: gg.effects_step(problem, k, st, 0, r[0], d), in_axes=(0, 0, 0, None))),
            (keys, states, rho, rows),
            2,
        ),
        (
            (
                "globals fit",
                "globals fit without the rows' Hessian",
                "globals fit, J' H J as one 3-operand einsum (before)",
            ),
            [
                fit_with(gg.globals_fit),
                fit_with(variant("h = jnp.zeros((m, m), eta.dtype)")),
                fit_with(variant('h = jnp.einsum("nam,abn,nbc->mc", rows_j, hess, rows_j)')),
            ],
            (states, spread, rows),
            1,
        ),
        (
            "globals step",
            jax.jit(
                jax.vmap(
                    lambda k, st, r, sp, d: gg.globals_step(problem, k, st, r[-1], d, sp), in_axes=(0, 0, 0, 0, None)
                )
            ),
            (keys, states, rho, spread, rows),
            2,
        ),
        (
            "sweep",
            jax.jit(jax.vmap(lambda k, st, r, sp, d: gg.sweep(problem, k, st, r, d, sp), in_axes=(0, 0, 0, 0, None))),
            (keys, states, rho, spread, rows),
            gg.passes_per_sweep(problem.layout),
        ),
        ("spread weights", chain_spreads(problem, True), (states, rows), 1),
    ]
    rows_out, values = [], {}
    with PeakRSS() as mem:
        for names, fns, fn_args, passes in pieces:
            names, fns = (names, fns) if isinstance(names, tuple) else ((names,), [fns])
            for name, ms in zip(names, timed(fns, fn_args, args.reps)):
                rows_out.append(
                    [f"{args.n:.0e}", f"{args.groups:.0e}", str(args.chains), name, f"{ms:.0f}", str(passes)]
                )
                key = re.sub(r"\W+", "_", name).strip("_")  # a key render_results.py's value markers accept
                values[f"{args.name}.{key}_ms"] = f"{ms:.0f}"
                print(" | ".join(rows_out[-1]), flush=True)
    values[f"{args.name}.peak_rss_gb"] = f"{mem.peak:.2f}"
    print(f"peak RSS {mem.peak:.2f} GB (the process's, rows and design included)", flush=True)
    save_rows(args, COLUMNS, rows_out, values, machine, complete=True)


if __name__ == "__main__":
    main()
