"""The influence search's rounding floor against float64: the exact stratum each rule builds and the blind error it leaves.

On ``heavy_tails.py``'s cases (the warm-up as the library runs it, key 0), every row's deviation at the influence probes
(``control_variates.influence``: ``max_p |e_i(p) - bulk(p)|`` at ``c +- 3 L u``) is taken three ways at the warm-up's own
centre and probes:

- ``floored``: the float32 residuals as the proxy computes them, each row's deviation less ``ROUNDING_ULPS`` units of
  its terms' float32 resolution (``influence.rounding_floors``): what the search did for every proxy before;
- ``as read``: the same residuals with no floor: what it does now for the Taylor and GLM proxies, whose residuals are
  accurate relative to themselves (``Estimator.subtracts_rows`` False);
- ``float64``: the Taylor remainder of the proxy's order recomputed in float64 (the model's log-likelihood at the probe
  minus its value and directional derivatives at the centre, by forward-mode autodiff with x64 on): the truth.

For each, the stratum the search's rule picks from all rows (the fewest largest deviations such that the next
``W = ceil(N / m)`` sum to at most the tolerance, 0.1 nats; ``m`` the test's 50 rows), and the float64 blind error each
stratum leaves (the float64 deviations of the ``W`` largest rows outside it): a rule whose stratum leaves more than the
tolerance has missed rows the minibatch cannot see.

    .venv/bin/python benchmarks/influence_floor.py --n 300000 [--cases robust_nu poisson rare groups] \
        [--results docs/results/influence_floor.json]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from heavy_tails import CASES
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates.influence import (
    probe_points,
    probe_residuals,
    probe_steps,
    rounding_floors,
)
from minibatch_mcmc.control_variates.top_deviations import stratum_size
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.warmup import warmup

CHUNK = 1 << 15
TOLERANCE, BATCH, CAP = 0.1, 50, 1000
COLUMNS = ["case", "N", "rows within the floor", "rule", "stratum rows", "blind error (own)", "blind error (float64)"]


def float32_deviations(model, proxy, data: dict, points: jax.Array) -> tuple[np.ndarray, np.ndarray]:
    """Every row's float32 residuals at ``points`` (shape ``(P, N)``) and its rounding floor (nats)."""
    c, unravel = proxy.flat_centre()
    fn = jax.jit(
        lambda rows: (probe_residuals(model, proxy, points, rows), rounding_floors(model, c, unravel, rows, c.dtype))
    )
    n = data["y"].shape[0]
    parts = [fn(take(data, jnp.arange(s, min(s + CHUNK, n)))) for s in range(0, n, CHUNK)]
    return np.concatenate([np.asarray(e, np.float64) for e, _ in parts], axis=1), np.concatenate(
        [np.asarray(f, np.float64) for _, f in parts]
    )


def float64_residuals(model, centre: np.ndarray, order: int, data: dict, points: np.ndarray) -> np.ndarray:
    """The Taylor remainder of order ``order`` at ``points`` for every row, in float64 (shape ``(P, N)``)."""
    with jax.enable_x64(True):
        c = jnp.asarray(centre, jnp.float64)
        _, unravel = ravel_pytree(c)

        def one(rows, p):
            f = lambda x: model.log_lik(unravel(x), rows)  # noqa: E731
            u = p - c
            terms, g = f(c), f
            total = f(p) - terms
            for j in range(1, order + 1):
                g = (lambda h: lambda x: jax.jvp(h, (x,), (u,))[1])(g)
                total = total - g(c) / math.factorial(j)
            return total

        fn = jax.jit(lambda rows, ps: jax.vmap(lambda p: one(rows, p))(ps))
        n = data["y"].shape[0]
        ps = jnp.asarray(points, jnp.float64)
        out = []
        for s in range(0, n, CHUNK):
            rows = {k: widened(np.asarray(v[s : s + CHUNK])) for k, v in data.items()}
            out.append(np.asarray(fn(rows, ps), np.float64))
        return np.concatenate(out, axis=1)


def widened(a: np.ndarray) -> jax.Array:
    """A data column in float64 if it is floating (group indices stay integers)."""
    return jnp.asarray(a, jnp.float64) if np.issubdtype(a.dtype, np.floating) else jnp.asarray(a)


def deviations(e: np.ndarray) -> np.ndarray:
    """``max_p |e_i(p) - median_j e_j(p)|`` per row."""
    return np.max(np.abs(e - np.median(e, axis=1, keepdims=True)), axis=0)


def stratum(dev: np.ndarray, window: int) -> np.ndarray:
    """The rows the search's rule puts in the stratum from ``dev`` (all rows known): the fewest largest, up to ``CAP``."""
    order = np.argsort(-dev, kind="stable")
    return order[: stratum_size(dev[order], window, dev.size, CAP, TOLERANCE)]


def blind_left(dev: np.ndarray, rows: np.ndarray, window: int) -> float:
    """The sum of the ``window`` largest of ``dev`` outside ``rows``."""
    rest = np.delete(dev, rows)
    return float(np.sum(np.sort(rest)[::-1][:window]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--cases", nargs="+", default=["robust_nu", "poisson", "rare", "groups"], choices=sorted(CASES))
    parser.add_argument("--name", default="influence_floor")
    add_results_option(parser)
    args = parser.parse_args()
    rows, values = [], {}
    for name in args.cases:
        t = time.perf_counter()
        model, data, theta0 = CASES[name](args.n, np.random.default_rng(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = warmup(model, data, jnp.asarray(theta0, jnp.float32), key=0)
        proxy = w.proxy
        c = np.asarray(proxy.flat_centre()[0], np.float64)
        steps = probe_steps(np.linalg.cholesky(np.asarray(w.covariance, np.float64)), jax.random.key(0))
        points = probe_points(proxy.flat_centre()[0], steps)
        e32, floor = float32_deviations(model, proxy, data, points)
        e64 = float64_residuals(model, c, proxy.order, data, np.asarray(points, np.float64))
        read, truth = deviations(e32), deviations(e64)
        floored = np.maximum(read - floor, 0.0)
        window = math.ceil(args.n / BATCH)
        within = float(np.mean(read <= floor))
        for rule, dev in (("floored", floored), ("as read", read), ("float64", truth)):
            kept = stratum(dev, window)
            row = [name, args.n, f"{within:.3f}", rule, kept.size, f"{blind_left(dev, kept, window):.4f}"]
            row.append(f"{blind_left(truth, kept, window):.4f}")
            rows.append(row)
            key = f"{args.name}.{name}.{rule.replace(' ', '_')}"
            values.update({f"{key}.stratum_rows": int(kept.size), f"{key}.blind_own": float(row[-2])})
            values[f"{key}.blind64"] = float(row[-1])
            print(" | ".join(map(str, row)), flush=True)
        print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)
        save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
