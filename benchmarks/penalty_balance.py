"""How exact the penalty test is when its minibatch mean is normal: detailed balance by quadrature and by simulation.

Two tables, for ``acceptance.penalty.penalty`` (the series ``u_B`` for a variance estimated from ``b`` rows):

- ``penalty_series``: ``x ~ N(D, s^2)``, a variance estimate ``v ~ s^2 chi2_{b-1} / (b-1)`` independent of it, accept with
  ``min(1, exp(x - u(v)))``; the largest ``|log(a(D) / a(-D)) - D|`` over ``D`` in [-3, 3] by quadrature over ``v``
  (closed form over ``x``), for the series and for the known-variance penalty ``v / 2``; and ``a(0)`` beside
  ``2 Phi(-s/2)``, a perfect proposal's acceptance with a known variance.
- ``penalty_stopping``: the whole test with its growth rule (chunks of ``m = 50`` normal rows while ``v >= sigma_max^2 = 1``)
  simulated from the chi-square increments of the sums of squares (the final mean is independent of them for normal
  rows), for several values of the 50-row estimate's true s.d.: mean rows read, largest log-ratio error over ``D``
  in [-2, 2], and ``a(0)``. Stopping when ``v`` is small selects small ``v``: the error peaks when the true s.d. is near
  ``sigma_max``.

    .venv/bin/python benchmarks/penalty_balance.py [--results docs/results/penalty_balance.json]
"""

from __future__ import annotations

import argparse

import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from scipy import stats

from minibatch_mcmc.acceptance.penalty import penalty

M = 50


def code_penalty(v: np.ndarray, rows: np.ndarray | int) -> np.ndarray:
    """The library's penalty, in float64 numbers."""
    return np.asarray(penalty(jnp.asarray(v, jnp.float32), jnp.asarray(rows)), np.float64)


def acceptance(d: float, s: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Mean of ``min(1, exp(x - u))`` over ``x ~ N(d, s^2)`` (closed form), elementwise."""
    return stats.norm.cdf((d - u) / s) + np.exp(d - u + s * s / 2) * stats.norm.cdf((u - d - s * s) / s)


def balance_error(s: np.ndarray, u: np.ndarray, grid: np.ndarray) -> float:
    """Largest ``|log(a(D) / a(-D)) - D|`` over ``grid``, ``a`` averaged over the draws ``(s, u)``."""
    return max(abs(np.log(acceptance(d, s, u).mean() / acceptance(-d, s, u).mean()) - d) for d in grid)


def series_rows(sigmas: list[float]) -> list[list[str]]:
    """The quadrature table."""
    q = (np.arange(20_000) + 0.5) / 20_000
    rows = []
    for s in sigmas:
        v = s * s * stats.chi2.ppf(q, M - 1) / (M - 1)
        grid = np.linspace(-3.0, 3.0, 13)
        rows.append(
            [
                f"{s:g}",
                f"{balance_error(s, code_penalty(v, M), grid):.1e}",
                f"{balance_error(s, v / 2, grid):.1e}",
                f"{acceptance(0.0, s, code_penalty(v, M)).mean():.3f}",
                f"{2 * stats.norm.cdf(-s / 2):.3f}",
            ]
        )
    return rows


def stopping_rows(sigmas: list[float], reps: int, seed: int) -> list[list[str]]:
    """The simulated table of the test with its growth rule."""
    rng = np.random.default_rng(seed)
    rows = []
    for s50 in sigmas:
        var_row = s50 * s50 * M  # Var(delta_star) from b rows is var_row / b (N large: no finite-population factor)
        b = np.full(reps, M)
        ss = var_row * rng.chisquare(M - 1, reps)
        done = ss / (b - 1) / b < 1.0
        while not done.all():
            idx = ~done
            ss[idx] += var_row * rng.chisquare(
                M, int(idx.sum())
            )  # within-chunk squares plus the between-chunk contrast
            b[idx] += M
            done = ss / (b - 1) / b < 1.0
        v, s = ss / (b - 1) / b, np.sqrt(var_row / b)
        u = code_penalty(v, b)
        rows.append(
            [
                f"{s50:g}",
                f"{b.mean():.0f}",
                f"{balance_error(s, u, np.linspace(-2.0, 2.0, 9)):.1e}",
                f"{acceptance(0.0, s, u).mean():.3f}",
            ]
        )
    return rows


def main() -> None:
    """Print both tables (and write them with ``--results``)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200_000, help="simulated steps per row of the stopping table")
    ap.add_argument("--seed", type=int, default=0)
    add_results_option(ap)
    args = ap.parse_args()
    series = table(
        ["s", "series: max log-ratio error", "v/2 only", "a(0)", "2 Phi(-s/2)"], series_rows([0.5, 1.0, 1.5, 2.0])
    )
    stopping = table(
        ["s.d. at 50 rows", "mean rows", "max log-ratio error", "a(0)"],
        stopping_rows([0.3, 0.7, 0.9, 1.0, 1.1, 1.3, 2.0, 4.0], args.reps, args.seed),
    )
    for name, t in (("penalty_series", series), ("penalty_stopping", stopping)):
        print(name)
        print("  ".join(t["columns"]))
        for r in t["rows"]:
            print("  ".join(r))
    values = {
        "penalty_series_error_1": series["rows"][1][1],
        "penalty_halfv_error_1": series["rows"][1][2],
        "penalty_stopping_worst": max(stopping["rows"], key=lambda r: float(r[2]))[2],
    }
    save(
        args.results,
        "penalty_balance",
        config=args,
        tables={"penalty_series": series, "penalty_stopping": stopping},
        values=values,
    )


if __name__ == "__main__":
    main()
