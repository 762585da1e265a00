"""Wall time of one jitted MHminibatch step vs one jitted SGD step on logistic regression.

Both steps draw a minibatch of m=100 rows of a d=784 data set (random indices, gathered), the
SGD step takes a gradient of the minibatch log-likelihood and updates the weights, the
MHminibatch step proposes a random-walk move, evaluates both log-likelihoods on its minibatch,
grows it if needed and runs the corrected Barker test. The random-walk scale and temperature are
chosen so that the minibatch rarely grows (the mean batch size is printed). Steps run inside
``lax.scan`` so that dispatch overhead is amortised; single chain and 1024 vmapped chains. The two
jitted functions are timed alternately, ``--repeats`` times each; the table gives the best time
of each and the median of the per-repeat ratios.

    .venv/bin/python benchmarks/step_cost.py [--steps 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import build_kernel

D, M = 784, 100


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
    args = ap.parse_args()

    model = logistic_regression()
    data, theta_true = make_logistic_data(jax.random.key(0), args.n, D)
    print(f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}")
    print(f"logistic regression d={D}, N={args.n:,}, m={M}, random walk s.d. {args.scale}, K={args.temperature:g}")
    print(f"{'chains':>7} {'steps':>6} {'SGD us/step':>12} {'MHminibatch us/step':>20} {'mean batch':>11} {'ratio of best':>14} {'median ratio':>13}")
    for chains in args.chains:
        steps = max(20, args.steps // max(1, chains // 16))
        thetas = jnp.zeros((chains, D), jnp.float32)
        sgd = sgd_runner(model, data, args.n, steps, chains)
        kernel, mh = mh_runner(model, data, args.n, steps, chains, args.scale, args.temperature)
        states = jax.vmap(kernel.init)(thetas)
        t_sgd, t_mh, (_, mean_bs) = interleaved_times(
            sgd, (thetas, jax.random.key(1)), mh, (states, jax.random.key(2)), args.repeats
        )
        us_sgd, us_mh = 1e6 * t_sgd.min() / steps, 1e6 * t_mh.min() / steps
        med_ratio = float(np.median(t_mh / t_sgd))
        print(f"{chains:>7} {steps:>6} {us_sgd:>12.1f} {us_mh:>20.1f} {float(mean_bs):>11.1f} {us_mh / us_sgd:>14.2f} {med_ratio:>13.2f}")


if __name__ == "__main__":
    main()
