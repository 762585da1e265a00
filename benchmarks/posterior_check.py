"""The coupled exact continuation after sampling (issue 32) on cases whose posterior is known: estimated against true error.

Each case is an ``auto_sample`` run (4 chains x 1000, the defaults: proxy HMC, the penalty test) whose check estimates,
per parameter, the error of the posterior mean (in posterior s.d.) and of the s.d. (relative); the truth is the closed
form (a Gaussian linear model on Cauchy-noise data), quadrature (five Cauchy rows among Gaussian ones, the exact
stratum off so the minibatch misses them) or a long exact chain (the same proposal with the full-data Metropolis test,
4 x 3000) for a Student-t regression on a right-skewed heavy-tailed response; and a run made wrong on purpose (the
naive plug-in test on 20 of 2,000 rows of a Gaussian mean, closed form). The "true" errors carry the run's own Monte
Carlo error (ArviZ ESS). Also: whether the new check warned, and the per-step acceptance-error figure of the earlier
check (``ProxyCheck.acceptance_error``, which warned above 0.02) and its seconds.

    PYTHONPATH=src .venv/bin/python benchmarks/posterior_check.py --results docs/results/posterior_check.json

``--cost``: the check's seconds, CPU seconds, compile seconds and row evaluations (in passes over ``N``) on one fit of
the Student-t regression at each ``--n``, side by side in one process, each way run ``--repeats`` times alternately: the
code of ``--baseline`` (a commit; its ``posterior_error.py``, ``exact_twin.py`` and ``twin_sums.py`` loaded from git) and
the code now, each asked for ``--starts`` starts (``auto_sample``'s ``check_draws``), on the run's own draws and keys;
the sampling's wall and CPU seconds are ``auto_sample``'s ``sampling`` phase. With ``--importance`` the fit is instead
``benchmarks/heavy_tails.py``'s ``robust_nu`` case sampled with importance-sampled minibatches (its probe weights; the
penalty test sized for them; 4 chains x 1000 draws, as ``heavy_tails.py`` runs it), the sampling timed around
``sample``. Run it with ``MINIBATCH_MCMC_COMPILATION_CACHE=off`` so that every compilation is paid (as a new fit pays
it).

    MINIBATCH_MCMC_COMPILATION_CACHE=off PYTHONPATH=src .venv/bin/python benchmarks/posterior_check.py --cost \
        --n 100000 1000000 --results docs/results/posterior_check_cost.json
    MINIBATCH_MCMC_COMPILATION_CACHE=off PYTHONPATH=src .venv/bin/python benchmarks/posterior_check.py --cost \
        --importance --n 300000 --name posterior_check_cost_importance --results docs/results/NAME.json
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import naive_minibatch
from minibatch_mcmc.acceptance.exact import MetropolisTest
from minibatch_mcmc.diagnostics.posterior_error import check_posterior
from minibatch_mcmc.models import exact_posterior, gaussian_mean
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.phase_cost import COMPILE_SECONDS, PhaseClock
from minibatch_mcmc.warmup import auto as auto_module
from minibatch_mcmc.warmup import auto_sample

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "control_variates"), str(TESTS / "diagnostics")]
import heavy_tails  # noqa: E402  (benchmarks/, this script's folder: the robust_nu case and its importance weights)
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, posterior_a  # noqa: E402
from helpers_posterior import linear_data, linear_model, linear_posterior, student_t_data, student_t_model  # noqa: E402
from test_posterior_error import _run_error  # noqa: E402

PER_PARAMETER = [
    "case",
    "parameter",
    "estimated mean error (s.d.)",
    "true mean error (s.d.)",
    "estimated s.d. error",
    "true s.d. error",
    "flagged",
]
PER_CASE = [
    "case",
    "N",
    "new check warned",
    "earlier per-step acceptance error",
    "earlier check would warn",
    "continuation s",
    "starts x steps",
    "decisions differed",
    "sampling s",
]


def pm(x: float, se: float, pct: bool = False) -> str:
    """``x +- se`` (as percentages with ``pct``)."""
    return f"{100 * x:+.1f}% ± {100 * se:.1f}%" if pct else f"{x:+.3f} ± {se:.3f}"


def rows_for(name: str, out, draws: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> tuple[list, dict]:
    """Per-parameter rows: estimated and true errors with their s.e., whether flagged."""
    tm, tm_se, ts, ts_se = _run_error(draws, mean, sd)
    rows, values = [], {}
    for i, p in enumerate(out.names):
        flagged = " and ".join(w for w, f in (("mean", out.mean_flagged[i]), ("s.d.", out.sd_flagged[i])) if f) or "no"
        rows.append(
            [
                name,
                p,
                pm(out.mean_bias[i], out.mean_se[i]),
                pm(tm[i], tm_se[i]),
                pm(out.sd_error[i], out.sd_se[i], True),
                pm(ts[i], ts_se[i], True),
                flagged,
            ]
        )
        values[f"posterior_check.{name}.{p}.sd_error"] = f"{100 * out.sd_error[i]:+.1f}%"
        values[f"posterior_check.{name}.{p}.true_sd_error"] = f"{100 * ts[i]:+.1f}%"
    return rows, values


def auto_case(name: str, model, data, theta0, truth, n: int, **kw):
    """One ``auto_sample`` run, its check, and the truth (a function of the run's warm-up and draws)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, w = auto_sample(model, data, theta0, num_samples=1000, num_chains=4, progress=False, key=0, **kw)
    said = [str(c.message) for c in caught if "moved the posterior" in str(c.message)]
    c, post = w.proxy_check, w.proxy_check.posterior
    mean, sd = truth(w._replace(chains=np.asarray(res.kernel_positions)[:, -1]))
    draws = np.asarray(res.kernel_positions)
    rows, values = rows_for(name, post, draws, mean, sd)
    case = [
        name,
        f"{n:,}",
        "yes" if said else "no",
        f"{c.acceptance_error:.3g}",
        "yes" if not (c.normal_ok and c.pareto_ok) else "no",
        f"{post.seconds:.1f}",
        f"{post.starts} x {post.steps}",
        f"{100 * post.disagreement:.1f}%",
        f"{w.cost['sampling'].seconds:.1f}",
    ]
    values[f"posterior_check.{name}.seconds"] = f"{post.seconds:.1f}"
    print(case, *rows, said, sep="\n", flush=True)
    return rows, case, values


def wrong_case() -> tuple[list, list, dict]:
    """The naive plug-in test on 20 of 2,000 rows of a 2-d Gaussian mean, no proxy: a run wrong on purpose."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2000, 2)) + np.array([1.0, -0.5])).astype(np.float32)
    model, test = gaussian_mean(), naive_minibatch(20)
    mean, var = exact_posterior(x)
    prop = random_walk(scale=1.5 * float(np.sqrt(var)))
    starts = jnp.asarray(mean + np.sqrt(var) * rng.standard_normal((4, 2)), jnp.float32)
    t0 = time.perf_counter()
    res = sample(
        model,
        x,
        starts,
        proposal=prop,
        test=test,
        num_samples=2000,
        num_chains=4,
        key=0,
        batched_init=True,
        progress=False,
    )
    seconds = time.perf_counter() - t0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = check_posterior(model, x, prop, test, None, res.kernel_positions, run_key=0, records=res.records)
    rows, values = rows_for("naive_wrong", out, np.asarray(res.kernel_positions), mean, np.full(2, np.sqrt(var)))
    case = [
        "naive_wrong",
        "2,000",
        "yes" if caught else "no",
        "n/a",
        "n/a",
        f"{out.seconds:.1f}",
        f"{out.starts} x {out.steps}",
        f"{100 * out.disagreement:.1f}%",
        f"{seconds:.1f}",
    ]
    return rows, case, values


COST = [
    "N",
    "way",
    "repeat",
    "check s",
    "check CPU s",
    "compiling s",
    "compilations",
    "passes over N",
    "starts x steps",
    "sampling s",
    "sampling CPU s",
    "check / sampling",
    "check CPU / sampling CPU",
    "largest |mean error| (s.d.)",
    "its s.e.",
    "largest |s.d. error|",
    "its s.e.",
    "warned",
    "estimates equal the first row's",
]
WAYS = (("before: the check at --baseline", "before"), ("after: the check now", "after"))
BACKEND_COMPILES = [0]
"""XLA backend compilations since import (``count_backend``)."""


def count_backend(event: str, duration: float, **_) -> None:
    """Monitoring listener: count XLA backend compilations."""
    if event == "/jax/core/compile/backend_compile_duration":
        BACKEND_COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(count_backend)


def baseline(rev: str):
    """``posterior_error`` as it was at commit ``rev``, with that commit's ``exact_twin`` and ``twin_sums`` (where it has
    one), all loaded from git into modules of their own."""
    root = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp())

    def load(name: str, replace: tuple = ()):
        text = subprocess.run(
            ["git", "show", f"{rev}:src/minibatch_mcmc/diagnostics/{name}.py"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for a, b in replace:
            text = text.replace(a, b)
        path = folder / f"{name}_before.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"{name}_before", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"{name}_before"] = module
        spec.loader.exec_module(module)
        return module

    twin = (("from minibatch_mcmc.diagnostics.twin_sums import", "from twin_sums_before import"),)
    has_sums = subprocess.run(["git", "cat-file", "-e", f"{rev}:src/minibatch_mcmc/diagnostics/twin_sums.py"], cwd=root)
    if has_sums.returncode == 0:
        load("twin_sums")
    load("exact_twin", twin if has_sums.returncode == 0 else ())
    return load(
        "posterior_error",
        (("from minibatch_mcmc.diagnostics.exact_twin import", "from exact_twin_before import"),)
        + (twin if has_sums.returncode == 0 else ()),
    )


class CpuClock(PhaseClock):
    """``PhaseClock`` that also keeps each phase's CPU seconds in ``PHASE_CPU`` (put in ``auto_sample``'s place)."""

    def __enter__(self) -> "CpuClock":
        self.cpu0 = time.process_time()
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        PHASE_CPU[self.name] = time.process_time() - self.cpu0
        super().__exit__(*exc)


PHASE_CPU: dict = {}
"""CPU seconds of the last ``auto_sample`` phase of each name (``CpuClock``)."""


class Fit(NamedTuple):
    """What the check needs from a fit, and its sampling's wall and CPU seconds."""

    model: Any
    data: Any
    proposal: Any
    test: Any
    estimator: Any
    positions: Any
    centre: Any
    run_key: Any
    records: dict
    sampling_seconds: float
    sampling_cpu: float


