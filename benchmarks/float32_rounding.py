"""The float32 rounding of a full-data log density, and what it costs an exact Metropolis chain, on heavy_tails' robust_nu.

At each ``--n``: the float64 mode and Laplace fit of ``heavy_tails.robust_nu_case``; ``--pairs`` pairs of Laplace draws
(rounded to float32), the full-data log-likelihood ratio in float32 (the model as the samplers run it) against float64
on the same rows and parameters, split into the part every row shares (the per-row normalising terms of the Student-t,
``gammaln``, ``log nu``, ``log sigma``: one rounded scalar counted ``N`` times) and the part that varies by row (what a
minibatch estimate's spread sees, scaled to 50 rows: ``N / sqrt(50)`` times it); then an independence Metropolis chain
(Laplace proposal, s.d.s 1.1 times) run twice on the same random numbers, once on the float32 log density and once on
the float64 one: the acceptance lost to rounding alone. The model declares its normalising terms as ``Model.shared``
(``models.shared_term``): the "declared" columns are the library's own path, the exact test's full-data ``Delta``
(``acceptance.base.exact_delta`` on ``PlainDifference``'s per-row ratios: the rows' part plus the shared difference
computed once, summed in float32), its error against float64 and the same chain's acceptance on it.

``--case glmm_student_t``: the same on a Student-t GLMM (``models.glmm``, ``y ~ x1 + (1 | g)``, 20 levels of random
intercepts, ``nu = 4``, ``sigma = 0.5``; 25 parameters), whose family declares ``gaussian``'s and the Student-t's
``phi``-only part (``glmm_families.shared_log_density``); its table adds the GLMM proxy's ``Delta`` (at the float64
mode: every row's residual and the proxy's known sum), the path the warm-up's default test estimates.

    .venv/bin/python benchmarks/float32_rounding.py --n 300000 1000000 [--results docs/results/float32_rounding.json]
    .venv/bin/python benchmarks/float32_rounding.py --case glmm_student_t --name float32_rounding_glmm --n 300000 1000000
        [--results docs/results/float32_rounding_glmm.json]
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_enable_x64", True)  # float64 next to float32 in one process; the model code is unchanged

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize as so  # noqa: E402
from bench_results import add_results_option, save, table  # noqa: E402
from heavy_tails import robust_nu_case  # noqa: E402

from minibatch_mcmc.acceptance.base import Statistics, exact_delta  # noqa: E402
from minibatch_mcmc.control_variates.base import plain  # noqa: E402
from minibatch_mcmc.control_variates.glmm import glmm_proxy  # noqa: E402
from minibatch_mcmc.models.glmm import glmm_model  # noqa: E402
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor  # noqa: E402

COLUMNS = [
    "N",
    "rms error of the full-data ratio",
    "shared part",
    "per-row part, 50-row estimate",
    "acceptance float32",
    "acceptance float64",
    "rms error, shared term declared",
    "acceptance float32, shared term declared",
]


PROXY_COLUMN = "rms error, GLMM proxy"
LEVELS = 20


def glmm_t_case(n: int, rng: np.random.Generator) -> tuple:
    """The Student-t GLMM (module docstring), its data (float32 columns, int32 codes) and a start: the truth's
    coefficients and scales, each level's mean residual as its effect."""
    codes = rng.integers(0, LEVELS, n).astype(np.int32)
    x = np.c_[np.ones(n), rng.normal(size=n)]
    y = x @ np.array([1.0, 0.5]) + rng.normal(0.0, 0.7, LEVELS)[codes] + 0.5 * rng.standard_t(4.0, n)
    factor = GroupFactor("g", codes, np.ones((n, 1)), tuple(f"s{k}" for k in range(LEVELS)), ("1",))
    design = GLMMDesign(y=y, x=x, fixed=("Intercept", "x1"), factors=(factor,))
    model, data = glmm_model(design, "student_t", centred=True, sample_as_written=True)
    effects = np.bincount(codes, y - x @ np.array([1.0, 0.5]), LEVELS) / np.bincount(codes, minlength=LEVELS)
    return model, data, np.r_[1.0, 0.5, effects, np.log(0.7), np.log(0.5), np.log(3.0)]


