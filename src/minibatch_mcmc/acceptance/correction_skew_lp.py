"""The offline builder of the skew-corrected tables ``C_{sigma,kappa}`` (Seita et al. 2017, supplement E).

To first order in the skew of the per-datum terms, MHminibatch's noise ``delta_star - Delta + X_nc`` has
the density ``phi_sigma - kappa phi_sigma'''`` (the Edgeworth kernel, one extra parameter ``kappa``; see
:mod:`minibatch_mcmc.acceptance.mhminibatch_skew` for how ``kappa`` follows from the minibatch). For each
``kappa`` on the grid ``0, KAPPA_STEP, ..., KAPPA_MAX`` this module solves the correction LP of
:mod:`minibatch_mcmc.acceptance.correction_lp` with that kernel; the row ``kappa = 0`` *is* the plain shipped
table. Negative ``kappa`` needs no rows: the kernel at ``-kappa`` is the mirror image of the one at ``kappa``,
so ``C_{sigma,-kappa}(x) = C_{sigma,kappa}(-x)``. A ``kappa`` between two rows draws from the mixture of the
two rows with linear weights; the mixture's own CDF error (measured here at weights 1/4, 1/2, 3/4 of every
interval) is part of the table's stated error. Regenerate the shipped file with
``python -m minibatch_mcmc.acceptance.correction_skew_lp`` (51 linear programmes).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy.special import ndtr

from minibatch_mcmc.acceptance.correction import (
    SKEW_PATH,
    CorrectionTable,
    alias_cells,
    check_sigma,
    load_correction,
    skew_tables,
)
from minibatch_mcmc.acceptance.correction_lp import ConvolutionKernel, alias_table, measured_error, solve_correction
from minibatch_mcmc.checks import check_positive, check_real

KAPPA_MAX = 0.1
"""Largest ``|kappa|`` tabulated (``kappa`` ~ skewness * s^3 / (3 sqrt(b)): 0.1 is skewness 2.1 at b = 50, s = 1)."""

KAPPA_STEP = KAPPA_MAX / 50
"""Spacing of the rows: a two-row mixture's CDF error is about ``0.1 * KAPPA_STEP^2`` (measured: ``mixture_errors``)."""

SKEW_SIGMAS: tuple[float, ...] = (1.0,)
"""The ``sigma`` values whose skew tables are shipped."""

MIXTURE_WEIGHTS = (0.25, 0.5, 0.75)
"""Weights of the upper row at which each interval's mixture error is measured."""


def edgeworth_kernel(sigma: float, kappa: float) -> ConvolutionKernel:
    """The kernel with density ``phi_sigma - kappa phi_sigma'''``: CDF ``Phi(x / sigma) - kappa phi_sigma''(x)``."""
    sigma = check_sigma(sigma)
    kappa = check_real(kappa, "kappa", -1.0, 1.0)

    def cdf(d: np.ndarray) -> np.ndarray:
        z = d / sigma
        return ndtr(z) - kappa * np.exp(-0.5 * z * z) * (z * z - 1.0) / (math.sqrt(2.0 * math.pi) * sigma**3)

    return ConvolutionKernel(cdf, sigma, kappa == 0.0)


def kappa_grid(kappa_max: float = KAPPA_MAX, kappa_step: float = KAPPA_STEP) -> np.ndarray:
    """The rows ``0, kappa_step, ..., kappa_max`` (``kappa_max`` a whole number of steps)."""
    kappa_max = check_real(kappa_max, "kappa_max", 0.0, 1.0, low_open=True)
    kappa_step = check_positive(kappa_step, "kappa_step")
    count = kappa_max / kappa_step
    if abs(count - round(count)) > 1e-6 or round(count) < 1:
        raise ValueError(f"kappa_max={kappa_max!r} must be a whole number (>= 1) of kappa_step={kappa_step!r}")
    return kappa_step * np.arange(round(count) + 1)


def solve_skew_rows(sigma: float, kappas: np.ndarray) -> list[CorrectionTable]:
    """One LP per ``kappa > 0``; the ``kappa = 0`` row is the plain shipped table itself."""
    return [
        load_correction(sigma) if k == 0.0 else solve_correction(sigma, kernel=edgeworth_kernel(sigma, k))
        for k in kappas
    ]


def mixture_errors(sigma: float, kappas: np.ndarray, rows: list[CorrectionTable]) -> np.ndarray:
    """Max CDF error of the two-row mixture over ``MIXTURE_WEIGHTS`` for each interval between rows."""
    out = np.zeros(len(rows) - 1)
    for i in range(len(rows) - 1):
        for w in MIXTURE_WEIGHTS:
            probs = (1.0 - w) * rows[i].probs + w * rows[i + 1].probs
            kappa = (1.0 - w) * kappas[i] + w * kappas[i + 1]
            out[i] = max(out[i], measured_error(rows[i].support, probs, sigma, edgeworth_kernel(sigma, kappa)))
    return out


def build_skew_tables(
    path: str | Path | None = None, sigma: float = 1.0, kappa_max: float = KAPPA_MAX, kappa_step: float = KAPPA_STEP
) -> dict[str, float]:
    """Solve every row, measure rows and mixtures, write the npz; return the largest row and mixture errors."""
    target = Path(path) if path is not None else SKEW_PATH
    kappas = kappa_grid(kappa_max, kappa_step)
    rows = solve_skew_rows(sigma, kappas)
    row_errors = np.array([t.max_cdf_error for t in rows])
    mix = mixture_errors(sigma, kappas, rows)
    cells = alias_cells(rows[0].support.size)
    alias = [alias_table(t.probs, cells) for t in rows]
    target.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        target,
        sigma=np.float64(check_sigma(sigma)),
        kappas=kappas,
        support=rows[0].support,
        probs=np.stack([t.probs for t in rows]),
        alias_prob=np.stack([a[0] for a in alias]),
        alias_index=np.stack([a[1] for a in alias]).astype(np.int16),
        row_errors=row_errors,
        mixture_errors=mix,
        max_cdf_error=np.float64(max(row_errors.max(), mix.max())),
    )
    skew_tables.cache_clear()
    return {"max_row_error": float(row_errors.max()), "max_mixture_error": float(mix.max())}


def _main() -> None:
    """Regenerate the shipped skew tables and print their errors."""
    import time

    start = time.perf_counter()
    errors = build_skew_tables()
    elapsed = time.perf_counter() - start
    print(f"wrote {SKEW_PATH} ({SKEW_PATH.stat().st_size / 1024:.1f} KiB) in {elapsed:.1f} s")
    for name, err in errors.items():
        print(f"  {name}: {err:.3e}")


if __name__ == "__main__":
    _main()
