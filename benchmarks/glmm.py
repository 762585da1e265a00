"""GLMMs at tall N: ``mm.glmm`` (the formula route, every second counted) against NumPyro NUTS on the same model.

Data (simulated, fixed seed): ``N`` rows in ``G`` groups, ``y ~ family(eta)``, ``eta = -0.5 + x . b + u[g]`` (and with
``--slope`` ``+ v[g] x1``), 3 standard normal covariates, group intercepts of s.d. 0.5 (slopes 0.3); ``--family``
``bernoulli`` (logit) or ``poisson`` (log link, a log-exposure offset). Group sizes ``--sizes equal`` (``N / G``
each) or ``tail``: log-normal weights with ``sigma = sqrt(2 ln 2)``, so the median group has half the mean's
``N / G`` rows (50 at ``N = 10^6``, ``G = 10^4``) and the largest tens of times the mean (every group at least 1 row).

Methods, side by side in one run on the same rows:

- ``ours``: ``mm.glmm("y ~ x1 + x2 + x3 + (1 | g)", df, family)`` with its defaults (``--centred`` forces a
  parameterisation; ``--test``/``--proposal`` name others), ``--draws`` per chain; every second counted: the formula
  and the design (``convert``), the warm-up, sampling and the proxy check after it;
- ``NUTS``: NumPyro ``NUTS`` on all rows, the same priors (``models.glmm.prior_scales`` of the same design: the
  fixed effects' normals, ``HalfStudentT(3, 2.5)`` group s.d.s) and the same parameterisation as ours (centred or
  not, as ``mm.glmm`` chose), ``--nuts-warmup`` + ``--nuts-draws``, chains vectorized.

Reported per configuration and method: seconds per phase, passes over ``N`` (warm-up; sampling), rows per test, min
bulk ESS and max R-hat over EVERY named effect (each fixed effect, each group s.d., each group's effect), ESS/s with
all time counted and its ratio to NUTS (and to NUTS's ceiling, its kept draws per second: what its ESS/s would be if
every kept draw were independent, so the ratio holds whatever NUTS's ESS estimate, which a short unconverged NUTS run
makes unreliable), the process's CPU seconds while the method ran and the ESS-per-CPU-second ratio to NUTS (and to its
ceiling: the fair comparison when the box's load differed between the two), against NUTS the largest ``|mean - mean_NUTS| / sd_NUTS`` and
``|sd / sd_NUTS - 1|`` over every named effect and the largest of each in combined Monte Carlo standard errors (``max z``), and the peak resident memory while the method ran (sampled every 20 ms;
the process's, so the data and anything an earlier method left count; on a GPU the device's peak so far in "of which").
A failed method is a row of the table, not the end of the run. The issue-31 grid (a GPU: NUTS at ``N = 10^6`` is hours
on a CPU):

    python benchmarks/glmm.py --n 100000 1000000 --groups 100 1000 --results docs/results/glmm_gpu.json
    python benchmarks/glmm.py --n 1000000 --groups 10000 --sizes tail --name glmm_tail --results docs/results/glmm_tail.json
    python benchmarks/glmm_large.py --n 10000000 --groups 100000 --chains 2 --warmup 50 --draws 50 --results ...

(``N = 10^7``, ``G = 10^5``: ``glmm_large.py`` runs ``mm.glmm``'s Gibbs route with a shorter warm-up than its 200 sweeps,
which on a CPU take hours there; at ``G = 10^5`` the draws of the group effects are ``chains x draws x G`` numbers).
Where the median group has fewer than 100 rows (``--sizes tail`` at ``N / G = 100``), or the model has more than
``MAX_DENSE_DIM = 4096`` parameters, ``mm.glmm`` samples level by level (``warmup.gibbs_route``: the row's "of which"
says ``group_gibbs``, its "rows per test" are the rows one sweep reads, ``passes per sweep x N``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from bench_results import add_results_option, machine_line, save_rows

import minibatch_mcmc as mm
from minibatch_mcmc.interop.formula import formula_design
from minibatch_mcmc.models.glmm import GLMMPrior, glmm_model, prior_scales

COLUMNS = [
    "N",
    "G",
    "rows/group (median)",
    "method",
    "seconds",
    "CPU s",
    "convert",
    "warm-up",
    "sampling",
    "check",
    "passes warm-up",
    "passes sampling",
    "rows per test",
    "acceptance",
    "min ESS",
    "max R-hat",
    "ESS/s",
    "x NUTS",
    "x NUTS (CPU s)",
    "max |mean err|/sd",
    "max |sd ratio - 1|",
    "max z mean",
    "max z sd",
    "peak RSS GB",
    "of which",
]
METHODS = ("ours", "NUTS")
GROUP_SD, SLOPE_SD = 0.5, 0.3


def group_sizes(n: int, groups: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """``G`` sizes summing to ``n``, each at least 1: equal, or a log-normal long tail (median half the mean)."""
    if kind == "equal":
        sizes = np.full(groups, n // groups)
        sizes[: n - sizes.sum()] += 1
        return sizes
    w = rng.lognormal(0.0, np.sqrt(2.0 * np.log(2.0)), groups)
    sizes = np.maximum(np.floor(w / w.sum() * (n - groups)).astype(np.int64), 0) + 1
    sizes[np.argmax(sizes)] += n - sizes.sum()
    return sizes


def simulate(n: int, groups: int, family: str, sizes: str, slope: bool, seed: int = 0) -> pd.DataFrame:
    """The rows (module docstring) as a DataFrame: ``y``, ``x1..x3``, ``g`` (level codes), ``log_e`` (Poisson's offset)."""
    rng = np.random.default_rng(seed)
    g = rng.permutation(np.repeat(np.arange(groups), group_sizes(n, groups, sizes, rng))).astype(np.int32)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    eta = -0.5 + x @ np.array([0.5, -0.3, 0.2]) + rng.normal(0.0, GROUP_SD, groups)[g]
    if slope:
        eta += rng.normal(0.0, SLOPE_SD, groups)[g] * x[:, 0]
    df = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2], "g": g})
    if family == "poisson":
        df["log_e"] = np.log(rng.uniform(0.5, 2.0, n)).astype(np.float32)
        df["y"] = rng.poisson(np.exp(eta + df["log_e"].to_numpy())).astype(np.int64)
    else:
        df["y"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    return df


def formula(slope: bool) -> str:
    """The model's formula."""
    return "y ~ x1 + x2 + x3 + " + ("(x1 | g)" if slope else "(1 | g)")


class PeakRSS:
    """The largest resident set size (GB) seen every 20 ms while the ``with`` block ran."""

    def __enter__(self) -> PeakRSS:
        self.peak, self._stop = rss_gb(), threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_gb())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_gb())


