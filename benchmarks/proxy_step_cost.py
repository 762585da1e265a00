"""Wall time of one jitted step of each proxy-posterior proposal (MHminibatch m=50, Taylor proxy, K=1) against a bare
hand-written JAX step of the same maths, logistic regression d=10, N=10^5, 1 and 64 chains.

The bare step writes out by hand: the proposal (Laplace-shaped random walk; Gaussian or t independence draw and its
log q ratio; proxy HMC leapfrog with the proxy gradient ``grad log p0 + G + H (theta - c)``; the mixture as both
moves and a select, which is what ``vmap`` makes of the library's ``lax.switch``), 50 distinct row indices (the
library's keyed permutation, ``data.indexing.chunk_indices``: the same sampling scheme), the closed-form logistic
residuals ``l_i(theta') - l_i(theta) - [g_i.u + u' H_i v / 2]``, the proxy's data-free sum, the minibatch variance and
a Barker decision with normal plus logistic noise (the library adds its correction-table draw and the check that
the minibatch need not grow). The library step is ``build_kernel(model, proposal, mh_minibatch(50), N, proxy).step``.
Both run inside ``lax.scan``, timed alternately ``--repeats`` times; the table gives the best time of each and the
median of the per-repeat ratios.

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
from minibatch_mcmc.control_variates import proxy_hmc, proxy_independence, taylor_proxy
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.optim.mode import find_mode, laplace_covariance
from minibatch_mcmc.proposals import mixture
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers import build_kernel

D, M, PRIOR = 10, 50, 10.0
HMC_STEPS, HMC_EPS, T_DF = 4, 0.75 * math.pi / 4, 5.0
COLUMNS = ["proposal", "chains", "steps", "bare us/step", "library us/step", "mean batch", "ratio of best", "median ratio"]


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


def bare_step(kind, data, n, proxy, cov):
    """``(key, theta) -> theta`` written by hand for one chain: proposal, residuals, Barker decision."""
    c = proxy.centre
    g_sum, h_sum = proxy.grad_sum, proxy.hess_sum
    chol = jnp.asarray(np.linalg.cholesky(cov), jnp.float32)
    inv_chol = jnp.asarray(np.linalg.inv(np.linalg.cholesky(cov)), jnp.float32)
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
        z = chol @ jax.random.normal(kz, (D,))
        if df is None:
            new = c + z
            lq = lambda x: -0.5 * jnp.sum((inv_chol @ (x - c)) ** 2)
        else:
            new = c + z / jnp.sqrt(2.0 * jax.random.gamma(kw, 0.5 * df) / df)
            lq = lambda x: -0.5 * (df + D) * jnp.log1p(jnp.sum((inv_chol @ (x - c)) ** 2) / df)
        return new, lq(th) - lq(new)

    def mixed(key, th):
        kc, km = jax.random.split(key)
        a, b = hmc(km, th), walk(km, th)
        pick = jax.random.uniform(kc) < 0.8
        return jnp.where(pick, a[0], b[0]), jnp.where(pick, a[1], b[1])

    propose = {"random_walk": walk, "independence": lambda k, t: indep(k, t, None),
               "independence_t": lambda k, t: indep(k, t, T_DF), "proxy_hmc": hmc, "mixture": mixed}[kind]

    def step(key, th):
        kp, ki, kn = jax.random.split(key, 3)
        new, lq = propose(kp, th)
        idx, _ = chunk_indices(ki, jnp.zeros((), jnp.int32), M, n)
        x, y = x_all[idx], y_all[idx]
        z0, z1, zc = x @ th, x @ new, x @ c
        ll = lambda z: y * jax.nn.log_sigmoid(z) - (1 - y) * jnp.log1p(jnp.exp(z))
        s = jax.nn.sigmoid(zc)
        xu, xv = z1 - z0, z1 + z0 - 2 * zc
        resid = ll(z1) - ll(z0) - ((y - s) * xu - 0.5 * s * (1 - s) * xu * xv)
        u, v = new - th, new + th - 2 * c
        known = g_sum @ u + 0.5 * u @ (h_sum @ v)
        psi = -0.5 * prec * (new @ new - th @ th) + lq
        delta = float(n) * jnp.mean(resid) + known + psi
        s2 = float(n) ** 2 * jnp.var(resid) / M
        kz, kl = jax.random.split(kn)
        noise = jnp.sqrt(jnp.maximum(1.0 - s2, 0.0)) * jax.random.normal(kz) + jax.random.logistic(kl)
        return jnp.where(delta + noise > 0, new, th)

    return step


def bare_runner(step, steps, chains):
    @jax.jit
    def run(thetas, key):
        def body(th, k):
            return jax.vmap(step)(jax.random.split(k, chains), th), None

        return jax.lax.scan(body, thetas, jax.random.split(key, steps))[0]

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
    ap.add_argument("--proposals", nargs="+", default=["random_walk", "independence", "independence_t", "proxy_hmc", "mixture"])
    add_results_option(ap)
    args = ap.parse_args()
    model, data, proxy, cov = setup(args.n)
    props = library_proposals(model, proxy, cov)
    print(f"machine: {platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}")
    print(f"logistic regression d={D}, N={args.n:,}, m={M}, MHminibatch, second-order proxy at the mode, K=1")
    widths = [15, 7, 6, 13, 16, 11, 14, 13]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)))
    rows, values = [], {}
    for kind in args.proposals:
        kernel = build_kernel(model, props[kind], mh_minibatch(M), args.n, proxy)
        for chains in args.chains:
            steps = max(20, args.steps // max(1, chains // 16))
            thetas = jnp.tile(proxy.centre, (chains, 1))
            bare = bare_runner(bare_step(kind, data, args.n, proxy, cov), steps, chains)
            lib = library_runner(kernel, data, steps, chains)
            t_bare, t_lib, (_, mean_bs) = interleaved_times(
                bare, (thetas, jax.random.key(1)), lib, (jax.vmap(kernel.init)(thetas), jax.random.key(2)), args.repeats
            )
            best_b, best_l = 1e6 * float(np.min(t_bare)) / steps, 1e6 * float(np.min(t_lib)) / steps
            med = float(np.median(t_lib / t_bare))
            rows.append([kind, str(chains), str(steps), f"{best_b:.1f}", f"{best_l:.1f}", f"{float(mean_bs):.1f}",
                         f"{best_l / best_b:.2f}", f"{med:.2f}"])
            values[f"proxy_step_cost.median_ratio.{kind}.{chains}"] = f"{med:.2f}"
            print(" ".join(c.rjust(w) for c, w in zip(rows[-1], widths)), flush=True)
    save(args.results, "proxy_step_cost", config=args, tables={"proxy_step_cost": table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
