"""Temperature 1 on tall data: MHminibatch with Taylor-proxy control variates vs NumPyro HMCECS and BlackJAX.

Bayesian logistic regression, d=50 synthetic features (``make_logistic_data``), prior N(0, 1) on
every weight, temperature 1, float32. For each N in ``--sizes``, side by side in one process:

* reference: the Laplace approximation (Newton MAP, inverse Hessian of the negative log posterior,
  accumulated in float64); for N <= ``--nuts-max`` a full-data NumPyro NUTS run started at the MAP
  replaces it and its distance to the Laplace approximation is printed (it shrinks like N^-1/2);
* all chains start at the same draw from the Laplace approximation (no burn-in is discarded);
* "MHminibatch+CV MALA" / "MHminibatch+CV RW": ``minibatch_mcmc.warmup.warmup(proposal="langevin" |
  "random_walk", test=mh_minibatch(batch_size=--cv-m))`` from theta = 0 (mode, Laplace covariance,
  Taylor proxy at the mode, scale tuned; its seconds and data points are the warm-up columns), then
  the frozen kernel ``build_kernel(model, w.proposal, w.test, N, estimator=w.proxy)``; after
  sampling, one of its steps is timed against one SGD step (value-and-grad of the minibatch log
  posterior on the same --cv-m rows, drawn the same way, plus the update), interleaved;
* "SMH-2 indep." / "MH-SS-2 indep.": the exact tests ``scalable_mh()`` / ``mhss()`` after
  ``warmup(test="smh" | "mhss", proposal="independence", order=2)`` from theta = 0: the logistic GLM proxy of order 2
  at the mode with per-datum bounds whitened by the Laplace Cholesky factor, the proxy posterior's Laplace
  approximation as an independence proposal; "data/step" is the mean number of rows the test evaluated;
* NumPyro ``HMCECS(NUTS(model), num_blocks, proxy=HMCECS.taylor_proxy({"theta": MAP}))`` with a
  ``numpyro.plate(..., subsample_size=...)`` model, as NumPyro documents it; its step size and
  diagonal mass matrix are adapted by ``MCMC.warmup``; its warm-up column is the Newton MAP plus
  ``MCMC.warmup`` (proxy setup and compile included); sampling then runs ``kernel.sample`` in a
  jitted ``lax.scan``, which is what ``MCMC.run`` does but without recompiling at every continuation;
* "BlackJAX NUTS": full data, ``blackjax.window_adaptation(blackjax.nuts, ...)`` for --nuts-warmup
  steps (diagonal mass matrix); not run when --nuts-warmup x one full-data gradient (measured)
  already exceeds --warmup-cap (recorded as such: a lower bound, not a run);
* "BlackJAX RWMH" (``blackjax.normal_random_walk``, full data) and the optional plain "MHminibatch"
  (``mh_minibatch(batch_size=--m)``, no control variate) get a Gaussian random walk with
  per-coordinate s.d. ``2.38/sqrt(d)`` times the reference s.d. (an oracle: no warm-up); the full-data
  log densities are centred at the MAP (``sum_i [log p(y_i|theta) - log p(y_i|MAP)]``) so that their
  float32 sums of N terms keep the O(1) differences the MH test needs.

Each sampler runs one chain in jitted blocks until ``--time-cap`` seconds of sampling; the first
block call (compile + one block) is timed separately and its draws discarded. After every block
the running estimates of the posterior means and s.d.s over all draws so far give
``err_mean = max_j |mean_j - ref_mean_j| / ref_sd_j`` and ``err_sd = max_j |sd_j / ref_sd_j - 1|``;
"t(mean)" and "t(sd)" are the sampling wall times from which the error stays <= ``--threshold`` to
the end of the run ("> cap" if it never does). ESS is ArviZ's bulk ESS, minimum over coordinates;
"ESS/s" divides it by the sampling seconds, "ESS/s incl. warm-up" by warm-up + sampling seconds.
"data/step" is the data points read per step (ours: per test; HMCECS: subsample x leapfrogs; NUTS:
N x leapfrogs). Every figure goes to ``--out`` (JSON), from which ``benchmarks/render_results.py``
renders the tables of docs/benchmarks.md.

    .venv/bin/python benchmarks/peers.py --quick                       # N = 20,000, 20 s per method, no results file
    nice -n 10 .venv/bin/python benchmarks/peers.py --sizes 100000 1000000 --time-cap 60
    nice -n 10 .venv/bin/python benchmarks/peers.py --sizes 10000000 --time-cap 60 --append

``--out`` (default ``docs/results/peers_t1.json``) writes the raw figures and the tables ``peers_t1*``;
``--results FILE`` instead writes the payload of ``reproductions.results`` (command, machine,
date) with tables and values named after the file (``peers_plain.json``: ``peers_plain``,
``peers_plain_runs``, ``peers_plain_ratios``, ``peers_plain_reference``, values ``peers_plain.*``):

    nice -n 10 .venv/bin/python benchmarks/peers.py --sizes 20000 100000 1000000 --time-cap 40 --threshold 0.25 \
        --methods MHminibatch "BlackJAX RWMH" "NumPyro HMCECS" --results docs/results/peers_plain.json
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from pathlib import Path
from typing import NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save
from peer_runners import (
    RunTrace,
    Skipped,
    centred_logdensity,
    run_cv_mala,
    run_cv_rw,
    run_mhss2,
    run_nuts,
    run_smh2,
    timed_blocks,
)
from peers_report import (
    COLUMNS,
    RATIO_COLUMNS,
    environment,
    prefixed_results,
    previous_results,
    print_table,
    ratio_rows,
    row_figures,
    skipped_figures,
    table_row,
    write_results,
)

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.models import logistic_log_lik, logistic_regression, make_logistic_data
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel

D = 50
PRIOR_SCALE = 1.0


class Reference(NamedTuple):
    """Posterior mean and marginal s.d. used as truth, the MAP, the Laplace s.d.s and the reference's name."""

    mean: np.ndarray
    sd: np.ndarray
    map: np.ndarray
    laplace_cov: np.ndarray
    name: str
    map_s: float = 0.0
    check: dict | None = None


