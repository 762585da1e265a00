"""What the issue-19 protections cost on a well-behaved model, and what they buy on the five-Cauchy-rows case.

Side by side in one run, ``auto_sample`` (MHminibatch m=50, proxy-gradient MALA, 4 chains) with the
protections off (``stratum=False, check_draws=0``: the library before issue 19) and on (the defaults:
the influential-rows pass in the warm-up, the Pareto-k check after sampling on 100 draws):

* the peers benchmark's model, each setting run twice in the order off, on, on, off (the faster run kept), (logistic regression, d=50, prior N(0, 1), ``make_logistic_data``) at
  each N of ``--sizes``: stratum size, whether the draws are identical, bulk ESS (minimum over
  coordinates), the seconds of warm-up, influence pass, sampling and check, and ESS/s with the warm-up
  and the check counted (the ratio on/off is the cost; the issue allows <= 10%);
  with identical draws, the protections' cost is the share of their two timed phases in the total ("added
  phases"); the ratio of the measured totals is shown beside it (on a loaded machine it carries the load's noise);
* the five-Cauchy-rows case (N = 100,000; ``tests/control_variates/helpers_cauchy.py``): posterior
  s.d. of ``a`` off and on against quadrature;
* the check's power on draws exactly from the proxy posterior and from it widened twice (k-hat over seeds).

    PYTHONPATH=src nice -n 10 .venv/bin/python benchmarks/stratum_cost.py --results docs/results/stratum_cost.json
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.diagnostics.proxy_check import check_proxy
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.warmup import auto_sample

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "control_variates"))
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, mode_and_factor, posterior_a  # noqa: E402

COLUMNS = [
    "N",
    "protections",
    "stratum rows",
    "same draws",
    "min ESS",
    "warm-up s",
    "influence s",
    "sampling s",
    "check s",
    "total s",
    "ESS/s (all in)",
    "ratio on/off (totals)",
    "ratio on/off (added phases)",
]


def run(model, data, theta0, on: bool, args, samples: int) -> tuple:
    """``auto_sample`` with the protections on or off; returns the result, the warm-up and the check's seconds."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, w = auto_sample(
            model,
            data,
            theta0,
            num_samples=samples,
            num_chains=4,
            key=args.seed,
            test=mh_minibatch(batch_size=50),
            proposal="langevin",
            progress=False,
            stratum=on,
            check_draws=100 if on else 0,
        )
    total = time.perf_counter() - t0
    check_s = w.proxy_check.seconds if w.proxy_check is not None else 0.0
    return res, w, check_s, total


def peers_rows(args) -> tuple[list, dict]:
    """One pair of rows (off, on) per N."""
    rows, values = [], {}
    for n in args.sizes:
        data, _ = make_logistic_data(jax.random.key(0), n, 50)
        model = logistic_regression(1.0)
        runs = {False: [], True: []}
        for on in (
            False,
            True,
            True,
            False,
        ):  # alternating, so compilation and load fall on both; the faster run of each kept
            runs[on].append(run(model, data, jnp.zeros(50), on, args, args.samples))
        out = {on: min(r, key=lambda x: x[3]) for on, r in runs.items()}
        same = bool(np.array_equal(np.asarray(out[False][0].positions), np.asarray(out[True][0].positions)))
        rates, added = {}, 0.0
        for on, (res, w, check_s, total) in out.items():
            ess = float(np.min(az.ess(az.convert_to_dataset(np.asarray(res.positions))).to_array().values))
            rates[on] = ess / total
            infl = w.cost["influence"].seconds if "influence" in w.cost else 0.0
            added = infl + check_s if on else 0.0
            # with identical draws the protections add exactly two timed phases: their share is the cost free of
            # the load noise in the other phases (the totals' ratio is shown beside it)
            by_phase = out[False][3] / (out[False][3] + added)
            rows.append(
                [
                    f"{n:,}",
                    "on" if on else "off",
                    str(w.influence.rows.size) if w.influence else "-",
                    "yes" if same else "no",
                    f"{ess:.0f}",
                    f"{w.total_seconds:.1f}",
                    f"{infl:.1f}",
                    f"{res.wall_time:.1f}",
                    f"{check_s:.1f}",
                    f"{total:.1f}",
                    f"{rates[on]:.1f}",
                    f"{rates[True] / rates[False]:.3f}" if on else "1",
                    f"{by_phase:.3f}" if on else "1",
                ]
            )
        values[f"stratum_cost.ratio_{n}"] = rows[-1][-1]
        values[f"stratum_cost.ratio_totals_{n}"] = rows[-1][-2]
        print(table(COLUMNS, rows)["rows"][-2:], flush=True)
    return rows, values


