"""Every decision of a run audited in float64: the run's test, the check's exact twin and the sizing's prediction.

On ``heavy_tails.py``'s ``robust_nu`` case (or another of its cases), one method's run (warm-up key 0, the sized
penalty test, 4 chains from Laplace starts, key 1, as ``heavy_tails.py`` runs it), then:

- the run's steps in the second half of each chain (``--audit`` of them, evenly spaced): each step's candidate and
  data-free terms (the run's kernel proposing, ``exact_twin.ProposeOnly``), the exact ``Delta`` recomputed in float64 by
  numpy/scipy from the rows (not the library's log-likelihood), and the exact decision ``Delta > log u`` on the run's
  uniform: the measured per-step error is the fraction of steps whose recorded decision differs from it (and, less
  noisy, the mean of ``|a(delta* - u_B) - a(Delta)|`` over the steps, ``a(x) = min(1, e^x)``, the figure the sizing
  predicts);
- the check's twin (``exact_twin.exact_continuation`` on the run's draws and keys, as ``posterior_error`` runs it):
  every step whose decisions differed classified by the float64 decision (the twin's wrong, or the run's);
- the sizing's prediction (``warmup.step_error``) at the Laplace-drawn moves it uses and at the run's own audited moves,
  from the terms as the test reads them (``batch_choice.Terms.read``) and with each term within its row's float32
  resolution counted as 0 (``Terms.exact``: what the sizing read before issue 32).

    .venv/bin/python benchmarks/twin_gap.py --n 300000 [--case robust_nu] [--method uniform] [--audit 2000] \
        [--results docs/results/twin_gap_3e5.json]
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from heavy_tails import CASES, method_estimator, run_method
from jax.flatten_util import ravel_pytree
from scipy.special import gammaln

from minibatch_mcmc.acceptance.penalty import SIGMA_MAX
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.diagnostics.exact_twin import (
    ProposeOnly,
    coupled_threshold,
    exact_continuation,
    from_the_run,
    residual_pass,
    start_steps,
)
from minibatch_mcmc.samplers.kernel import build_kernel
from minibatch_mcmc.samplers.keys import as_run_key, split_step, step_keys
from minibatch_mcmc.warmup import warmup
from minibatch_mcmc.warmup.batch_choice import ROWS, laplace_pairs, residual_matrix
from minibatch_mcmc.warmup.step_error import accept, orders, penalty_np, step_error

COLUMNS = ["figure", "value"]
CHECK_STARTS, CHECK_STEPS = 100, 16  # heavy_tails.py's check: 100 starts, posterior_error's 16 steps


def log_prior64(theta: np.ndarray) -> np.ndarray:
    """``robust_nu``'s log prior (with the logs' Jacobians) in float64, per row of ``theta`` ``(k, 6)``."""
    beta, ls, ln = theta[:, :4], theta[:, 4], theta[:, 5]
    return -0.5 * np.sum((beta / 10.0) ** 2, axis=1) - 0.5 * (np.exp(ls) / 50.0) ** 2 + ls + 2.0 * ln - 0.1 * np.exp(ln)


def log_lik_sum64(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``sum_i log StudentT(y_i | nu, x_i beta, sigma)`` in float64 for each row of ``theta`` ``(k, 6)``."""
    out = np.empty(theta.shape[0])
    for j, t in enumerate(theta):
        nu, ls = np.exp(t[5]), t[4]
        z = (y - x @ t[:4]) * np.exp(-ls)
        shared = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi) - ls
        out[j] = y.size * shared - 0.5 * (nu + 1.0) * np.sum(np.log1p(z * z / nu))
    return out


def proposed(model, w, estimator, test, n, run_key, chains, rows, xs, cs, ss):
    """For the run's steps ``ss`` of chains ``cs`` from states ``xs`` (flat): the candidate (flat), ``psi`` less the
    prior difference (the proposal's log ratio), the control variate's known sum and ``log u`` (the run's uniform)."""
    kernel = build_kernel(model, w.proposal, ProposeOnly(known=False), n, estimator)
    unravel = ravel_pytree(w.centre)[1]

    def one(x, c, s, rows):
        key = step_keys(run_key, s, chains)[c]
        state = kernel.init(unravel(x))
        moved, outcome = kernel.step(key, state, rows, jnp.float32(1.0))
        log_q = outcome.delta_star - (moved.log_prior - state.log_prior)
        known = estimator.known_sum(state.position, moved.position)
        tau = coupled_threshold(test, split_step(key)[1], jnp.float32)
        return ravel_pytree(moved.position)[0], log_q, known, tau

    got = jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None)))(jnp.asarray(xs, jnp.float32), cs, ss, rows)
    return tuple(np.asarray(g, np.float64) for g in got)


