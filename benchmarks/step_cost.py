"""Wall time of one jitted MHminibatch step vs one jitted SGD step on logistic regression.

Both steps draw a minibatch of m=100 rows of a d=784 data set (random indices, gathered), the
SGD step takes a gradient of the minibatch log-likelihood and updates the weights, the
MHminibatch step proposes a random-walk move, evaluates both log-likelihoods on its minibatch,
grows it if needed and runs the corrected Barker test. The random-walk scale and temperature are
chosen so that the minibatch rarely grows (the mean batch size is printed). Steps run inside
``lax.scan`` so that dispatch overhead is amortised; single chain and 1024 vmapped chains. The two
jitted functions are timed alternately, ``--repeats`` times each; the table gives the best time
of each and the median of the per-repeat ratios.

    .venv/bin/python benchmarks/step_cost.py [--steps 2000] [--repeats 11] [--results docs/results/step_cost.json]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel

D, M = 784, 100
COLUMNS = ["chains", "steps", "SGD us/step", "MHminibatch us/step", "mean batch", "ratio of best", "median ratio"]


def result_row(chains: int, steps: int, t_sgd: np.ndarray, t_mh: np.ndarray, mean_batch: float) -> list[str]:
    """One formatted row: best microseconds per step of each, mean batch, ratio of the best times, median per-repeat ratio."""
    us_sgd, us_mh = 1e6 * float(np.min(t_sgd)) / steps, 1e6 * float(np.min(t_mh)) / steps
    med = float(np.median(np.asarray(t_mh) / np.asarray(t_sgd)))
    return [
        str(chains),
        str(steps),
        f"{us_sgd:.1f}",
        f"{us_mh:.1f}",
        f"{mean_batch:.1f}",
        f"{us_mh / us_sgd:.2f}",
        f"{med:.2f}",
    ]


def results_values(rows: list[list[str]]) -> dict[str, str]:
    """The prose figures: ratio of the best times and median ratio per chain count (``step_cost.ratio_best_1`` ...)."""
    out = {}
    for r in rows:
        out[f"step_cost.ratio_best_{r[0]}"] = r[5]
        out[f"step_cost.median_ratio_{r[0]}"] = r[6]
    return out


def sgd_runner(model, data, n, steps, chains, lr=1e-3):
    """A jitted scan of ``steps`` SGD steps for ``chains`` replicas."""

    def loss(theta, batch):
        return -jnp.mean(model.log_lik(theta, batch))

    grad = jax.grad(loss)

    def one(theta, key):
        idx = jax.random.randint(key, (M,), 0, n)
        batch = jax.tree_util.tree_map(lambda a: a[idx], data)
        return theta - lr * grad(theta, batch), None

    @jax.jit
    def run(thetas, key):
        def body(th, k):
            ks = jax.random.split(k, chains)
            th, _ = jax.vmap(one)(th, ks)
            return th, None

        th, _ = jax.lax.scan(body, thetas, jax.random.split(key, steps))
        return th

    return run


def mh_runner(model, data, n, steps, chains, scale, temperature):
    """A jitted scan of ``steps`` MHminibatch steps for ``chains`` chains; returns mean batch size too."""
    kernel = build_kernel(model, random_walk(scale=scale), mh_minibatch(M, sigma=1.0), n)
    temp = jnp.float32(temperature)

    @jax.jit
    def run(states, key):
        def body(st, k):
            ks = jax.random.split(k, chains)
            st, out = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(ks, st, data, temp)
            return st, out.batch_size

        st, bs = jax.lax.scan(body, states, jax.random.split(key, steps))
        return st, jnp.mean(bs.astype(jnp.float32))

    return kernel, run


def interleaved_times(fn_a, args_a, fn_b, args_b, repeats):
    """Wall times of ``repeats`` alternating calls of two functions (after a warm-up/compile call each)."""
    jax.block_until_ready(fn_a(*args_a))
    out_b = fn_b(*args_b)
    jax.block_until_ready(out_b)
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn_a(*args_a))
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out_b = fn_b(*args_b)
        jax.block_until_ready(out_b)
        tb.append(time.perf_counter() - t0)
    return np.array(ta), np.array(tb), out_b


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 1024])
    ap.add_argument("--scale", type=float, default=0.002, help="random-walk s.d. per coordinate")
    ap.add_argument("--temperature", type=float, default=100.0)
    add_results_option(ap)
    args = ap.parse_args()

    model = logistic_regression()
    data, theta_true = make_logistic_data(jax.random.key(0), args.n, D)
    print(
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}"
    )
    print(f"logistic regression d={D}, N={args.n:,}, m={M}, random walk s.d. {args.scale}, K={args.temperature:g}")
    widths = [7, 6, 12, 20, 11, 14, 13]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows = []
    for chains in args.chains:
        steps = max(20, args.steps // max(1, chains // 16))
        thetas = jnp.zeros((chains, D), jnp.float32)
        sgd = sgd_runner(model, data, args.n, steps, chains)
        kernel, mh = mh_runner(model, data, args.n, steps, chains, args.scale, args.temperature)
        states = jax.vmap(kernel.init)(thetas)
        t_sgd, t_mh, (_, mean_bs) = interleaved_times(
            sgd, (thetas, jax.random.key(1)), mh, (states, jax.random.key(2)), args.repeats
        )
        rows.append(result_row(chains, steps, t_sgd, t_mh, float(mean_bs)))
        print(" ".join(c.rjust(w) for c, w in zip(rows[-1], widths)), flush=True)
    save(
        args.results, "step_cost", config=args, tables={"step_cost": table(COLUMNS, rows)}, values=results_values(rows)
    )


if __name__ == "__main__":
    main()
