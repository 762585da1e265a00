"""Wall time of one jitted step of each proxy-posterior proposal (MHminibatch m=50, Taylor proxy, K=1) against a bare
hand-written JAX step of the same maths, logistic regression d=10, N=10^5, 1 and 64 chains.

The bare step writes out by hand: the proposal (Laplace-shaped random walk; Gaussian or t independence draw and its
log q ratio; proxy HMC leapfrog with the proxy gradient ``grad log p0 + G + H (theta - c)``; the mixture as both moves
and a select, which is what ``vmap`` makes of the library's ``lax.switch``), 50 distinct row indices (the library's
keyed permutation, ``data.indexing.chunk_indices``: the same sampling scheme), the closed-form logistic residuals
``l_i(theta') - l_i(theta) - [g_i.u + u' H_i v / 2]``, the proxy's data-free sum, the minibatch's growth by ``m`` rows
while ``s2 >= 1`` (MHminibatch's rule, a ``while_loop``: under ``vmap`` a step in which any chain grows runs the loop
body for every chain, in both steps) and a Barker decision with normal plus logistic noise (the library draws its
correction-table noise instead of the logistic and keeps the sums of ``z^3``, ``z^4`` for the CLT bound). The library
step is ``build_kernel(model, proposal, mh_minibatch(50), N, proxy).step``. Both run inside ``lax.scan``, timed
alternately ``--repeats`` times; the table gives the best time of each and the median of the per-repeat ratios.

    .venv/bin/python benchmarks/proxy_step_cost.py [--steps 2000] [--repeats 11] [--results docs/results/proxy_step_cost.json]
"""

from __future__ import annotations

import argparse
import math
import platform

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from step_cost import interleaved_times

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.control_variates import proxy_hmc, proxy_independence, proxy_laplace, taylor_proxy
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.optim.mode import find_mode, laplace_covariance
from minibatch_mcmc.proposals import mixture
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers import build_kernel

D, M, PRIOR = 10, 50, 10.0
HMC_STEPS, HMC_EPS, T_DF = 4, 0.75 * math.pi / 4, 5.0
COLUMNS = [
    "proposal",
    "chains",
    "steps",
    "bare us/step",
    "library us/step",
    "bare mean batch",
    "library mean batch",
    "ratio of best",
    "median ratio",
]


def setup(n: int):
    """Data, model, mode, Laplace factor and the second-order proxy at the mode."""
    model = logistic_regression(prior_scale=PRIOR)
    data, _ = make_logistic_data(jax.random.key(0), n, D)
    mode = find_mode(model, data, jnp.zeros(D), key=1)
    cov = laplace_covariance(mode.hessian)
    proxy = taylor_proxy(model, data, mode.theta_hat, order=2)
    return model, data, proxy, cov


def library_proposals(model, proxy, cov):
    """The library's proposals, as ``warmup`` builds them."""
    chol = jnp.asarray(np.linalg.cholesky(cov), jnp.float32)
    hmc = proxy_hmc(proxy, model.log_prior, HMC_EPS, HMC_STEPS, cov=cov)
    walk = scaled_random_walk(chol, jnp.float32(2.38 / math.sqrt(D)))
    return {
        "random_walk": walk,
        "independence": proxy_independence(proxy, model.log_prior),
        "independence_t": proxy_independence(proxy, model.log_prior, df=T_DF),
        "proxy_hmc": hmc,
        "mixture": mixture([hmc, walk], [0.8, 0.2]),
    }


