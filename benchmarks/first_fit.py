"""A first fit as a NumPyro user makes it: four models written in NumPyro, ``auto_sample`` against NumPyro's NUTS and HMCECS.

Models (each with ``numpyro.plate("data", N)``, the rows read through ``numpyro.subsample`` so HMCECS can
subsample them and the others see all of them):

- ``robust``: Student-t (nu = 4) regression, 5 covariates, intercept, ``s ~ HalfNormal(2)``;
- ``poisson``: Poisson GLM with a log-exposure offset and 5 correlated covariates (AR(1), rho = 0.7);
- ``logistic``: logistic regression, 10 covariates, ``tau ~ HalfCauchy(1)``, ``beta ~ Normal(0, tau)``;
- ``mixture``: two Gaussian components with ordered means (``mu_1``, ``mu_2 = mu_1 + gap``, ``gap ~ HalfNormal``),
  a shared scale and a weight ``w ~ Beta(2, 2)``.

Methods, side by side in one run on the same data, 4 chains each, every second counted (model conversion,
optimisation, warm-up, compilation, sampling):

- ``auto_sample``: ``from_numpyro`` then ``auto_sample(..., num_samples=--draws, num_chains=4)`` (defaults: proxy HMC and
  the penalty test since issue 21, proxy-gradient MALA and MHminibatch before; the proposal ``mixture`` where the
  warm-up finds an exact stratum or several modes, the rule of ``laplace_moves.default_kind``, named with its reason in
  "of which"; ``--proposals`` and ``--test`` name others,
  the test one of ``acceptance.registry.TESTS``, e.g. ``mhminibatch``);
- NUTS: ``MCMC(NUTS(model), num_warmup=500, num_samples=1000, num_chains=4, chain_method="vectorized")``;
- HMCECS: ``HMCECS(NUTS(model), num_blocks=100, proxy=HMCECS.taylor_proxy(MAP))``, the MAP from SVI with
  ``AutoDelta`` on minibatches of ``--subsample`` rows (its time counted), rows subsampled ``--subsample`` at a
  time, the same 500 + 1000 steps, chains run one after another (HMCECS's ``init`` splits a single key, so
  NumPyro 0.22 cannot vectorize its chains; on 2 cores that costs it little, its compiled step being shared).

Reported per model and method: seconds (and where ``auto_sample``'s went: each warm-up phase, sampling), min bulk ESS over every scalar of every latent site (ArviZ), ESS/s,
the min ESS of the centred squares (what a variance or an interval width gets: a move that mixes the mean well by
jumping to the far side can still mix the squares slowly) and its ratio to NUTS's,
and against NUTS the largest |mean - mean_NUTS| / sd_NUTS and |sd / sd_NUTS - 1| over the scalars.
The ratios ``ESS/s / ESS/s of NUTS`` (and of HMCECS) are the issue-21 targets (>= 3x NUTS at 10^5,
>= 30x NUTS and HMCECS at 10^6).

    .venv/bin/python benchmarks/first_fit.py --n 100000 [--models robust poisson] [--results docs/results/first_fit.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from bench_results import add_results_option, save_rows
from numpyro.infer import HMCECS, MCMC, NUTS, SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoDelta

from minibatch_mcmc.acceptance.registry import TESTS
from minibatch_mcmc.interop import from_numpyro
from minibatch_mcmc.warmup import DEFAULT_TEST, auto_sample

COLUMNS = [
    "N",
    "model",
    "method",
    "seconds",
    "min ESS",
    "ESS/s",
    "x NUTS",
    "min ESS sq",
    "x NUTS sq",
    "max |mean err|/sd",
    "max |sd ratio - 1|",
    "of which",
]


def robust(x, y, sub=None):
    """Student-t regression with a HalfNormal scale."""
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 5.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([x.shape[1]]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    with numpyro.plate("data", x.shape[0], subsample_size=sub):
        xb, yb = numpyro.subsample(x, event_dim=1), numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.StudentT(4.0, alpha + xb @ beta, s), obs=yb)


def poisson(x, log_exposure, y, sub=None):
    """Poisson GLM with an exposure offset."""
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 2.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0], subsample_size=sub):
        xb, eb, yb = (numpyro.subsample(v, event_dim=e) for v, e in ((x, 1), (log_exposure, 0), (y, 0)))
        numpyro.sample("y", dist.Poisson(jnp.exp(eb + alpha + xb @ beta)), obs=yb)


def logistic(x, y, sub=None):
    """Logistic regression with a hierarchical prior scale."""
    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, tau).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("data", x.shape[0], subsample_size=sub):
        xb, yb = numpyro.subsample(x, event_dim=1), numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.Bernoulli(logits=xb @ beta), obs=yb)


def mixture(y, sub=None):
    """Two Gaussian components with ordered means."""
    mu1 = numpyro.sample("mu1", dist.Normal(0.0, 5.0))
    gap = numpyro.sample("gap", dist.HalfNormal(5.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    w = numpyro.sample("w", dist.Beta(2.0, 2.0))
    mu = numpyro.deterministic("mu", jnp.stack([mu1, mu1 + gap]))
    with numpyro.plate("data", y.shape[0], subsample_size=sub):
        yb = numpyro.subsample(y, event_dim=0)
        mix = dist.MixtureSameFamily(dist.Categorical(probs=jnp.stack([w, 1.0 - w])), dist.Normal(mu, sigma))
        numpyro.sample("y", mix, obs=yb)


def make_data(name: str, n: int, seed: int = 0) -> tuple:
    """Simulated rows for model ``name`` (float32)."""
    rng = np.random.default_rng(seed)
    f = lambda a: np.asarray(a, np.float32)  # noqa: E731
    if name == "robust":
        x = rng.normal(size=(n, 5))
        y = 0.5 + x @ np.array([1.0, -0.5, 0.25, 0.0, 0.8]) + 0.7 * rng.standard_t(4, size=n)
        return f(x), f(y)
    if name == "poisson":
        cov = 0.7 ** np.abs(np.subtract.outer(np.arange(5), np.arange(5)))
        x = rng.multivariate_normal(np.zeros(5), cov, size=n) * 0.5
        log_exposure = np.log(rng.uniform(0.5, 2.0, size=n))
        y = rng.poisson(np.exp(log_exposure + 0.3 + x @ np.array([0.4, -0.3, 0.2, 0.0, 0.1])))
        return f(x), f(log_exposure), f(y)
    if name == "logistic":
        x = rng.normal(size=(n, 10))
        beta = rng.normal(size=10) * 0.5
        y = rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(x @ beta)))
        return f(x), f(y)
    if name == "mixture":
        z = rng.uniform(size=n) < 0.3
        return (f(np.where(z, rng.normal(-1.0, 1.0, n), rng.normal(2.0, 1.0, n))),)
    raise ValueError(f"unknown model {name!r}")


MODELS = {"robust": robust, "poisson": poisson, "logistic": logistic, "mixture": mixture}


def scalars(samples: dict, names: list[str]) -> dict[str, np.ndarray]:
    """``{site[i]: (chain, draw)}`` for every scalar of the named sites."""
    out = {}
    for name in names:
        a = np.asarray(samples[name], np.float64)
        flat = a.reshape(a.shape[:2] + (-1,))
        for i in range(flat.shape[-1]):
            out[f"{name}[{i}]" if flat.shape[-1] > 1 else name] = flat[..., i]
    return out


def min_ess(draws: dict[str, np.ndarray]) -> float:
    """Minimum ArviZ bulk ESS over the scalars."""
    import arviz as az

    return min(float(az.ess(v, method="bulk")) for v in draws.values())


def min_ess_squares(draws: dict[str, np.ndarray]) -> float:
    """Minimum ArviZ mean-ESS of the centred squares ``(x - mean)^2`` over the scalars: what a variance estimate gets."""
    import arviz as az

    return min(float(az.ess((v - v.mean()) ** 2, method="mean")) for v in draws.values())


def errors(draws: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[float, float]:
    """Largest |mean - mean_ref| / sd_ref and |sd / sd_ref - 1| over the scalars."""
    mean_err = max(abs(draws[k].mean() - reference[k].mean()) / reference[k].std() for k in reference)
    sd_err = max(abs(draws[k].std() / reference[k].std() - 1.0) for k in reference)
    return float(mean_err), float(sd_err)


def run_auto(
    model, args, draws: int, chains: int, proposal: str | None = None, test: str | None = None
) -> tuple[dict, float, str]:
    """``from_numpyro`` + ``auto_sample`` (its proxy check after sampling included): constrained draws by site, all the
    seconds, and where they went."""
    start = time.perf_counter()
    conv = from_numpyro(model, *args)
    res, w = auto_sample(
        conv.model,
        conv.data,
        conv.init,
        num_samples=draws,
        num_chains=chains,
        key=1,
        progress=False,
        proposal=proposal,
        test=test,
    )
    seconds = time.perf_counter() - start
    phases = ", ".join(f"{k} {c.seconds:.1f}" for k, c in w.cost.items())
    split = f"{w.kind} ({w.why}); warm-up {w.total_seconds:.1f} s ({phases}), sampling {res.wall_time:.1f} s"
    return {k: np.asarray(v) for k, v in res.positions.items()}, seconds, split


def run_nuts(model, args, chains: int, warm: int, draws: int) -> tuple[dict, float]:
    """NumPyro NUTS on all rows, chains vectorized."""
    start = time.perf_counter()
    mcmc = MCMC(
        NUTS(model),
        num_warmup=warm,
        num_samples=draws,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(2), *args)
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return samples, time.perf_counter() - start, ""


def run_hmcecs(model, args, chains: int, warm: int, draws: int, sub: int) -> tuple[dict, float]:
    """HMCECS with a second-order Taylor proxy at an SVI MAP estimate on minibatches (its time counted)."""
    start = time.perf_counter()
    guide = AutoDelta(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    fit = svi.run(jax.random.PRNGKey(3), 3000, *args, sub=sub, progress_bar=False)
    map_seconds = time.perf_counter() - start
    ref = guide.median(fit.params)
    kernel = HMCECS(NUTS(model), num_blocks=100, proxy=HMCECS.taylor_proxy(ref))
    mcmc = MCMC(
        kernel, num_warmup=warm, num_samples=draws, num_chains=chains, chain_method="sequential", progress_bar=False
    )
    mcmc.run(jax.random.PRNGKey(4), *args, sub=sub)
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return samples, time.perf_counter() - start, f"SVI MAP {map_seconds:.1f} s"


def main() -> None:
    """Run every model at every N with the three methods and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument(
        "--methods", nargs="+", default=["auto_sample", "NUTS", "HMCECS"], choices=["auto_sample", "NUTS", "HMCECS"]
    )
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=2000, help="auto_sample's draws per chain")
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-draws", type=int, default=1000)
    ap.add_argument("--subsample", type=int, default=1000, help="HMCECS's (and its SVI MAP's) rows per step")
    ap.add_argument(
        "--proposals",
        nargs="+",
        default=[None],
        help="auto_sample's proposal(s) (default: auto_sample's rule, "
        "proxy_hmc or mixture); with several, one row each, named auto_sample[proposal]",
    )
    ap.add_argument(
        "--test",
        default=None,
        choices=list(TESTS),
        help="auto_sample's acceptance test by name (default: auto_sample's own, " + DEFAULT_TEST + ")",
    )
    ap.add_argument("--name", default="first_fit", help="results table name (a second run's file needs its own)")
    add_results_option(ap)
    args = ap.parse_args()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].device_kind}, jax {jax.__version__}, numpyro {numpyro.__version__}, matmul precision {jax.config.jax_default_matmul_precision or 'default'}"
    print(f"machine: {machine}; load average at start {os.getloadavg()}")
    widths = [8, 9, 12, 8, 8, 8, 7, 10, 9, 18, 18, 1]
    print(" ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)), flush=True)
    rows, values = [], {}
    for n in args.n:
        for name in args.models:
            model, data = MODELS[name], make_data(name, n)
            found = {}
            runs = {
                "NUTS": lambda: run_nuts(model, data, args.chains, args.nuts_warmup, args.nuts_draws),
                "HMCECS": lambda: run_hmcecs(
                    model, data, args.chains, args.nuts_warmup, args.nuts_draws, args.subsample
                ),
            }
            if "auto_sample" in args.methods:
                for p in args.proposals:
                    label = "auto_sample" if len(args.proposals) == 1 else f"auto_sample[{p}]"
                    runs[label] = lambda p=p: run_auto(model, data, args.draws, args.chains, p, args.test)
            for method in [m for m in runs if m.split("[")[0] in args.methods]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        found[method] = runs[method]()
                        print(f"  ({name}, N={n}: {method} took {found[method][1]:.1f} s)", flush=True)
                    except Exception as err:  # a failed method is a row of the table, not the end of the run
                        rows.append(
                            [
                                f"{n:.0e}",
                                name,
                                method,
                                "failed",
                                "",
                                "",
                                "",
                                "",
                                "",
                                f"{type(err).__name__}: {err}"[:120],
                                "",
                                "",
                            ]
                        )
                        print(" ".join(rows[-1]), flush=True)
            if not found:
                continue
            names = sorted(k for k in found[next(iter(found))][0] if k != "mu" or name != "mixture")
            ref = scalars(found["NUTS"][0], names) if "NUTS" in found else None
            rate, rate_sq = {}, {}
            for method, (samples, seconds, split) in found.items():
                draws = scalars(samples, names)
                ess = min_ess(draws)
                rate[method] = ess / seconds
                ratio = rate[method] / rate["NUTS"] if "NUTS" in rate else float("nan")
                ess_sq = min_ess_squares(draws)
                rate_sq[method] = ess_sq / seconds
                ratio_sq = rate_sq[method] / rate_sq["NUTS"] if "NUTS" in rate_sq else float("nan")
                mean_err, sd_err = errors(draws, ref) if ref is not None else (float("nan"), float("nan"))
                rows.append(
                    [
                        f"{n:.0e}",
                        name,
                        method,
                        f"{seconds:.1f}",
                        f"{ess:.0f}",
                        f"{rate[method]:.1f}",
                        f"{ratio:.2f}",
                        f"{ess_sq:.0f}",
                        f"{ratio_sq:.2f}",
                        f"{mean_err:.3f}",
                        f"{sd_err:.3f}",
                        split,
                    ]
                )
                print(" ".join(c.rjust(w) for c, w in zip(rows[-1], widths)), flush=True)
                key = f"{args.name}.{n}.{name}.{method}"
                values[f"{key}.ess_per_s"] = f"{rate[method]:.1f}"
                values[f"{key}.ess_sq_per_s"] = f"{rate_sq[method]:.1f}"
            for auto in [m for m in rate if m.startswith("auto_sample")]:
                for other in ("NUTS", "HMCECS"):
                    if other in rate:
                        label = f"{args.name}.{n}.{name}.{auto.replace('auto_sample', 'auto')}"
                        values[f"{label}_over_{other}"] = f"{rate[auto] / rate[other]:.2f}"
                        values[f"{label}_sq_over_{other}"] = f"{rate_sq[auto] / rate_sq[other]:.2f}"
            save_rows(
                args, COLUMNS, rows, values, machine, complete=False
            )  # each finished model kept if a later one is cut off
    print(f"load average at end {os.getloadavg()}")
    save_rows(args, COLUMNS, rows, values, machine, complete=True)


if __name__ == "__main__":
    main()