def cauchy_rows(args) -> tuple[list, dict]:
    """Posterior s.d. of ``a`` with the protections off and on, against quadrature."""
    data, _ = cauchy_rows_data(100_000)
    mean, sd = posterior_a()
    rows, values = [], {"stratum_cost.cauchy_quadrature_sd": f"{sd:.3f}"}
    for on in (False, True):
        res, w, _, _ = run(cauchy_rows_model(), data, jnp.zeros(2), on, args, args.cauchy_samples)
        a = np.asarray(res.positions)[:, args.cauchy_samples // 10 :, 0]
        chk = w.proxy_check
        if chk is None:  # the check on the unprotected run's draws, for comparison (not part of that run)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                chk = check_proxy(cauchy_rows_model(), data, w.proxy, w.proxy.centre, res.positions)
        k, spread = chk.k_hat, chk.log_ratio_range
        rows.append(
            [
                "on" if on else "off",
                str(w.influence.rows.size) if w.influence else "-",
                f"{a.std():.3f}",
                f"{sd:.3f}",
                f"{a.std() / sd - 1:+.1%}",
                f"{float(az.ess(a)):.0f}",
                f"{k:.2f}",
                f"{spread:.3g}",
            ]
        )
        values[f"stratum_cost.cauchy_sd_{'on' if on else 'off'}"] = f"{a.std():.3f}"
        print(rows[-1], flush=True)
    return rows, values


def check_power(args) -> list:
    """k-hat of the check on 100 draws from the Laplace approximation (scale 1) and widened twice, five seeds."""
    data, _ = cauchy_rows_data(2_000)
    centre, factor = mode_and_factor(data)
    model = cauchy_rows_model()
    proxy = taylor_proxy(model, data, jnp.asarray(centre, jnp.float32))
    rows = []
    for spread in (1.0, 2.0):
        ks = []
        for seed in range(5):
            z = np.random.default_rng(seed).standard_normal((200, 2))
            draws = jnp.asarray((centre + spread * z @ factor.T)[None], jnp.float32)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ks.append(check_proxy(model, data, proxy, proxy.centre, draws).k_hat)
        rows.append([f"{spread:g}", " ".join(f"{k:.2f}" for k in ks), f"{sum(k > 0.5 for k in ks)} of 5"])
    return rows


def power_values(power: list) -> dict:
    """The check's power in words for the notes: ``"2 of 5"`` per spread."""
    return {"stratum_cost.power_laplace": power[0][2], "stratum_cost.power_wide": power[1][2]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    p.add_argument(
        "--samples",
        type=int,
        default=60000,
        help="draws per chain on the peers model (about the 40-60 s of sampling the peers benchmark runs)",
    )
    p.add_argument("--cauchy-samples", type=int, default=10000, help="draws per chain on the Cauchy-rows case")
    p.add_argument("--seed", type=int, default=0)
    add_results_option(p)
    args = p.parse_args(argv)
    peers, values = peers_rows(args)
    cauchy, more = cauchy_rows(args)
    values.update(more)
    power = check_power(args)
    values.update(power_values(power))
    for r in power:
        print(r)
    save(
        args.results,
        "stratum_cost",
        config=args,
        values=values,
        tables={
            "stratum_cost": table(COLUMNS, peers),
            "stratum_cost_cauchy": table(
                ["protections", "stratum rows", "sd(a)", "quadrature sd(a)", "error", "ESS", "k-hat", "log w range"],
                cauchy,
            ),
            "stratum_cost_check_power": table(["draws: Laplace x", "k-hat, seeds 0-4", "above 0.5"], power),
        },
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