# ---------------------------------------------------------------- the Laplace approximation / reference


def _chunk_size(n: int, target: int = 100_000) -> int:
    """Largest divisor of ``n`` not above ``target`` (rows per Newton chunk)."""
    for c in range(min(n, target), 0, -1):
        if n % c == 0:
            return c
    return n


def laplace_approximation(data: dict, n: int, iters: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Newton MAP of the N(0, 1)-prior logistic posterior and the inverse Hessian there (float64 sums)."""
    c = _chunk_size(n)

    @jax.jit
    def chunk_terms(theta, start, data):
        x = jax.lax.dynamic_slice_in_dim(data["x"], start, c)
        y = jax.lax.dynamic_slice_in_dim(data["y"], start, c).astype(x.dtype)
        p = jax.nn.sigmoid(x @ theta)
        return x.T @ (y - p), (x * (p * (1 - p))[:, None]).T @ x

    theta = np.zeros(D)
    for _ in range(iters):
        g, h = -theta / PRIOR_SCALE**2, np.eye(D) / PRIOR_SCALE**2
        for s in range(0, n, c):
            gc, hc = chunk_terms(jnp.asarray(theta, jnp.float32), s, data)
            g, h = g + np.asarray(gc, np.float64), h - np.asarray(hc, np.float64)
        step = np.linalg.solve(-h, g)
        theta = theta + step
        cov = np.linalg.inv(-h)
        if np.max(np.abs(step) / np.sqrt(np.diag(cov))) < 1e-4:
            break
    return theta, cov


def numpyro_model(x, y, subsample_size=None):
    """The logistic model in NumPyro: theta ~ N(0, 1), y_i ~ Bernoulli(sigmoid(x_i . theta)), subsampled plate."""
    import numpyro
    import numpyro.distributions as dist

    theta = numpyro.sample("theta", dist.Normal(jnp.zeros(x.shape[1]), PRIOR_SCALE).to_event(1))
    with numpyro.plate("N", x.shape[0], subsample_size=subsample_size):
        xb = numpyro.subsample(x, event_dim=1)
        yb = numpyro.subsample(y, event_dim=0)
        numpyro.sample("obs", dist.Bernoulli(logits=xb @ theta), obs=yb)


def nuts_reference(data: dict, map_: np.ndarray, key: jax.Array, warmup: int, samples: int) -> np.ndarray:
    """Full-data NumPyro NUTS draws started at the MAP."""
    from numpyro.infer import MCMC, NUTS, init_to_value

    kernel = NUTS(numpyro_model, init_strategy=init_to_value(values={"theta": jnp.asarray(map_, jnp.float32)}))
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, progress_bar=False, jit_model_args=True)
    mcmc.run(key, data["x"], data["y"])
    return np.asarray(mcmc.get_samples()["theta"], np.float64)


# ---------------------------------------------------------------- timed block loop


def run_mhminibatch(data, n, ref: Reference, start, scale, args, key) -> RunTrace:
    """MHminibatch with a diagonal random walk at temperature 1."""
    kernel = build_kernel(
        logistic_regression(PRIOR_SCALE), random_walk(scale=scale), mh_minibatch(args.m, sigma=1.0), n
    )
    steps = max(args.min_block_steps, int(args.block_work // n))
    temp = jnp.float32(1.0)

    @jax.jit
    def block(state, k, data):
        def body(st, kk):
            st, out = kernel.step(kk, st, data, temp)
            return st, (st.position, jnp.stack([out.accepted.astype(jnp.float32), out.batch_size.astype(jnp.float32)]))

        return jax.lax.scan(body, state, jax.random.split(k, steps))

    draws, ends, sizes, compile_s, st = timed_blocks(
        block, kernel.init(jnp.asarray(start, jnp.float32)), key, data, args.time_cap
    )
    return RunTrace(
        draws,
        ends,
        sizes,
        compile_s,
        0.0,
        float(st[:, 0].mean()),
        f"mean batch {st[:, 1].mean():,.0f} ({st[:, 1].mean() / n:.2f} N), m={args.m}",
        data_per_step=float(st[:, 1].mean()),
        step_s=float(ends[-1]) / len(draws),
    )


def run_rwmh(data, n, ref: Reference, start, scale, args, key) -> RunTrace:
    """BlackJAX full-data random-walk Metropolis with the same Gaussian proposal."""
    import blackjax

    data = dict(data, lhat=logistic_log_lik(jnp.asarray(ref.map, jnp.float32), data))
    sigma = jnp.asarray(scale, jnp.float32)

    def algorithm(data):
        return blackjax.normal_random_walk(centred_logdensity(data), sigma)

    steps = max(args.min_block_steps, int(args.block_work // n))

    @jax.jit
    def block(state, k, data):
        alg = algorithm(data)

        def body(st, kk):
            st, info = alg.step(kk, st)
            return st, (st.position, info.is_accepted.astype(jnp.float32))

        return jax.lax.scan(body, state, jax.random.split(k, steps))

    init = algorithm(data).init(jnp.asarray(start, jnp.float32))
    draws, ends, sizes, compile_s, acc = timed_blocks(block, init, key, data, args.time_cap)
    return RunTrace(
        draws,
        ends,
        sizes,
        compile_s,
        0.0,
        float(acc.mean()),
        "full data every step; proposal s.d. from the reference (oracle, no warm-up)",
        data_per_step=float(n),
        step_s=float(ends[-1]) / len(draws),
    )


def run_hmcecs(data, n, ref: Reference, start, scale, args, key) -> RunTrace:
    """NumPyro HMCECS (NUTS inner kernel, Taylor proxy at the MAP) after ``MCMC.warmup``."""
    from numpyro.infer import HMCECS, MCMC, NUTS, init_to_value

    mapd = {"theta": jnp.asarray(ref.map, jnp.float32)}
    sub = min(args.subsample, n)
    model = functools.partial(numpyro_model, subsample_size=sub)  # the subsample size must stay static under jit
    inner = NUTS(model, init_strategy=init_to_value(values={"theta": jnp.asarray(start, jnp.float32)}))
    kernel = HMCECS(inner, num_blocks=args.num_blocks, proxy=HMCECS.taylor_proxy(mapd))
    mcmc = MCMC(kernel, num_warmup=args.ecs_warmup, num_samples=1, progress_bar=False, jit_model_args=True)
    k_warm = jax.random.fold_in(key, 1)
    t0 = time.perf_counter()
    mcmc.warmup(k_warm, data["x"], data["y"], collect_warmup=False)
    jax.block_until_ready(mcmc.post_warmup_state)
    warmup_s = time.perf_counter() - t0
    sampler = mcmc.sampler

    @jax.jit
    def block(state, k, data):
        del k  # the HMCECS state carries its own key

        def body(st, _):
            st = sampler.sample(st, (data["x"], data["y"]), {})
            return st, (
                st.z["theta"],
                jnp.stack([st.hmc_state.accept_prob, st.hmc_state.num_steps.astype(jnp.float32)]),
            )

        return jax.lax.scan(body, state, None, length=args.ecs_block)

    draws, ends, sizes, compile_s, st = timed_blocks(block, mcmc.post_warmup_state, key, data, args.time_cap)
    step = float(mcmc.post_warmup_state.hmc_state.adapt_state.step_size)
    leap = float(st[:, 1].mean())
    extra = (
        f"subsample {sub}, {args.num_blocks} blocks, step {step:.3g}, {leap:.1f} leapfrogs/draw; warm-up = Newton MAP "
        f"{ref.map_s:.1f} s + MCMC.warmup ({args.ecs_warmup} iterations, proxy setup and compile included) {warmup_s:.1f} s"
    )
    return RunTrace(
        draws,
        ends,
        sizes,
        compile_s,
        ref.map_s + warmup_s,
        float(st[:, 0].mean()),
        extra,
        data_per_step=leap * sub,
        step_s=float(ends[-1]) / len(draws),
    )


# ---------------------------------------------------------------- error metrics


def running_errors(draws: np.ndarray, sizes: np.ndarray, ref: Reference) -> tuple[np.ndarray, np.ndarray]:
    """Max standardised error of the running mean and max relative error of the running s.d. after each block."""
    z = (draws - ref.mean) / ref.sd
    ends = np.cumsum(sizes)
    c1, c2 = np.cumsum(z, axis=0)[ends - 1], np.cumsum(z * z, axis=0)[ends - 1]
    cnt = ends[:, None].astype(np.float64)
    mean = c1 / cnt
    var = np.maximum(c2 / cnt - mean**2, 0.0) * cnt / np.maximum(cnt - 1, 1)
    return np.max(np.abs(mean), axis=1), np.max(np.abs(np.sqrt(var) - 1.0), axis=1)


def time_to_stay_below(err: np.ndarray, ends: np.ndarray, threshold: float) -> float:
    """Sampling time from which the error stays <= threshold to the end of the run (inf if it never does)."""
    above = np.flatnonzero(err > threshold)
    if above.size == 0:
        return float(ends[0])
    last = above[-1]
    return float(ends[last + 1]) if last + 1 < len(ends) else math.inf


def min_ess(draws: np.ndarray) -> float:
    """ArviZ bulk ESS of one chain, minimum over the coordinates."""
    ess = az.ess(az.convert_to_dataset({"theta": draws[None]}), method="bulk")["theta"].values
    return float(np.min(ess))


def fmt_t(t: float, cap: float) -> str:
    """Seconds, or '> cap' when the threshold was not reached."""
    return f"{t:.1f}" if math.isfinite(t) else f"> {cap:.0f}"


# ---------------------------------------------------------------- driver


def build_reference(data, n, args, key) -> Reference:
    """Laplace approximation, replaced by full-data NUTS moments when N <= --nuts-max."""
    t0 = time.perf_counter()
    map_, cov = laplace_approximation(data, n)
    map_s = time.perf_counter() - t0
    lap_sd = np.sqrt(np.diag(cov))
    print(f"  Laplace (Newton MAP + inverse Hessian): {map_s:.1f} s, median posterior s.d. {np.median(lap_sd):.3g}")
    if n > args.nuts_max:
        return Reference(map_, lap_sd, map_, cov, "Laplace", map_s)
    t0 = time.perf_counter()
    ref = nuts_reference(data, map_, key, args.ref_warmup, args.ref_samples)
    mean, sd = ref.mean(0), ref.std(0, ddof=1)
    ess = min_ess(ref)
    ess_sq = min_ess(((ref - mean) / sd) ** 2)
    check = {
        "mean_diff": float(np.max(np.abs(map_ - mean) / sd)),
        "sd_diff": float(np.max(np.abs(lap_sd / sd - 1))),
        "mc_mean": 2.5 / math.sqrt(ess),
        "mc_sd": 2.5 / math.sqrt(2 * ess_sq),
        "ess": ess,
        "ess_sq": ess_sq,
    }
    print(
        f"  NUTS reference: {args.ref_samples} draws, min ESS {ess:.0f} (of squared deviations {ess_sq:.0f}), {time.perf_counter() - t0:.1f} s; "
        f"Laplace vs NUTS: max |mean diff|/sd {check['mean_diff']:.3f}, max |sd ratio - 1| {check['sd_diff']:.3f} "
        f"(NUTS Monte Carlo error of these: ~{check['mc_mean']:.3f} and ~{check['mc_sd']:.3f})"
    )
    return Reference(mean, sd, map_, cov, f"NUTS ({args.ref_samples} draws)", map_s, check)


METHODS = {
    "MHminibatch+CV MALA": run_cv_mala,
    "MHminibatch+CV RW": run_cv_rw,
    "NumPyro HMCECS": run_hmcecs,
    "BlackJAX NUTS": run_nuts,
    "BlackJAX RWMH": run_rwmh,
    "MHminibatch": run_mhminibatch,
    "SMH-2 indep.": run_smh2,
    "MH-SS-2 indep.": run_mhss2,
}
DEFAULT_METHODS = [m for m in METHODS if m != "MHminibatch"]


def bench_size(n: int, args) -> tuple[list[dict], dict]:
    """Reference and every method in ``--methods`` at one data size: the figures of each row and the reference's."""
    key = jax.random.key(args.seed)
    k_data, k_ref, k_start, k_run = jax.random.split(key, 4)
    print(
        f"\nN = {n:,}, d = {D}, prior N(0, 1), threshold {args.threshold}, sampling cap {args.time_cap:.0f} s per method",
        flush=True,
    )
    t0 = time.perf_counter()
    data, _ = make_logistic_data(k_data, n, D)
    jax.block_until_ready(data)
    print(f"  data: {time.perf_counter() - t0:.1f} s", flush=True)
    ref = build_reference(data, n, args, k_ref)
    start = np.asarray(
        jax.random.multivariate_normal(k_start, jnp.asarray(ref.map), jnp.asarray(ref.laplace_cov)), np.float64
    )
    scale = 2.38 / math.sqrt(D) * ref.sd
    rows = []
    for i, (name, fn) in enumerate(METHODS.items()):
        if name not in args.methods:
            continue
        try:
            tr = fn(data, n, ref, start, scale, args, jax.random.fold_in(k_run, i))
        except Exception as err:  # noqa: BLE001 -- a failed peer (e.g. out of memory) is reported, not fatal
            print(f"  {name}: FAILED: {type(err).__name__}: {str(err)[:300]}", flush=True)
            rows.append(skipped_figures(name, n, f"failed: {type(err).__name__}: {str(err)[:200]}"))
            continue
        if isinstance(tr, Skipped):
            print(f"  {name}: {tr.reason}", flush=True)
            rows.append(skipped_figures(name, n, tr.reason, tr.warmup_s_lower_bound))
            continue
        e_mean, e_sd = running_errors(tr.draws, tr.block_sizes, ref)
        row = row_figures(
            name,
            n,
            tr,
            min_ess(tr.draws),
            time_to_stay_below(e_mean, tr.block_end, args.threshold),
            time_to_stay_below(e_sd, tr.block_end, args.threshold),
            e_mean[-1],
            e_sd[-1],
        )
        rows.append(row)
        sgd = (
            f"; step {row['step_us']:.0f} us vs SGD step {row['sgd_step_us']:.0f} us (m={row['sgd_m']})"
            if tr.sgd
            else ""
        )
        print(
            f"  {name}: {len(tr.draws):,} draws in {row['sampling_s']:.1f} s (compile {tr.compile_s:.1f} s), "
            f"end errors mean {row['end_err_mean']:.3f} sd {row['end_err_sd']:.3f}, {tr.extra}{sgd}",
            flush=True,
        )
    print()
    print_table(COLUMNS, [table_row(r) for r in rows])
    ratios = ratio_rows(rows)
    if ratios:
        print("  ESS/s ratios over NumPyro HMCECS (> 1: ours faster):")
        print_table(RATIO_COLUMNS, ratios)
    summary = {
        "name": ref.name,
        "map_s": ref.map_s,
        "median_sd": float(np.median(ref.sd)),
        "start": start.tolist(),
        "check": ref.check,
    }
    return rows, summary


def main() -> None:
    """Parse flags, run every size, print the tables and write the results file after each size."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--quick", action="store_true", help="N = 20,000, 20 s per method, short reference")
    ap.add_argument("--time-cap", type=float, default=60.0, help="sampling seconds per method and size")
    ap.add_argument(
        "--warmup-cap", type=float, default=300.0, help="NUTS is not run when its warm-up needs more than this"
    )
    ap.add_argument("--threshold", type=float, default=0.1, help="error level for t(mean) and t(sd)")
    ap.add_argument("--m", type=int, default=1000, help="plain MHminibatch initial minibatch size (and growth step)")
    ap.add_argument("--cv-m", type=int, default=50, help="MHminibatch+CV minibatch size (and the SGD yardstick's)")
    ap.add_argument("--cv-block", type=int, default=2000, help="MHminibatch+CV steps per timed block")
    ap.add_argument("--sgd-repeats", type=int, default=5, help="interleaved repeats of the step vs SGD-step timing")
    ap.add_argument("--subsample", type=int, default=1000, help="HMCECS subsample size")
    ap.add_argument("--num-blocks", type=int, default=100, help="HMCECS blocks of the subsample indices")
    ap.add_argument("--ecs-warmup", type=int, default=300, help="HMCECS warm-up (adaptation) iterations")
    ap.add_argument("--ecs-block", type=int, default=25, help="HMCECS draws per timed block")
    ap.add_argument("--nuts-warmup", type=int, default=500, help="BlackJAX window_adaptation steps")
    ap.add_argument(
        "--block-work", type=float, default=2e7, help="random-walk steps per block = this / N (NUTS: / 10 N)"
    )
    ap.add_argument("--min-block-steps", type=int, default=10, help="at least this many full-data steps per block")
    ap.add_argument("--nuts-max", type=int, default=20_000, help="largest N with a full-data NumPyro NUTS reference")
    ap.add_argument("--ref-warmup", type=int, default=500)
    ap.add_argument("--ref-samples", type=int, default=3000)
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS))
    ap.add_argument(
        "--out",
        default=None,
        help="JSON results file (default docs/results/peers_t1.json, none with --quick or --results; '': none)",
    )
    ap.add_argument(
        "--append", action="store_true", help="keep the rows of other sizes already in --out (a later run adds sizes)"
    )
    ap.add_argument("--seed", type=int, default=0)
    add_results_option(ap)
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.time_cap, args.ref_warmup, args.ref_samples, args.ecs_warmup = [20_000], 20.0, 200, 1000, 150
    if args.out is None:
        args.out = "" if args.quick or args.results else "docs/results/peers_t1.json"
    for name in ("time_cap", "warmup_cap", "threshold", "block_work"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} must be positive")
    for name in (
        "min_block_steps",
        "m",
        "cv_m",
        "cv_block",
        "sgd_repeats",
        "subsample",
        "num_blocks",
        "ecs_warmup",
        "ecs_block",
        "nuts_warmup",
        "ref_warmup",
        "ref_samples",
    ):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} must be a positive integer")
    if any(n < max(args.m, args.cv_m, 2 * D) for n in args.sizes):
        raise ValueError(f"--sizes {args.sizes}: every N must be at least max(m={args.m}, cv-m={args.cv_m}, {2 * D})")
    env = environment()
    print(
        f"machine: {env['machine']}, versions {env['versions']}, float32; load average at start "
        f"{', '.join(f'{v:.1f}' for v in env['load_average_start'])}"
    )
    rows, refs = [], {}
    if args.append and args.out:
        env, rows, refs = previous_results(args.out, env, args.sizes)
    for n in args.sizes:
        r, refs[str(n)] = bench_size(n, args)
        rows += r
        if args.out:
            write_results(args.out, env, args, rows, refs)
        if args.results:
            tabs, values = prefixed_results(Path(args.results).stem.replace("-", "_"), rows, refs)
            save(
                args.results, "peers", config=args, tables=tabs, values=values, extra={"references": refs, "rows": rows}
            )
    if len(args.sizes) > 1:
        print("\nall sizes:")
        print_table(COLUMNS, [table_row(r) for r in rows])
        print_table(RATIO_COLUMNS, ratio_rows(rows))
    if args.out:
        print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
