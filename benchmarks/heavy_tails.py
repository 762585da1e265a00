"""Heavy tails and rare groups: uniform vs importance-sampled minibatches vs an exact test, against full-data NUTS.

Cases (simulated to look like real tables; ``--n`` rows each, float32):

- ``robust``: Student-t regression (``nu = 2``, ``sigma = 1`` fixed: a GLM, so the exact tests apply), intercept and
  three covariates, a right-skewed heavy-tailed response: lognormal(0, 0.5) - 1 noise, and with probability 0.07 an
  exponential of scale 5 instead (about 1% of rows beyond 10 scale units);
- ``robust_nu``: the same kind of response, as issue 32 asks, with ``nu`` and ``sigma`` estimated: ``y = X beta + e``,
  ``e`` lognormal(0, 0.5) (70%), exponential of mean 2 (29%) or lognormal(3, 0.5) (1%: beyond 10 scale units);
  ``StudentT(nu, X beta, sigma)``, ``theta = (beta, log sigma, log nu)``, ``beta ~ N(0, 10^2)``, ``sigma ~ HalfNormal(50)``,
  ``nu ~ Gamma(2, 0.1)`` (not a GLM: no Scalable MH);
- ``poisson``: Poisson regression (log link), intercept and two covariates, 0.1% of rows with a huge count (Poisson(200));
- ``rare``: logistic regression, intercept, two covariates and a binary feature set in 30 rows only;
- ``groups``: logistic regression with 16 group intercepts in centred form ``a_g ~ N(mu, tau)`` (``mu ~ N(0, 2^2)``,
  ``log tau ~ N(0, 1)``) and two covariates, group sizes in geometric progression from about 30 rows (a GLM: ``mu``
  and ``log tau`` enter the prior only).

Methods, each timed from the data to the draws (warm-up, the weights pass, batch sizing, compilation, sampling):

- ``uniform``: ``warmup``'s proxy (and stratum) with a uniform minibatch, the penalty test sized by
  ``batch_choice`` for it;
- ``importance``: the same proxy with rows drawn by their probe weights (``control_variates.importance``: the warm-up's
  own where its rule chose them, else built here, the pass timed), the penalty test sized for it;
- ``unsized``: as ``uniform`` at the test's own 50 rows, not sized (what the sizing's prediction is calibrated against:
  the ``predicted acceptance error`` column at the ``m`` used, against the check's ``decisions differed``, the fraction of
  its coupled steps at which the run's and the exact test's decisions differed, and against the draws' agreement);
- ``smh``: ``warmup(test="smh")``: the GLM proxy's per-row bounds and Scalable MH (exact);
- the reference (``--reference nuts``): NumPyro NUTS on the full data (tree depth at most 6), ``--nuts-warmup`` +
  ``--nuts-draws`` per chain, 4 chains vectorised (its time too); or (``--reference mh``, for N where NUTS takes too
  long on the CPU) the library's exact full-data Metropolis test with the warm-up's proposal (proxy HMC), 4 chains x
  ``--ref-draws`` from Laplace starts, the first 10% dropped.

Reported: the warm-up's passes over N (all its phases), rows read per test (the minibatch and any stratum), acceptance,
min bulk ESS over the parameters (ArviZ), ESS/s (the check's seconds not counted), against the reference the largest
``|mean - mean_ref| / sd_ref`` and ``|sd / sd_ref - 1|``, the largest of each parameter's error over its Monte Carlo s.e.
(both runs' ESS; ``z`` below 3: agreement) and the largest s.e. of the s.d. ratio (the power: an s.d. error of twice it
is seen); and the check after sampling (``diagnostics.posterior_error``, on the run's own draws and keys): whether it
warned, its largest estimated s.d. error, its seconds.

    .venv/bin/python benchmarks/heavy_tails.py --n 100000 [--cases robust rare] [--results docs/results/heavy_tails.json]
        [--reference mh --ref-draws 3000] [--methods uniform importance] [--name heavy_tails]  (the table's name: cases run in two processes write two tables)
        [--no-check]  (the check after sampling skipped: its columns say "not run")
        [--warmup-only]  (each case's warm-up alone: its passes over N per phase, one table)
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from jax.scipy.special import gammaln

from minibatch_mcmc.acceptance.exact import MetropolisTest
from minibatch_mcmc.control_variates.importance import ImportanceProxy, importance_sample, probe_weights
from minibatch_mcmc.diagnostics.posterior_error import check_posterior
from minibatch_mcmc.models import (
    GLMSpec,
    Model,
    SharedTerm,
    logistic_regression,
    poisson_regression,
    student_t_regression,
)
from minibatch_mcmc.models.logistic import logistic_log_lik
from minibatch_mcmc.models.shared_term import student_t_rows, student_t_value
from minibatch_mcmc.samplers import sample
from minibatch_mcmc.warmup import warmup
from minibatch_mcmc.warmup.batch_choice import choose_batch_size

COLUMNS = [
    "case",
    "N",
    "method",
    "warm-up passes",
    "m",
    "rows/test",
    "acceptance",
    "seconds",
    "warm-up s",
    "sampling s",
    "min ESS",
    "ESS/s",
    "max |mean err|/sd",
    "max |sd ratio - 1|",
    "max z",
    "s.d. ratio s.e.",
    "check warned",
    "check's max s.d. error",
    "check s",
    "predicted acceptance error",
    "decisions differed",
    "weights",
]
GROUPS, PRIOR = 16, 5.0


def robust_case(n: int, rng: np.random.Generator) -> tuple[Model, dict, np.ndarray]:
    """Student-t regression on a lognormal-exponential response."""
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 3))])
    noise = np.where(rng.random(n) < 0.07, rng.exponential(5.0, n), rng.lognormal(0.0, 0.5, n) - 1.0)
    y = x @ np.array([1.0, 0.5, -0.3, 0.2]) + noise
    return (
        student_t_regression(nu=2.0, sigma=1.0, prior_scale=10.0),
        {"x": x.astype(np.float32), "y": y.astype(np.float32)},
        np.zeros(4),
    )


def robust_nu_model() -> Model:
    """``StudentT(nu, X beta, sigma)`` with ``theta = (beta, log sigma, log nu)`` and issue 32's priors (with the logs' Jacobians),
    its normalising terms declared as ``Model.shared`` (``models.shared_term``)."""

    def log_prior(theta):
        beta, ls, ln = theta[:4], theta[4], theta[5]
        return -0.5 * jnp.sum((beta / 10.0) ** 2) - 0.5 * (jnp.exp(ls) / 50.0) ** 2 + ls + 2.0 * ln - 0.1 * jnp.exp(ln)

    def log_lik(theta, batch):
        beta, ls, nu = theta[:4], theta[4], jnp.exp(theta[5])
        z = (batch["y"] - batch["x"] @ beta) * jnp.exp(-ls)
        return (
            gammaln(0.5 * (nu + 1.0))
            - gammaln(0.5 * nu)
            - 0.5 * jnp.log(nu * jnp.pi)
            - ls
            - 0.5 * (nu + 1.0) * jnp.log1p(z * z / nu)
        )

    def rows(theta, batch):
        return student_t_rows(batch["y"] - batch["x"] @ theta[:4], theta[4], theta[5])

    def value(theta):
        return student_t_value(theta[4], theta[5])

    # the normalising terms declared apart: their difference is computed once, not taken from each row's float32 value
    return Model(log_prior, log_lik, "robust_t_nu_sigma", shared=SharedTerm(value, rows))


def robust_nu_case(n: int, rng: np.random.Generator) -> tuple[Model, dict, np.ndarray]:
    """Student-t regression, ``nu`` and ``sigma`` estimated, on a lognormal-exponential response with 1% far rows."""
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 3))])
    kind = rng.choice(3, size=n, p=[0.70, 0.29, 0.01])
    e = np.where(
        kind == 0, rng.lognormal(0.0, 0.5, n), np.where(kind == 1, rng.exponential(2.0, n), rng.lognormal(3.0, 0.5, n))
    )
    y = x @ np.array([1.0, 0.5, -0.3, 0.2]) + e
    return robust_nu_model(), {"x": x.astype(np.float32), "y": y.astype(np.float32)}, np.array([0.0, 0, 0, 0, 0, 1.0])


def poisson_case(n: int, rng: np.random.Generator) -> tuple[Model, dict, np.ndarray]:
    """Poisson regression with 0.1% huge counts."""
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    y = rng.poisson(np.exp(x @ np.array([0.5, 0.3, -0.2])))
    huge = rng.random(n) < 1e-3
    y[huge] = rng.poisson(200.0, huge.sum())
    return poisson_regression(prior_scale=PRIOR), {"x": x.astype(np.float32), "y": y.astype(np.int32)}, np.zeros(3)


def rare_case(n: int, rng: np.random.Generator) -> tuple[Model, dict, np.ndarray]:
    """Logistic regression with a feature set in 30 rows."""
    rare = np.zeros(n)
    rare[rng.choice(n, 30, replace=False)] = 1.0
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 2)), rare])
    y = rng.random(n) < 1 / (1 + np.exp(-(x @ np.array([-1.0, 0.5, -0.5, 2.0]))))
    return logistic_regression(prior_scale=PRIOR), {"x": x.astype(np.float32), "y": y.astype(np.int32)}, np.zeros(4)


def group_sizes(n: int, smallest: int = 30) -> np.ndarray:
    """16 sizes in geometric progression from ``smallest`` summing to ``n``."""
    lo, hi = 1.0, 4.0
    for _ in range(100):
        r = 0.5 * (lo + hi)
        lo, hi = (r, hi) if smallest * np.sum(r ** np.arange(GROUPS)) < n else (lo, r)
    sizes = np.floor(smallest * r ** np.arange(GROUPS)).astype(int)
    sizes[-1] += n - sizes.sum()
    return sizes


def groups_prior(theta: jax.Array) -> jax.Array:
    """``mu ~ N(0, 2^2)``, ``log tau ~ N(0, 1)``, ``a_g ~ N(mu, tau)`` (centred), ``beta ~ N(0, 5^2)``."""
    mu, log_tau, a, beta = theta[0], theta[1], theta[2 : 2 + GROUPS], theta[2 + GROUPS :]
    return (
        -0.5 * (mu / 2.0) ** 2
        - 0.5 * log_tau**2
        - GROUPS * log_tau
        - 0.5 * jnp.sum((a - mu) ** 2) * jnp.exp(-2 * log_tau)
        - 0.5 * jnp.sum(beta**2) / PRIOR**2
    )


def groups_case(n: int, rng: np.random.Generator) -> tuple[Model, dict, np.ndarray]:
    """Centred 16-group logistic: ``x_i`` = two zero columns (``mu``, ``log tau``), the group's indicator, two covariates."""
    g = np.repeat(np.arange(GROUPS), group_sizes(n))
    rng.shuffle(g)
    z = rng.standard_normal((n, 2))
    a = rng.normal(-0.5, 1.0, GROUPS)
    y = rng.random(n) < 1 / (1 + np.exp(-(a[g] + z @ np.array([0.4, -0.3]))))
    x = np.zeros((n, 2 + GROUPS + 2))
    x[np.arange(n), 2 + g] = 1.0
    x[:, -2:] = z
    model = Model(groups_prior, logistic_log_lik, "groups_logistic", glm=GLMSpec("logistic"))
    theta0 = np.zeros(2 + GROUPS + 2)
    return model, {"x": x.astype(np.float32), "y": y.astype(np.int32)}, theta0