def rss_gb() -> float:
    """This process's resident set size in GB (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except OSError:
        return float("nan")


def device_peak() -> str:
    """The accelerator's peak memory in use so far (GB), where JAX reports it (GPUs), else an empty string."""
    stats = jax.devices()[0].memory_stats() or {}
    return f"; device peak {stats['peak_bytes_in_use'] / 1e9:.2f} GB" if "peak_bytes_in_use" in stats else ""


def run_ours(df: pd.DataFrame, args, centred: bool | None) -> dict:
    """``mm.glmm`` on the table: its named draws, each phase's seconds and passes, rows per test."""
    extra = {k: v for k, v in (("test", args.test), ("proposal", args.proposal), ("centred", centred)) if v is not None}
    start = time.perf_counter()
    res = mm.glmm(
        formula(args.slope),
        df,
        args.family,
        seed=1,
        num_samples=args.draws,
        num_chains=args.chains,
        offset="log_e" if args.family == "poisson" else None,
        progress=False,
        **extra,
    )
    seconds = time.perf_counter() - start
    summary, rec = res.warmup.summary(), res.result.records
    phases = summary["phases"]
    rows = float(np.mean(rec["batch_size"]) + np.mean(rec["hidden_data"]))
    after = sum(phases.get(k, {}).get("seconds", 0.0) for k in ("sampling", "check"))
    return {
        "draws": lambda: named_draws(res),
        "seconds": seconds,
        "convert": seconds - summary["total_seconds"] - after,
        "warm-up": summary["total_seconds"],
        "sampling": phases["sampling"]["seconds"],
        "check": phases.get("check", {}).get("seconds", 0.0),
        "passes warm-up": summary["total_passes"],
        "passes sampling": phases["sampling"]["passes"],
        "rows per test": rows,
        "acceptance": float(np.mean(rec["accepted"])),
        "centred": mostly_centred(res.centring),
        "design": res.fitted.design,
        "of which": f"{summary['proposal']} ({summary['why']}), {type(res.warmup.test).__name__ if res.warmup.test is not None else 'all rows'}, "
        f"{'centred' if mostly_centred(res.centring) else 'non-centred'} (mean weight {float(np.mean(res.centring[0])):.2f})",
    }