def laplace(model, data64, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float64 mode (BFGS from ``start``, then Newton) and the Cholesky factor of the Laplace covariance."""
    lp = jax.jit(lambda t: model.log_prior(t) + jnp.sum(model.log_lik(t, data64)))
    vg = jax.jit(jax.value_and_grad(lambda t: -lp(t)))
    found = so.minimize(
        lambda t: tuple(np.asarray(v, np.float64) for v in vg(jnp.asarray(t))),
        start,
        jac=True,
        method="BFGS",
    )
    t, hess = jnp.asarray(found.x), jax.jit(jax.hessian(lp))
    for _ in range(3):
        t = t - jnp.linalg.solve(hess(t), jax.grad(lp)(t))
    return np.asarray(t), np.linalg.cholesky(np.linalg.inv(-np.asarray(hess(t))))


def declared_delta(model, data32):
    """``(theta, theta') -> `` the exact test's float32 full-data log-likelihood ratio on the library's path (jitted)."""
    n = int(data32["y"].shape[0])
    zero, one = jnp.float32(0.0), jnp.float32(1.0)
    return jax.jit(lambda a, b: exact_delta(Statistics(plain().log_ratio(model, a, b), data32, n, zero, one))[0])


def ratio_errors(model, data, mode, chol, pairs: int) -> tuple[float, float, float, float]:
    """RMS over Laplace pairs of the float32 full-data ratio's error, of its shared part (``N`` x the mean per-row
    error), of a 50-row estimate's spread from the per-row part (``N / sqrt(50)`` x the per-row errors' s.d.), and of
    the declared path's ``Delta`` (``declared_delta``)."""
    diff = jax.jit(lambda a, b, d: model.log_lik(b, d) - model.log_lik(a, d))
    declared = declared_delta(model, data[32])
    rng, n, out = np.random.default_rng(1), data[32]["y"].shape[0], []
    for _ in range(pairs):
        a, b = (np.float64(np.float32(mode + chol @ rng.standard_normal(mode.size))) for _ in range(2))
        exact = np.asarray(diff(jnp.asarray(a), jnp.asarray(b), data[64]))
        e = np.asarray(diff(jnp.float32(a), jnp.float32(b), data[32]), np.float64) - exact
        new = float(declared(jnp.float32(a), jnp.float32(b))) - exact.sum()
        out.append((e.sum(), n * e.mean(), n / np.sqrt(50) * e.std(), new))
    return tuple(float(np.sqrt(np.mean(np.square(c)))) for c in np.array(out).T)


def proxy_errors(model, data, mode, chol, pairs: int) -> float:
    """RMS over ``ratio_errors``' pairs of the error of the GLMM proxy's ``Delta`` (its residuals on every row plus its
    known sum, the proxy built at the float32-rounded mode) against float64."""
    proxy = glmm_proxy(model, data[32], jnp.float32(mode))
    n, zero, one = int(data[32]["y"].shape[0]), jnp.float32(0.0), jnp.float32(1.0)
    delta = jax.jit(
        lambda a, b: exact_delta(
            Statistics(proxy.log_ratio(model, a, b), data[32], n, zero, one, proxy.known_sum(a, b))
        )[0]
    )
    lik = jax.jit(lambda t, d: jnp.sum(model.log_lik(t, d)))
    rng, out = np.random.default_rng(1), []
    for _ in range(pairs):
        a, b = (np.float64(np.float32(mode + chol @ rng.standard_normal(mode.size))) for _ in range(2))
        exact = float(lik(jnp.asarray(b), data[64]) - lik(jnp.asarray(a), data[64]))
        out.append(float(delta(jnp.float32(a), jnp.float32(b))) - exact)
    return float(np.sqrt(np.mean(np.square(out))))


def independence_acceptance(model, data, mode, chol, steps: int) -> tuple[float, float]:
    """Acceptance of independence Metropolis on the float32 and the float64 log density, same random numbers."""
    rng = np.random.default_rng(5)
    z, log_u = rng.standard_normal((steps, mode.size)), np.log(rng.random(steps))
    props, log_q = np.float64(np.float32(mode + 1.1 * z @ chol.T)), -0.5 * np.sum(z * z, 1)
    rates = []
    for p, dt in ((32, jnp.float32), (64, jnp.float64)):
        lp = jax.jit(lambda t, p=p, dt=dt: model.log_prior(t) + jnp.sum(model.log_lik(t.astype(dt), data[p])))
        w = np.array([float(lp(jnp.asarray(t))) for t in props]) - log_q
        cur, acc = 0, 0
        for i in range(1, steps):
            if log_u[i] < w[i] - w[cur]:
                cur, acc = i, acc + 1
        rates.append(acc / (steps - 1))
    return rates[0], rates[1]


def declared_acceptance(model, data32, mode, chol, steps: int) -> float:
    """The same chain (same proposals and uniforms) deciding on the declared path's ``Delta`` between its state and
    each proposal, the prior and proposal terms in float64."""
    rng = np.random.default_rng(5)
    z, log_u = rng.standard_normal((steps, mode.size)), np.log(rng.random(steps))
    props, log_q = np.float64(np.float32(mode + 1.1 * z @ chol.T)), -0.5 * np.sum(z * z, 1)
    prior = np.array([float(model.log_prior(jnp.asarray(t))) for t in props]) - log_q
    delta = declared_delta(model, data32)
    cur, acc = 0, 0
    for i in range(1, steps):
        lik = float(delta(jnp.float32(props[cur]), jnp.float32(props[i])))
        if log_u[i] < prior[i] - prior[cur] + lik:
            cur, acc = i, acc + 1
    return acc / (steps - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[300_000, 1_000_000])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--name", default="float32_rounding")
    parser.add_argument("--case", choices=("robust_nu", "glmm_student_t"), default="robust_nu")
    add_results_option(parser)
    args = parser.parse_args()
    rows, values, glmm = [], {}, args.case == "glmm_student_t"
    for n in args.n:
        model, raw, start = (glmm_t_case if glmm else robust_nu_case)(n, np.random.default_rng(0))
        data = {
            p: {k: jnp.asarray(v, dt if np.issubdtype(v.dtype, np.floating) else v.dtype) for k, v in raw.items()}
            for p, dt in ((32, jnp.float32), (64, jnp.float64))
        }
        mode, chol = laplace(model, data[64], start if glmm else np.array([1.5, 0.5, -0.3, 0.2, 0.3, 0.7]))
        total, shared, per_row, declared = ratio_errors(model, data, mode, chol, args.pairs)
        acc32, acc64 = independence_acceptance(model, data, mode, chol, args.steps)
        acc_declared = declared_acceptance(model, data[32], mode, chol, args.steps)
        rows.append(
            [n, *(f"{v:.3f}" for v in (total, shared, per_row, acc32, acc64)), f"{declared:.4f}", f"{acc_declared:.3f}"]
        )
        values[f"{args.name}.rms_{n}"] = total
        values[f"{args.name}.declared_rms_{n}"] = declared
        if glmm:
            values[f"{args.name}.proxy_rms_{n}"] = proxy_errors(model, data, mode, chol, args.pairs)
            rows[-1].append(f"{values[f'{args.name}.proxy_rms_{n}']:.4f}")
        print(" | ".join(map(str, rows[-1])), flush=True)
        columns = COLUMNS + [PROXY_COLUMN] * glmm
        save(args.results, args.name, config=args, tables={args.name: table(columns, rows)}, values=values)


if __name__ == "__main__":
    main()