CASES = {
    "robust": robust_case,
    "robust_nu": robust_nu_case,
    "poisson": poisson_case,
    "rare": rare_case,
    "groups": groups_case,
}


def nuts_reference(model: Model, data: dict, theta0: np.ndarray, warm: int, draws: int) -> tuple[np.ndarray, float]:
    """NumPyro NUTS on the full data: draws ``(4, draws, d)`` and seconds."""
    from numpyro.infer import MCMC, NUTS

    jdata = jax.tree_util.tree_map(jnp.asarray, data)

    def potential(theta):
        return -(model.log_prior(theta) + jnp.sum(model.log_lik(theta, jdata)))

    t = time.perf_counter()
    mcmc = MCMC(
        NUTS(potential_fn=potential, max_tree_depth=6),
        num_warmup=warm,
        num_samples=draws,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    starts = jnp.asarray(theta0 + 0.01 * np.random.default_rng(1).standard_normal((4, theta0.size)), jnp.float32)
    mcmc.run(jax.random.key(2), init_params=starts)
    return np.asarray(mcmc.get_samples(group_by_chain=True), np.float64), time.perf_counter() - t


def mh_reference(model: Model, data: dict, w, draws: int) -> tuple[np.ndarray, float]:
    """The exact full-data Metropolis test with the warm-up's proposal, 4 chains from Laplace starts: draws (first 10%
    dropped) and seconds (the warm-up's not counted: it is the methods')."""
    t = time.perf_counter()
    chol = np.linalg.cholesky(w.covariance)
    starts = jnp.asarray(
        np.asarray(w.centre) + (chol @ np.random.default_rng(7).standard_normal((chol.shape[0], 4))).T, jnp.float32
    )
    res = sample(
        model,
        data,
        starts,
        proposal=w.proposal,
        test=MetropolisTest(),
        num_samples=draws,
        num_chains=4,
        key=7,
        batched_init=True,
        progress=False,
    )
    return np.asarray(res.positions, np.float64)[:, draws // 10 :], time.perf_counter() - t


def agreement(draws: np.ndarray, ref: np.ndarray) -> tuple[float, float, float, float]:
    """Largest ``|mean - mean_ref| / sd_ref`` and ``|sd / sd_ref - 1|`` over the parameters, the largest error over its
    Monte Carlo s.e. (both runs' ESS; the s.d.'s from each run's kurtosis), and the largest s.e. of the s.d. ratio."""
    flat, rflat = draws.reshape(-1, draws.shape[-1]), ref.reshape(-1, ref.shape[-1])
    sd = rflat.std(axis=0)
    ess, ress = per_parameter_ess(draws), per_parameter_ess(ref)
    dm, ds = np.abs(flat.mean(0) - rflat.mean(0)) / sd, np.abs(flat.std(0) / sd - 1)
    dm_se = np.sqrt(1 / ess + 1 / ress)
    kurt = lambda f: np.mean(((f - f.mean(0)) / f.std(0)) ** 4, axis=0)  # noqa: E731
    ds_se = np.sqrt((kurt(flat) - 1) / (4 * ess) + (kurt(rflat) - 1) / (4 * ress))
    return (
        float(np.max(dm)),
        float(np.max(ds)),
        float(max(np.max(dm / dm_se), np.max(ds / ds_se))),
        float(np.max(ds_se)),
    )


def per_parameter_ess(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS of each parameter (ArviZ)."""
    return np.asarray(az.ess(az.convert_to_dataset(draws)).to_array().values).ravel()


def min_ess(draws: np.ndarray) -> float:
    """Min bulk ESS over the parameters (ArviZ)."""
    return float(np.min(az.ess(az.convert_to_dataset(draws)).to_array().values))


def run_method(model, data, w, estimator, key, draws, sized_seconds, size: bool = True, check: bool = True) -> dict:
    """Size the penalty test's minibatch for ``estimator`` (``size``; else the test's own 50 rows, the prediction there
    recorded), sample 4 chains from Laplace starts, and time it all (``check``: then run the check after sampling)."""
    t = time.perf_counter()
    chol = np.linalg.cholesky(w.covariance)
    test, predicted = w.test, float("nan")
    if hasattr(test, "batch_size"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            choice = choose_batch_size(model, as_source(data), estimator, w.centre, chol, 50, jax.random.key(key))
        test = test._replace(batch_size=choice.batch_size if size else 50)
        predicted = choice.predicted_error if size else choice.initial_error
    sized = time.perf_counter() - t + sized_seconds
    starts = jnp.asarray(
        np.asarray(w.centre) + (chol @ np.random.default_rng(key).standard_normal((chol.shape[0], 4))).T, jnp.float32
    )
    cpu = time.process_time()
    res = sample(
        model,
        data,
        starts,
        proposal=w.proposal,
        test=test,
        estimator=estimator,
        num_samples=draws,
        num_chains=4,
        key=key,
        batched_init=True,
        progress=False,
    )
    rec = {k: np.asarray(v) for k, v in res.records.items()}
    seconds, cpu = time.perf_counter() - t + sized_seconds, time.process_time() - cpu
    sampling = seconds - sized
    run_check, check = check, None
    if run_check and hasattr(
        test, "batch_size"
    ):  # the check after sampling, on the run's own draws and keys (an exact test needs none)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check = check_posterior(
                model,
                data,
                w.proposal,
                test,
                estimator,
                res.kernel_positions,
                starts=100,
                run_key=key,
                records=res.records,
                centre=w.proxy.centre,
                stratum=True,
            )
        check = (check, [str(c.message) for c in caught if "moved the posterior" in str(c.message)])
    return {
        "draws": np.asarray(res.positions, np.float64),
        "m": getattr(test, "batch_size", 0),
        "rows": float(rec["batch_size"].mean() + rec["hidden_data"].mean()),
        "acc": float(rec["accepted"].mean()),
        "seconds": seconds,
        "warmup_seconds": sized,
        "sampling_seconds": sampling,
        "check": check,
        "predicted": predicted,
        "sampling_cpu": cpu,
        "result": res,
        "test": test,
    }


def as_source(data):
    """``data`` as a data source."""
    from minibatch_mcmc.data.arrays import as_data_source

    return as_data_source(data)


def warmup_passes(w) -> float:
    """The warm-up's passes over N, all its phases."""
    return float(sum(c.passes for c in w.cost.values() if np.isfinite(c.passes)))


def method_estimator(method: str, model: Model, data: dict, w) -> tuple:
    """The estimator a method samples with and the ``weights`` note."""
    base = w.estimator.inner if isinstance(w.estimator, ImportanceProxy) else w.estimator
    if method == "importance" and isinstance(w.estimator, ImportanceProxy):  # the warm-up's rule chose them
        return w.estimator, f"warm-up's: variance ratio {w.estimator.variance_ratio:.3g}"
    if method == "importance":
        found = probe_weights(model, base, data, w.centre, np.linalg.cholesky(w.covariance), jax.random.key(3))
        return importance_sample(
            base, data, found.weights, variance_ratio=found.variance_ratio
        ), f"variance ratio {found.variance_ratio:.3g}"
    return base, "equal"


def reference_row(name: str, n: int, label: str, ref: np.ndarray, seconds: float) -> list:
    """The reference's row."""
    ess = min_ess(ref)
    return (
        [name, n, label, "", "", str(n), "", f"{seconds:.1f}", "", f"{seconds:.1f}", f"{ess:.0f}"]
        + [
            f"{ess / seconds:.2f}",
            "0",
            "0",
        ]
        + [""] * 8
    )


PASS_COLUMNS = [
    "case",
    "N",
    "warm-up passes",
    "mode",
    "proxy",
    "influence",
    "tuning",
    "batch",
    "stratum rows",
    "seconds",
]


def passes_table(args) -> None:
    """Each case's warm-up (``key=0``, the default test): its passes over N in all and per phase (``mode``: Adam, the
    subsample climb and every Newton pass but the last, which builds the proxy and is the ``proxy`` phase)."""
    rows = []
    for name in args.cases:
        model, data, theta0 = CASES[name](args.n, np.random.default_rng(0))
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = warmup(model, data, jnp.asarray(theta0, jnp.float32), key=0)
        phase = lambda k: f"{w.cost[k].passes:.3f}" if k in w.cost else ""  # noqa: E731
        stratum = 0 if w.influence is None else int(w.influence.rows.size)
        rows.append(
            [name, args.n, f"{warmup_passes(w):.2f}"]
            + [phase(k) for k in ("mode", "proxy", "influence", "tuning", "batch")]
            + [str(stratum), f"{time.perf_counter() - t:.1f}"]
        )
        print(" | ".join(map(str, rows[-1])), flush=True)
        values = {f"{args.name}.{r[0]}_passes": float(r[2]) for r in rows}
        save(args.results, args.name, config=args, tables={args.name: table(PASS_COLUMNS, rows)}, values=values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--reference", choices=["nuts", "mh"], default="nuts")
    parser.add_argument("--nuts-warmup", type=int, default=500)
    parser.add_argument("--nuts-draws", type=int, default=1000)
    parser.add_argument("--ref-draws", type=int, default=3000, help="exact Metropolis draws per chain (--reference mh)")
    parser.add_argument("--methods", nargs="+", default=["uniform", "importance", "smh"])
    parser.add_argument("--name", default="heavy_tails", help="the results' experiment and table name")
    parser.add_argument(
        "--no-check", action="store_true", help="skip the check after sampling (its columns left empty: 'not run')"
    )
    parser.add_argument(
        "--warmup-only",
        action="store_true",
        help="only the warm-up of each case: its passes over N phase by phase (one table, no sampling, no reference)",
    )
    add_results_option(parser)
    args = parser.parse_args()
    if args.warmup_only:
        passes_table(args)
        return
    rows, values = [], {}
    for name in args.cases:
        model, data, theta0 = CASES[name](args.n, np.random.default_rng(0))
        ref = None
        if args.reference == "nuts":
            ref, ref_seconds = nuts_reference(model, data, theta0, args.nuts_warmup, args.nuts_draws)
            rows.append(reference_row(name, args.n, "NUTS", ref, ref_seconds))
            print(" | ".join(map(str, rows[-1])), flush=True)
        for method in args.methods:
            if method == "smh" and model.glm is None:
                continue  # no per-row bounds: not a GLM
            t = time.perf_counter()
            w = warmup(model, data, jnp.asarray(theta0, jnp.float32), key=0, test="smh" if method == "smh" else None)
            passes = warmup_passes(w)
            est, note = method_estimator(method, model, data, w)
            out = run_method(
                model,
                data,
                w,
                est,
                1,
                args.draws,
                time.perf_counter() - t,
                size=method != "unsized",
                check=not args.no_check,
            )
            if ref is None:  # the exact Metropolis reference, with the first method's warm-up
                ref, ref_seconds = mh_reference(model, data, w, args.ref_draws)
                rows.append(reference_row(name, args.n, f"exact MH ({args.ref_draws} x 4)", ref, ref_seconds))
                print(" | ".join(map(str, rows[-1])), flush=True)
            ess = min_ess(out["draws"])
            mean_err, sd_err, z, sd_se = agreement(out["draws"], ref)
            check, said = out["check"] or (None, [])
            rows.append(
                [
                    name,
                    args.n,
                    method,
                    f"{passes:.2f}",
                    str(out["m"]),
                    f"{out['rows']:.1f}",
                    f"{out['acc']:.3f}",
                    f"{out['seconds']:.1f}",
                    f"{out['warmup_seconds']:.1f}",
                    f"{out['sampling_seconds']:.1f}",
                    f"{ess:.0f}",
                    f"{ess / out['seconds']:.2f}",
                    f"{mean_err:.3f}",
                    f"{sd_err:.3f}",
                    f"{z:.1f}",
                    f"{100 * sd_se:.1f}%",
                    ("not run" if args.no_check else "n/a") if check is None else ("yes" if said else "no"),
                    "" if check is None else f"{100 * np.max(np.abs(check.sd_error)):.1f}%",
                    "" if check is None else f"{check.seconds:.1f}",
                    f"{out['predicted']:.3g}",
                    "" if check is None else f"{100 * check.disagreement:.2f}%",
                    note,
                ]
            )
            prefix = "" if args.name == "heavy_tails" else f"{args.name}."  # keys unique over the results files
            values[f"{prefix}{name}_{method}_ess_per_s"] = ess / out["seconds"]
            print(" | ".join(map(str, rows[-1])), *said, flush=True)
            save(args.results, args.name, config=args, tables={args.name: table(COLUMNS, rows)}, values=values)


if __name__ == "__main__":
    main()