def mostly_centred(centring) -> bool:
    """Whether ``mm.glmm`` sampled the (first) factor mostly centred: its per-level weights (1 centred, 0 not) average over 1/2."""
    return bool(np.mean(centring[0]) > 0.5)


def named_draws(res) -> dict:
    """A ``GLMMResult``'s draws under the effects' names (float64: read after the method's peak memory was taken)."""
    posterior = res.to_inference_data().posterior
    return {k: np.asarray(posterior[k].values) for k in posterior.data_vars}


def nuts_model(design, family: str, centred: bool):
    """The same GLMM in NumPyro: ``models.glmm``'s priors for ``design`` and its parameterisation (one factor)."""
    import numpyro
    import numpyro.distributions as dist

    scales = prior_scales(design, family, GLMMPrior())
    f = design.factors[0]
    x, z, codes = (jnp.asarray(a, jnp.float32) for a in (design.x, f.z, f.codes))
    codes = codes.astype(jnp.int32)
    offset = None if design.offset is None else jnp.asarray(design.offset, jnp.float32)
    y = jnp.asarray(design.y, jnp.float32)
    levels, k = len(f.levels), len(f.terms)

    def model():
        beta = numpyro.sample(
            "beta",
            dist.Normal(
                jnp.asarray(scales.beta_loc, jnp.float32), jnp.asarray(scales.beta_scale, jnp.float32)
            ).to_event(1),
        )
        sd = numpyro.sample(
            "sd", dist.FoldedDistribution(dist.StudentT(3.0, 0.0, scales.sd_scale)).expand([k]).to_event(1)
        )
        if centred:
            u = numpyro.sample("u", dist.Normal(0.0, sd).expand([levels, k]).to_event(2))
        else:
            u = numpyro.sample("a", dist.Normal(0.0, 1.0).expand([levels, k]).to_event(2)) * sd
        eta = x @ beta + jnp.sum(z * u[codes], axis=-1)
        if offset is not None:
            eta = eta + offset
        numpyro.deterministic("u_eta", u)
        with numpyro.plate("rows", y.shape[0]):
            likelihood = dist.Poisson(jnp.exp(eta)) if family == "poisson" else dist.Bernoulli(logits=eta)
            numpyro.sample("y", likelihood, obs=y)

    return model


def run_nuts(design, args, centred: bool) -> dict:
    """NumPyro NUTS on all rows: draws under ``mm.glmm``'s names, seconds, steps per draw."""
    from numpyro.infer import MCMC, NUTS

    start = time.perf_counter()
    mcmc = MCMC(
        NUTS(nuts_model(design, args.family, centred)),
        num_warmup=args.nuts_warmup,
        num_samples=args.nuts_draws,
        num_chains=args.chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(2), extra_fields=("num_steps",))
    s = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    seconds = time.perf_counter() - start
    steps = float(np.mean(mcmc.get_extra_fields()["num_steps"]))
    f = design.factors[0]
    draws = {name: s["beta"][..., j] for j, name in enumerate(design.fixed)}
    for j, term in enumerate(f.terms):
        draws[f"{term}|{f.name}"] = s["u_eta"][..., j]
        draws[f"sd({term}|{f.name})"] = s["sd"][..., j]
    n_draws = args.chains * (args.nuts_warmup + args.nuts_draws)
    return {
        "draws": lambda: draws,
        "seconds": seconds,
        "sampling": seconds,
        "passes sampling": float("nan"),
        "rows per test": float("nan"),
        "of which": f"{steps:.1f} gradient passes per draw (sampling); "
        f"{'centred' if centred else 'non-centred'}; {n_draws} draws in all, warm-up included",
    }


