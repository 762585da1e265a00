"""NumPyro GLMs through ``from_numpyro`` + ``auto_sample``, before and after GLM recognition, at N = 10^5.

Two NumPyro models written as a user would, each with an intercept and one covariate (so the posterior has an exact
reference by 2-D quadrature in float64): a Poisson regression with a log-exposure offset and a logistic regression,
priors N(0, 5^2) on both coefficients. Each is fitted twice, each time in a fresh process: ``before``, the conversion
without recognition (``interop.numpyro.convert(recognise=False)``: the general model, Taylor proxy and the penalty
test, as every NumPyro model got before); ``after``, ``from_numpyro`` as it is now (recognised as a GLM: the warm-up's
default is Scalable MH where its bounds predict at most the penalty test's rows). Reported per row: the test the warm-up
chose, rows read per step in sampling, acceptance, the smallest bulk ESS over the coefficients, seconds of the whole fit
(conversion, warm-up, sampling: compilation included), ESS per second of it, and each coefficient's posterior s.d.
against quadrature's (ratio - 1 in %, with the Monte Carlo s.e. of that ratio from the ESS; the reference by Gauss-Hermite quadrature in
float64).

    .venv/bin/python benchmarks/numpyro_glm.py [--n 100000] [--draws 2000] [--results docs/results/numpyro_glm.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
from bench_results import add_results_option, save, table

COLUMNS = [
    "model",
    "conversion",
    "test",
    "rows/step",
    "acceptance",
    "min ESS",
    "fit s",
    "ESS/s",
    "s.d. error a (%)",
    "s.d. error b (%)",
    "MC s.e. (%)",
]
PRIOR = 5.0
TRUTH = {"poisson": (0.3, 0.4), "logistic": (-0.5, 0.8)}


def simulate(family: str, n: int) -> dict:
    """Covariate, exposure and response, seed 0."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal(n).astype(np.float32)
    expo = rng.uniform(0.5, 2.0, n).astype(np.float32)
    a, b = TRUTH[family]
    if family == "poisson":
        y = rng.poisson(np.exp(a + b * z) * expo).astype(np.int32)
    else:
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(a + b * z)))).astype(np.int32)
    return {"z": z, "expo": expo, "y": y}


def numpyro_model(family: str):
    """The model as a NumPyro user writes it."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def poisson(z, expo, y=None):
        a = numpyro.sample("a", dist.Normal(0.0, PRIOR))
        b = numpyro.sample("b", dist.Normal(0.0, PRIOR))
        with numpyro.plate("rows", z.shape[0]):
            numpyro.sample("y", dist.Poisson(jnp.exp(a + b * z) * expo), obs=y)

    def logistic(z, y=None):
        a = numpyro.sample("a", dist.Normal(0.0, PRIOR))
        b = numpyro.sample("b", dist.Normal(0.0, PRIOR))
        with numpyro.plate("rows", z.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=a + b * z), obs=y)

    return poisson if family == "poisson" else logistic


def quadrature_sd(family: str, data: dict, nodes: int = 24) -> np.ndarray:
    """Posterior s.d.s of ``(a, b)`` by a ``nodes x nodes`` Gauss-Hermite rule in float64 in the Laplace-whitened
    coordinates around the Newton mode (the integrand is the posterior over its Laplace fit: smooth and near 1 at
    N = 10^5, so 24 nodes a side are exact to far below the Monte Carlo error)."""
    x = np.column_stack([np.ones_like(data["z"]), data["z"]]).astype(np.float64)
    y = data["y"].astype(np.float64)
    off = np.log(data["expo"].astype(np.float64)) if family == "poisson" else 0.0
    th = np.zeros(2)
    for _ in range(40):
        eta = x @ th + off
        p = np.exp(eta) if family == "poisson" else 1 / (1 + np.exp(-eta))
        h = -(x.T * (p if family == "poisson" else p * (1 - p))) @ x - np.eye(2) / PRIOR**2
        th = th - np.linalg.solve(h, x.T @ (y - p) - th / PRIOR**2)
    chol = np.linalg.cholesky(np.linalg.inv(-h))
    t, wt = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-t^2 / 2)
    u = np.stack([g.ravel() for g in np.meshgrid(t, t, indexing="ij")], 1)
    grid = th + u @ chol.T
    eta = grid @ x.T + off
    ll = (y * eta - np.exp(eta)).sum(1) if family == "poisson" else (y * eta - np.logaddexp(0, eta)).sum(1)
    logp = ll - 0.5 * (grid**2).sum(1) / PRIOR**2 + 0.5 * (u**2).sum(1)  # posterior over the Gauss-Hermite weight
    w = np.outer(wt, wt).ravel() * np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ grid
    return np.sqrt(w @ (grid - mean) ** 2)


def one(family: str, conversion: str, n: int, draws: int) -> dict:
    """One fit in this process: the row's measurements."""
    import arviz as az

    from minibatch_mcmc.interop.numpyro import convert, from_numpyro
    from minibatch_mcmc.warmup import auto_sample

    data = simulate(family, n)
    args = (data["z"], data["expo"], data["y"]) if family == "poisson" else (data["z"], data["y"])
    start = time.perf_counter()
    conv = (
        from_numpyro(numpyro_model(family), *args)
        if conversion == "after"
        else convert(numpyro_model(family), args, {}, recognise=False)
    )
    res, warm = auto_sample(conv.model, conv.data, conv.init, num_samples=draws, num_chains=4, key=0, progress=False)
    seconds = time.perf_counter() - start
    post = {k: np.asarray(res.positions[k]) for k in ("a", "b")}
    ess = {k: float(az.ess(post[k])) for k in post}
    sd = np.array([post[k].std() for k in ("a", "b")])
    return {
        "test": warm.test.name,
        "rows": float(np.mean(res.records["batch_size"])),
        "acceptance": float(np.mean(res.records["accepted"])),
        "ess": min(ess.values()),
        "seconds": seconds,
        "sd": sd.tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)
    add_results_option(parser)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.n, args.draws)))
        return
    rows, values = [], {}
    for family in ("poisson", "logistic"):
        ref = quadrature_sd(family, simulate(family, args.n))
        for conversion in ("before", "after"):
            cmd = [
                sys.executable,
                __file__,
                "--one",
                family,
                conversion,
                "--n",
                str(args.n),
                "--draws",
                str(args.draws),
            ]
            out = json.loads(
                subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            )
            err = 100 * (np.asarray(out["sd"]) / ref - 1)
            se = 100 / np.sqrt(2 * out["ess"])  # s.e. of a s.d. ratio from ESS draws
            row = [
                family,
                conversion,
                out["test"],
                f"{out['rows']:.3g}",
                f"{out['acceptance']:.3f}",
                f"{out['ess']:.0f}",
                f"{out['seconds']:.1f}",
                f"{out['ess'] / out['seconds']:.1f}",
                f"{err[0]:+.2f}",
                f"{err[1]:+.2f}",
                f"{se:.2f}",
            ]
            print(" | ".join(row), flush=True)
            rows.append(row)
            values[f"numpyro_glm_{family}_{conversion}_ess_per_s"] = round(out["ess"] / out["seconds"], 1)
            values[f"numpyro_glm_{family}_{conversion}_rows"] = round(out["rows"], 3)
    save(args.results, "numpyro_glm", config=args, tables={"numpyro_glm": table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