def bare_step(kind, data, n, proxy, cov, log_prior):
    """``(key, theta) -> (theta, rows read)`` written by hand for one chain: proposal, residuals, growth, Barker decision."""
    c = proxy.centre
    mean, lcov = proxy_laplace(proxy, log_prior)  # the independence proposals' centre and scale, as the library's
    mean, lchol = jnp.asarray(mean, jnp.float32), jnp.asarray(np.linalg.cholesky(lcov), jnp.float32)
    inv_lchol = jnp.asarray(np.linalg.inv(np.linalg.cholesky(lcov)), jnp.float32)
    g_sum, h_sum = proxy.grad_sum, proxy.hess_sum
    chol = jnp.asarray(np.linalg.cholesky(cov), jnp.float32)
    prec = 1.0 / PRIOR**2
    x_all, y_all = data["x"], data["y"].astype(jnp.float32)

    def proxy_grad(th):
        return -prec * th + g_sum + h_sum @ (th - c)

    def hmc(key, th):
        kv, ku = jax.random.split(key)
        v0 = jax.random.normal(kv, (D,))
        eps = HMC_EPS * jax.random.uniform(ku, (), minval=0.8, maxval=1.2)
        v = v0 + 0.5 * eps * (chol.T @ proxy_grad(th))
        x = th
        for i in range(HMC_STEPS):
            x = x + eps * (chol @ v)
            v = v + (0.5 if i == HMC_STEPS - 1 else 1.0) * eps * (chol.T @ proxy_grad(x))
        return x, 0.5 * (v0 @ v0 - v @ v)

    def walk(key, th):
        return th + (2.38 / math.sqrt(D)) * (chol @ jax.random.normal(key, (D,))), 0.0

    def indep(key, th, df):
        kz, kw = jax.random.split(key)
        z = lchol @ jax.random.normal(kz, (D,))
        if df is None:
            new = mean + z
            lq = lambda x: -0.5 * jnp.sum((inv_lchol @ (x - mean)) ** 2)
        else:
            new = mean + z / jnp.sqrt(2.0 * jax.random.gamma(kw, 0.5 * df) / df)
            lq = lambda x: -0.5 * (df + D) * jnp.log1p(jnp.sum((inv_lchol @ (x - mean)) ** 2) / df)
        return new, lq(th) - lq(new)

    def mixed(key, th):
        kc, km = jax.random.split(key)
        a, b = hmc(km, th), walk(km, th)
        pick = jax.random.uniform(kc) < 0.8
        return jnp.where(pick, a[0], b[0]), jnp.where(pick, a[1], b[1])

    propose = {
        "random_walk": walk,
        "independence": lambda k, t: indep(k, t, None),
        "independence_t": lambda k, t: indep(k, t, T_DF),
        "proxy_hmc": hmc,
        "mixture": mixed,
    }[kind]

    def residuals(th, new, chunk, ki):
        idx, valid = chunk_indices(ki, chunk, M, n)
        x, y = x_all[idx], y_all[idx]
        z0, z1, zc = x @ th, x @ new, x @ c
        ll = lambda z: y * jax.nn.log_sigmoid(z) - (1 - y) * jnp.log1p(jnp.exp(z))
        s = jax.nn.sigmoid(zc)
        xu, xv = z1 - z0, z1 + z0 - 2 * zc
        return ll(z1) - ll(z0) - ((y - s) * xu - 0.5 * s * (1 - s) * xu * xv), valid

    def s2_of(count, total, squares):  # n^2 x sample variance / count x finite-population factor
        b = count.astype(jnp.float32)
        return float(n) ** 2 * (squares - total * total / b) / (b - 1.0) / b * (1.0 - b / n)

    def step(key, th):
        kp, ki, kn = jax.random.split(key, 3)
        new, lq = propose(kp, th)
        r0, _ = residuals(th, new, 0, ki)
        shift = jnp.mean(r0)

        def more(carry):
            return (s2_of(*carry) >= 1.0) & (carry[0] < n)

        def read(carry):  # the next m rows of the step's order, as MHminibatch grows its minibatch
            count, total, squares = carry
            r, valid = residuals(th, new, count // M, ki)
            r = jnp.where(valid, r - shift, 0.0)
            return count + jnp.sum(valid.astype(jnp.int32)), total + jnp.sum(r), squares + jnp.sum(r * r)

        count, total, squares = jax.lax.while_loop(
            more, read, (jnp.int32(M), jnp.sum(r0 - shift), jnp.sum((r0 - shift) ** 2))
        )
        u, v = new - th, new + th - 2 * c
        known = g_sum @ u + 0.5 * u @ (h_sum @ v)
        psi = -0.5 * prec * (new @ new - th @ th) + lq
        delta = float(n) * (shift + total / count) + known + psi
        s2 = s2_of(count, total, squares)
        kz, kl = jax.random.split(kn)
        noise = jnp.sqrt(jnp.maximum(1.0 - s2, 0.0)) * jax.random.normal(kz) + jax.random.logistic(kl)
        return jnp.where(delta + noise > 0, new, th), count

    return step


def bare_runner(step, steps, chains):
    @jax.jit
    def run(thetas, key):
        def body(th, k):
            return jax.vmap(step)(jax.random.split(k, chains), th)

        th, rows = jax.lax.scan(body, thetas, jax.random.split(key, steps))
        return th, jnp.mean(rows.astype(jnp.float32))

    return run


def library_runner(kernel, data, steps, chains):
    temp = jnp.float32(1.0)

    @jax.jit
    def run(states, key):
        def body(st, k):
            st, out = jax.vmap(kernel.step, in_axes=(0, 0, None, None))(jax.random.split(k, chains), st, data, temp)
            return st, out.batch_size

        st, bs = jax.lax.scan(body, states, jax.random.split(key, steps))
        return st, jnp.mean(bs.astype(jnp.float32))

    return run


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 64])
    ap.add_argument(
        "--proposals", nargs="+", default=["random_walk", "independence", "independence_t", "proxy_hmc", "mixture"]
    )
    add_results_option(ap)
    args = ap.parse_args()
    model, data, proxy, cov = setup(args.n)
    props = library_proposals(model, proxy, cov)
    print(
        f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}"
    )
    print(f"logistic regression d={D}, N={args.n:,}, m={M}, MHminibatch, second-order proxy at the mode, K=1")
    widths = [15, 7, 6, 13, 16, 16, 19, 14, 13]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows, values = [], {}
    for kind in args.proposals:
        kernel = build_kernel(model, props[kind], mh_minibatch(M), args.n, proxy)
        for chains in args.chains:
            steps = args.steps  # as many at 64 chains: rare growth (t tails) averages over as many steps
            thetas = jnp.tile(proxy.centre, (chains, 1))
            bare = bare_runner(bare_step(kind, data, args.n, proxy, cov, model.log_prior), steps, chains)
            lib = library_runner(kernel, data, steps, chains)
            t_bare, t_lib, (_, mean_bs) = interleaved_times(
                bare, (thetas, jax.random.key(1)), lib, (jax.vmap(kernel.init)(thetas), jax.random.key(2)), args.repeats
            )
            bare_bs = bare(thetas, jax.random.key(1))[1]
            best_b, best_l = 1e6 * float(np.min(t_bare)) / steps, 1e6 * float(np.min(t_lib)) / steps
            med = float(np.median(t_lib / t_bare))
            rows.append(
                [
                    kind,
                    str(chains),
                    str(steps),
                    f"{best_b:.1f}",
                    f"{best_l:.1f}",
                    f"{float(bare_bs):.1f}",
                    f"{float(mean_bs):.1f}",
                    f"{best_l / best_b:.2f}",
                    f"{med:.2f}",
                ]
            )
            values[f"proxy_step_cost.median_ratio.{kind}.{chains}"] = f"{med:.2f}"
            print(" ".join(c.rjust(w) for c, w in zip(rows[-1], widths)), flush=True)
    save(args.results, "proxy_step_cost", config=args, tables={"proxy_step_cost": table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