def full_delta(model, estimator, n, centre, rows, xs: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``sum_i`` of the estimator's terms over every row for each pair, in float32 as the twin sums them
    (``exact_twin.residual_pass``: with ``centre`` each term within its row's float32 resolution counted as 0)."""
    unravel = ravel_pytree(jnp.zeros(xs.shape[1], jnp.float32))[1]
    run = residual_pass(model, estimator, estimator.population_size(n), centre, 4096)
    f = jax.jit(lambda r, a, b: run(estimator.population(r), jax.vmap(unravel)(a), jax.vmap(unravel)(b)))
    out = [
        np.asarray(f(rows, jnp.asarray(xs[i : i + 8], jnp.float32), jnp.asarray(cand[i : i + 8], jnp.float32))[0])
        for i in range(0, len(xs), 8)
    ]
    return np.concatenate(out).astype(np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--case", default="robust_nu", choices=["robust_nu"])
    parser.add_argument("--method", default="uniform", choices=["uniform", "importance", "unsized"])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--audit", type=int, default=2000, help="run steps audited in float64")
    parser.add_argument("--name", default="twin_gap")
    add_results_option(parser)
    args = parser.parse_args()
    t0 = time.perf_counter()
    model, data, theta0 = CASES[args.case](args.n, np.random.default_rng(0))
    x64, y64 = data["x"].astype(np.float64), data["y"].astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = warmup(model, data, jnp.asarray(theta0, jnp.float32), key=0)
    est, note = method_estimator(args.method, model, data, w)
    out = run_method(model, data, w, est, 1, args.draws, 0.0, size=args.method != "unsized", check=False)
    res, test = out["result"], out["test"]
    print(
        f"run: m={test.batch_size} predicted {out['predicted']:.3g} acc {out['acc']:.3f} ({time.perf_counter() - t0:.0f} s)"
    )
    draws = np.asarray(res.kernel_positions, np.float64)
    rec = {k: np.asarray(v) for k, v in res.records.items()}
    chains, samples = draws.shape[:2]
    run_key, rows = as_run_key(1, chains), jax.tree_util.tree_map(jnp.asarray, data)

    # every audited step: its candidate, the float64 Delta and the exact decision on the run's uniform
    grid = np.array([(c, s) for c in range(chains) for s in range(samples // 2, samples)])
    grid = grid[np.unique(np.linspace(0, len(grid) - 1, min(args.audit, len(grid))).round().astype(int))]
    cs, ss = grid[:, 0].astype(np.int32), grid[:, 1].astype(np.int32)
    xs = draws[cs, ss - 1]
    cand, log_q, known, tau = proposed(model, w, est, test, args.n, run_key, chains, rows, xs, cs, ss)
    run_acc = rec["accepted"][cs, ss]
    moved_ok = np.all(np.isclose(draws[cs, ss][run_acc], cand[run_acc], rtol=1e-5, atol=1e-6))
    delta = log_prior64(cand) - log_prior64(xs) + log_q + log_lik_sum64(cand, x64, y64) - log_lik_sum64(xs, x64, y64)
    exact = delta > tau
    ds, s2, count = rec["delta_star"][cs, ss], rec["s2"][cs, ss], rec["batch_size"][cs, ss]
    u_b = penalty_np(s2.astype(np.float64), count)
    implied = tau < ds - u_b
    print(
        f"audit: {len(cs)} steps, accepted candidates match {moved_ok}, recorded decision = implied {np.mean(implied == run_acc):.4f}"
    )
    wrong = run_acc != exact
    smooth = np.abs(accept(ds - u_b) - accept(delta))
    noise = ds - delta
    print(
        f"measured per-step error: {wrong.mean():.4g} ({wrong.sum()} of {wrong.size}); E|a(d*-uB)-a(D)| {smooth.mean():.4g};"
        f" noise mean {noise.mean():.3g} sd {noise.std():.3g}, sqrt(s2) median {np.median(np.sqrt(s2)):.3g}"
    )

    # the sizing's prediction at Laplace moves, at the run's own moves, and at those with rounding kept
    centre_flat = np.asarray(ravel_pytree(w.centre)[0], np.float64)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.key(1))).ravel().tolist())
    n_pop = est.population_size(args.n)
    r = min(n_pop, ROWS)
    idx = np.sort(rng.choice(n_pop, r, replace=False))
    sample = take(est.population(rows), jnp.asarray(idx, jnp.int32))
    order = orders(r, rng)
    chol = np.linalg.cholesky(w.covariance)
    pick = np.unique(np.linspace(0, len(cs) - 1, min(256, len(cs))).round().astype(int))
    at, to = xs[pick] - centre_flat, cand[pick] - centre_flat
    m = test.batch_size
    at_laplace = laplace_pairs(chol, 128, rng)
    pred = {}
    for where, (a, b) in (("Laplace moves", at_laplace), ("the run's moves", (at, to))):
        t = residual_matrix(model, est, sample, w.centre, a, b)
        pred[f"{where}, rounding as 0 (before)"] = step_error(t.exact, order, n_pop, m, SIGMA_MAX).error
        pred[f"{where}, terms as read"] = step_error(t.read, order, n_pop, m, SIGMA_MAX, exact=t.exact).error
    for k, v in pred.items():
        print(f"predicted at {k}: {v:.4g}")

    # the twin's full-data Delta (every row, rounding counted as 0) and the run's (every row as read) against float64
    full = {
        "twin's": full_delta(model, est, args.n, w.proxy.centre, rows, xs[pick], cand[pick]),
        "run's terms": full_delta(model, est, args.n, None, rows, xs[pick], cand[pick]),
    }
    free = log_prior64(cand[pick]) - log_prior64(xs[pick]) + log_q[pick] + known[pick]
    full_err = {k: free + v - delta[pick] for k, v in full.items()}
    for k, v in full_err.items():
        print(
            f"full-data Delta, {k}: error mean {v.mean():.3g} rms {np.sqrt(np.mean(v * v)):.3g} max {np.abs(v).max():.3g}"
        )

    # the check's twin, as posterior_error runs it, its differing steps classified by the float64 decision
    chain, step = start_steps(chains, samples, CHECK_STARTS, CHECK_STEPS)
    path, twin_acc, _ = exact_continuation(
        model,
        rows,
        w.proposal,
        test,
        est,
        args.n,
        np.asarray(draws[chain, step], np.float32),
        chain,
        step,
        run_key,
        chains,
        CHECK_STEPS,
        1.0,
        ravel_pytree(w.centre)[1],
        w.proxy.centre,
    )
    _, split, _ = from_the_run(draws, rec, chain, step, np.asarray(path, np.float64), np.asarray(twin_acc))
    ks, ts = np.nonzero(split)
    sc, sst = chain[ks].astype(np.int32), (step[ks] + ts + 1).astype(np.int32)
    sx = draws[sc, sst - 1]
    scand, slog_q, _, stau = proposed(model, w, est, test, args.n, run_key, chains, rows, sx, sc, sst)
    sdelta = (
        log_prior64(scand) - log_prior64(sx) + slog_q + log_lik_sum64(scand, x64, y64) - log_lik_sum64(sx, x64, y64)
    )
    sexact = sdelta > stau
    twin_wrong = np.asarray(twin_acc)[ks, ts] != sexact
    run_wrong = rec["accepted"][sc, sst] != sexact
    print(
        f"twin: decisions differed {split.mean():.4g} ({split.sum()} of {split.size}); of them the twin wrong "
        f"{twin_wrong.sum()}, the run wrong {run_wrong.sum()}"
    )
    for j in range(min(40, ks.size)):
        print(
            f"  c{sc[j]} s{sst[j]}: Delta64 {sdelta[j]:+.5f} tau {stau[j]:+.5f} run {rec['accepted'][sc[j], sst[j]]}"
            f" twin {np.asarray(twin_acc)[ks[j], ts[j]]} d* {rec['delta_star'][sc[j], sst[j]]:+.5f}"
            f" s2 {rec['s2'][sc[j], sst[j]]:.3g} b {rec['batch_size'][sc[j], sst[j]]}"
        )
    rows_out = [
        ["N", str(args.n)],
        ["method", args.method],
        ["m", str(m)],
        ["audited steps", str(wrong.size)],
        ["measured per-step error (float64 exact decision)", f"{wrong.mean():.4g}"],
        ["measured E|a(d* - u_B) - a(Delta)|", f"{smooth.mean():.4g}"],
        *[[f"predicted at {k}", f"{v:.4g}"] for k, v in pred.items()],
        ["check's decisions differed", f"{split.mean():.4g}"],
        ["differing steps", str(int(split.sum()))],
        ["of them the twin wrong", str(int(twin_wrong.sum()))],
        ["of them the run wrong", str(int(run_wrong.sum()))],
        ["estimate's error mean (nats)", f"{noise.mean():.3g}"],
        ["estimate's error s.d. (nats)", f"{noise.std():.3g}"],
        ["median sqrt(s2) (nats)", f"{np.median(np.sqrt(s2)):.3g}"],
        *[[f"full-data Delta, {k}: rms error (nats)", f"{np.sqrt(np.mean(v * v)):.3g}"] for k, v in full_err.items()],
    ]
    values = {
        f"{args.name}.measured": f"{100 * wrong.mean():.2f}%",
        f"{args.name}.measured_smooth": f"{100 * smooth.mean():.2f}%",
        f"{args.name}.predicted_before": f"{100 * pred['Laplace moves, rounding as 0 (before)']:.3f}%",
        f"{args.name}.predicted_read": f"{100 * pred['Laplace moves, terms as read']:.2f}%",
        f"{args.name}.twin_differed": f"{100 * split.mean():.2f}%",
        f"{args.name}.differing": str(int(split.sum())),
        f"{args.name}.twin_wrong": str(int(twin_wrong.sum())),
        f"{args.name}.run_wrong": str(int(run_wrong.sum())),
        f"{args.name}.noise_sd": f"{noise.std():.3g}",
    }
    save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows_out)}, values=values)
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