def effect_stats(draws: dict, chunk: int = 2000) -> dict:
    """Per named effect (every level of every group term): bulk ESS, R-hat, mean, s.d. and the Monte Carlo standard
    errors of the mean and of the s.d. (``arviz.mcse``: the s.d.'s from the ESS of the squared deviations and their
    variance, not the draws' bulk ESS), as flat arrays by name."""
    import arviz as az

    out = {}
    for name, a in draws.items():
        a = np.asarray(a, np.float64).reshape(a.shape[:2] + (-1,))
        found = {"bulk": [], "rhat": [], "mean": [], "sd": []}
        for lo in range(0, a.shape[-1], chunk):
            part = {"v": a[..., lo : lo + chunk]}
            found["bulk"].append(np.asarray(az.ess(part, method="bulk")["v"]).ravel())
            found["rhat"].append(np.asarray(az.rhat(part)["v"]).ravel())
            for kind in ("mean", "sd"):
                found[kind].append(np.asarray(az.mcse(part, method=kind)["v"]).ravel())
        ess, rhat, se_mean, se_sd = (np.concatenate(found[k]) for k in ("bulk", "rhat", "mean", "sd"))
        out[name] = (ess, rhat, a.mean(axis=(0, 1)), a.std(axis=(0, 1)), se_mean, se_sd)
    return out


def agreement(stats: dict, ref: dict) -> tuple[float, float, float, float]:
    """Largest ``|mean - mean_ref| / sd_ref`` and ``|sd / sd_ref - 1|`` over every named effect both have, and the
    largest of each difference in its combined Monte Carlo standard errors (each run's ``arviz.mcse`` of the mean and
    of the s.d.): under Monte Carlo error alone the largest of ``K`` such z's is about ``sqrt(2 ln K)`` (3.5 for 200
    effects, 4.3 for 10^4). The s.d.'s standard error must come from the squared deviations' own ESS: NUTS's draws of
    a group effect are antithetic (bulk ESS above the number of draws) while their squares are not, and
    ``sd^2 / (2 bulk ESS)`` made NUTS's s.d.s look 2 to 5 times surer than they are (docs/benchmarks.md)."""
    mean_err = max(float(np.max(np.abs(stats[k][2] - ref[k][2]) / ref[k][3])) for k in ref)
    sd_err = max(float(np.max(np.abs(stats[k][3] / ref[k][3] - 1.0))) for k in ref)
    z_mean = max(float(np.max(np.abs(stats[k][2] - ref[k][2]) / np.hypot(stats[k][4], ref[k][4]))) for k in ref)
    z_sd = max(float(np.max(np.abs(stats[k][3] - ref[k][3]) / np.hypot(stats[k][5], ref[k][5]))) for k in ref)
    return mean_err, sd_err, z_mean, z_sd


def phase_note(found: dict) -> str:
    """Each phase's seconds, printed as soon as a method ends (a run stopped before the table still shows them)."""
    parts = [f"{k} {found[k]:.1f} s" for k in ("convert", "warm-up", "sampling", "check") if k in found]
    return f": {', '.join(parts)}" if parts else ""


def cell(value, fmt: str) -> str:
    """A number formatted, or ``-`` where there is none."""
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, fmt)