def student_t_fit(n: int) -> Fit:
    """``auto_sample`` on the Student-t regression (4 chains x 1000, no check), its ``sampling`` phase timed."""
    model, data = student_t_model(), student_t_data(n)
    with warnings.catch_warnings(), mock.patch.object(auto_module, "PhaseClock", CpuClock):
        warnings.simplefilter("ignore")
        res, w = auto_sample(
            model,
            data,
            jnp.array([0.0, 0.0, 0.0, 0.0, 1.0]),
            num_samples=1000,
            num_chains=4,
            progress=False,
            key=0,
            check_draws=0,
        )
    run_key = jax.random.split(as_key(0), 3)[2]  # auto_sample's sampling key (its third split of ``key``)
    seconds = w.cost["sampling"].seconds
    return Fit(
        model,
        data,
        w.proposal,
        w.test,
        w.estimator,
        res.kernel_positions,
        w.proxy.centre,
        run_key,
        res.records,
        seconds,
        PHASE_CPU["sampling"],
    )


def importance_fit(n: int) -> Fit:
    """``heavy_tails.py``'s ``robust_nu`` case with importance-sampled minibatches, sampled by its ``run_method`` (its
    probe weights, the penalty test sized for them, 4 chains x 1000 from Laplace draws, key 1; the sampling's wall
    seconds as it counts them, its CPU seconds around ``sample``)."""
    model, data, theta0 = heavy_tails.robust_nu_case(n, np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = heavy_tails.warmup(model, data, jnp.asarray(theta0, jnp.float32), key=0)
        estimator, _ = heavy_tails.method_estimator("importance", model, data, w)
        out = heavy_tails.run_method(model, data, w, estimator, 1, 1000, 0.0, check=False)
    res = out["result"]
    return Fit(
        model,
        data,
        w.proposal,
        out["test"],
        estimator,
        res.kernel_positions,
        w.proxy.centre,
        1,
        res.records,
        out["sampling_seconds"],
        out["sampling_cpu"],
    )


def cost_case(args) -> int:
    """The check's seconds, compile seconds and passes over ``N`` each way, on one fit per ``--n``."""
    before = baseline(args.baseline)
    rows, values = [], {}
    for n in args.n:
        fit_cpu = time.process_time()
        fit = importance_fit(n) if args.importance else student_t_fit(n)
        fit_cpu = time.process_time() - fit_cpu
        values[f"{args.name}.{n}.fit_cpu_seconds"] = f"{fit_cpu:.1f}"  # warm-up and sampling
        first = None  # the first check's estimates, which every other is compared with
        for r in range(args.repeats):
            for way, code in WAYS:
                check = before.check_posterior if code == "before" else check_posterior
                c0, n0, cpu0 = COMPILE_SECONDS[0], BACKEND_COMPILES[0], time.process_time()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = check(
                        fit.model,
                        fit.data,
                        fit.proposal,
                        fit.test,
                        fit.estimator,
                        fit.positions,
                        starts=args.starts,
                        centre=fit.centre,
                        run_key=fit.run_key,
                        records=fit.records,
                    )
                compiling, cpu = COMPILE_SECONDS[0] - c0, time.process_time() - cpu0
                compiles = BACKEND_COMPILES[0] - n0
                said = [c for c in caught if "moved the posterior" in str(c.message)]
                i, j = int(np.argmax(np.abs(out.mean_bias))), int(np.argmax(np.abs(out.sd_error)))
                got = np.concatenate([out.mean_bias, out.mean_se, out.sd_error, out.sd_se, [out.disagreement]])
                first = got if first is None else first
                rows.append(
                    [
                        f"{n:,}",
                        way.replace("--baseline", args.baseline),
                        r,
                        f"{out.seconds:.1f}",
                        f"{cpu:.1f}",
                        f"{compiling:.1f}",
                        compiles,
                        f"{out.data_used / n:.0f}",
                        f"{out.starts} x {out.steps}",
                        f"{fit.sampling_seconds:.1f}",
                        f"{fit.sampling_cpu:.1f}",
                        f"{out.seconds / fit.sampling_seconds:.2f}",
                        f"{cpu / fit.sampling_cpu:.2f}",
                        f"{abs(out.mean_bias[i]):.3f}",
                        f"{out.mean_se[i]:.3f}",
                        f"{100 * abs(out.sd_error[j]):.1f}%",
                        f"{100 * out.sd_se[j]:.1f}%",
                        "yes" if said else "no",
                        "yes"
                        if np.array_equal(got, first)
                        else f"no: max difference {np.max(np.abs(got - first)):.2g}",
                    ]
                )
                key = f"{args.name}.{n}.{code}.{r}"
                values.update(
                    {
                        f"{key}.seconds": f"{out.seconds:.1f}",
                        f"{key}.compile_seconds": f"{compiling:.1f}",
                        f"{key}.cpu_seconds": f"{cpu:.1f}",
                        f"{key}.compilations": f"{compiles}",
                        f"{key}.sampling_seconds": f"{fit.sampling_seconds:.1f}",
                        f"{key}.sampling_cpu_seconds": f"{fit.sampling_cpu:.1f}",
                        f"{key}.passes": f"{out.data_used / n:.0f}",
                        f"{key}.of_sampling": f"{out.seconds / fit.sampling_seconds:.2f}",
                        f"{key}.cpu_of_sampling": f"{cpu / fit.sampling_cpu:.2f}",
                    }
                )
                print(rows[-1], flush=True)
    save(args.results, args.name, config=args, values=values, tables={args.name: table(COST, rows)})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[100_000], help="rows (several with --cost)")
    p.add_argument("--cost", action="store_true", help="the check's seconds before/after on one fit (module docstring)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--baseline", default="52d4236", help="with --cost: the commit whose check is 'before'")
    p.add_argument("--starts", type=int, default=100, help="with --cost: starts asked for (auto_sample's check_draws)")
    p.add_argument(
        "--importance", action="store_true", help="with --cost: the importance-sampled robust_nu fit instead"
    )
    p.add_argument("--name", default="posterior_check_cost", help="with --cost: the results' experiment and table name")
    add_results_option(p)
    args = p.parse_args(argv)
    if args.cost:
        return cost_case(args)
    args.n = args.n[0]
    per_param, per_case, values = [], [], {}

    def add(out):
        per_param.extend(out[0])
        per_case.append(out[1])
        values.update(out[2])

    lin = linear_data(args.n)
    add(auto_case("linear_cauchy_noise", linear_model(), lin, jnp.zeros(3), lambda w: linear_posterior(lin), args.n))
    cr, _ = cauchy_rows_data(args.n)
    xn = np.asarray(cr["x"], np.float64)[np.asarray(cr["cauchy"]) == 0]
    ma, sa = posterior_a()
    prec_b = xn.size + 0.01
    truth_c = (np.array([ma, xn.sum() / prec_b]), np.array([sa, 1 / np.sqrt(prec_b)]))
    add(auto_case("five_cauchy_rows", cauchy_rows_model(), cr, jnp.zeros(2), lambda w: truth_c, args.n, stratum=False))
    st_model, st = student_t_model(), student_t_data(args.n)

    def exact_truth(w):
        ex = sample(
            st_model,
            st,
            w.chains,
            proposal=w.proposal,
            test=MetropolisTest(),
            num_samples=3000,
            num_chains=4,
            key=5,
            batched_init=True,
            progress=False,
        )
        flat = np.asarray(ex.kernel_positions)[:, 300:].reshape(-1, 5)
        return flat.mean(0), flat.std(0)

    add(auto_case("student_t_skewed", st_model, st, jnp.array([0.0, 0.0, 0.0, 0.0, 1.0]), exact_truth, args.n))
    add(wrong_case())
    save(
        args.results,
        "posterior_check",
        config=args,
        values=values,
        tables={
            "posterior_check_errors": table(PER_PARAMETER, per_param),
            "posterior_check_cases": table(PER_CASE, per_case),
        },
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