def configuration(n: int, groups: int, args, rows: list, values: dict) -> None:
    """Run the methods on one ``(N, G)`` and append their rows."""
    df = simulate(n, groups, args.family, args.sizes, args.slope)
    median = float(np.median(np.bincount(df["g"].to_numpy(), minlength=groups)))
    centred = {"auto": None, "centred": True, "non-centred": False}[args.centred]
    found, head = {}, [f"{n:.0e}", f"{groups:.0e}", f"{median:.0f}"]
    for method in args.methods:
        with warnings.catch_warnings(), PeakRSS() as mem:
            warnings.simplefilter("ignore")
            cpu = time.process_time()
            try:
                if method == "ours":
                    found[method] = run_ours(df, args, centred)
                else:
                    design = (
                        found["ours"]["design"]
                        if "ours" in found
                        else formula_design(
                            formula(args.slope), df, args.family, offset="log_e" if args.family == "poisson" else None
                        ).design
                    )
                    chosen = found["ours"]["centred"] if "ours" in found else centred
                    found[method] = run_nuts(
                        design,
                        args,
                        mostly_centred(glmm_model(design, args.family)[0].glmm.layout.centring)
                        if chosen is None
                        else bool(chosen),
                    )
            except Exception as err:  # noqa: BLE001 (a failed method is a row)
                rows.append(
                    head + [method, "failed"] + [""] * (len(COLUMNS) - 6) + [f"{type(err).__name__}: {err}"[:160]]
                )
                print(" | ".join(rows[-1]), flush=True)
                continue
        found[method]["peak"] = mem.peak
        found[method]["cpu"] = time.process_time() - cpu
        found[method]["of which"] += device_peak()
        print(
            f"  (N={n}, G={groups}: {method} took {found[method]['seconds']:.1f} s{phase_note(found[method])})",
            flush=True,
        )
    stats = {m: effect_stats(r["draws"]()) for m, r in found.items()}
    ref = stats.get("NUTS")
    least = {m: min(float(s[0].min()) for s in stats[m].values()) for m in found}
    rate = {m: least[m] / found[m]["seconds"] for m in found}
    cpu_rate = {m: least[m] / found[m]["cpu"] for m in found}
    for m, r in found.items():
        ess = least[m]
        rhat = max(float(s[1].max()) for s in stats[m].values())
        mean_err, sd_err, z_mean, z_sd = agreement(stats[m], ref) if ref is not None else (float("nan"),) * 4
        ratio = rate[m] / rate["NUTS"] if "NUTS" in rate else float("nan")
        cpu_ratio = cpu_rate[m] / cpu_rate["NUTS"] if "NUTS" in rate else float("nan")
        rows.append(
            head
            + [m, cell(r["seconds"], ".1f"), cell(r["cpu"], ".0f")]
            + [cell(r.get(k), ".1f") for k in ("convert", "warm-up", "sampling", "check")]
            + [
                cell(r.get("passes warm-up"), ".2f"),
                cell(r.get("passes sampling"), ".1f"),
                cell(r.get("rows per test"), ".0f"),
                cell(r.get("acceptance"), ".2f"),
                f"{ess:.0f}",
                f"{rhat:.3f}",
                f"{rate[m]:.2f}",
                cell(ratio, ".2f"),
                cell(cpu_ratio, ".2f"),
                cell(mean_err, ".3f"),
                cell(sd_err, ".3f"),
                cell(z_mean, ".1f"),
                cell(z_sd, ".1f"),
                f"{r['peak']:.2f}",
                r["of which"],
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
        values[f"{args.name}.{n}.{groups}.{m}.ess_per_s"] = f"{rate[m]:.2f}"
        if m != "NUTS" and "NUTS" in rate:
            values[f"{args.name}.{n}.{groups}.{m}_over_NUTS"] = f"{ratio:.2f}"
            values[f"{args.name}.{n}.{groups}.{m}_over_NUTS_cpu"] = f"{cpu_ratio:.2f}"
            nuts_cpu = args.chains * args.nuts_draws / found["NUTS"]["cpu"]
            values[f"{args.name}.{n}.{groups}.{m}_over_NUTS_cpu_ceiling"] = f"{cpu_rate[m] / nuts_cpu:.2f}"
            ceiling = args.chains * args.nuts_draws / found["NUTS"]["seconds"]
            values[f"{args.name}.{n}.{groups}.NUTS.ess_per_s_ceiling"] = f"{ceiling:.2f}"
            values[f"{args.name}.{n}.{groups}.{m}_over_NUTS_ceiling"] = f"{rate[m] / ceiling:.2f}"


def main() -> None:
    """Every ``(N, G)`` of the grid with every method; the table printed and (``--results``) saved after each."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000], help="rows")
    ap.add_argument("--groups", type=int, nargs="+", default=[100, 1000], help="levels of the grouping factor")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--family", default="bernoulli", choices=("bernoulli", "poisson"))
    ap.add_argument("--sizes", default="equal", choices=("equal", "tail"), help="group sizes (module docstring)")
    ap.add_argument("--slope", action="store_true", help="a random slope on x1 besides the intercept: (x1 | g)")
    ap.add_argument(
        "--centred",
        default="auto",
        choices=("auto", "centred", "non-centred"),
        help="ours' parameterisation (auto: mm.glmm's rule); NUTS takes the same",
    )
    ap.add_argument("--test", default=None, help="ours' acceptance test by name (default: mm.glmm's)")
    ap.add_argument("--proposal", default=None, help="ours' proposal by name (default: mm.glmm's)")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000, help="ours' draws per chain")
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-draws", type=int, default=1000)
    ap.add_argument("--name", default="glmm", help="results table name (a second results file needs its own)")
    add_results_option(ap)
    args = ap.parse_args()
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    rows, values = [], {}
    for n in args.n:
        for groups in args.groups:
            configuration(n, groups, args, rows, values)
            save_rows(args, COLUMNS, rows, values, machine, complete=False)
    save_rows(args, COLUMNS, rows, values, machine, complete=True)


if __name__ == "__main__":
    main()
