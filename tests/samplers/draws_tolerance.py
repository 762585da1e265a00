"""How a rerun of a reference case is compared with its stored draws: behaviour exactly, rounding tolerantly.

Every integer and boolean array (accept/reject decisions, batch sizes, data counts, moves, ring slots)
must be identical: those carry behaviour. Float arrays (positions, acceptance rates, per-step statistics)
may differ by float32 rounding, because another CPU, BLAS or XLA build may re-associate a reduction,
vectorise a transcendental function or run a different LAPACK kernel (the Stiefel case's QR differed
by one ulp on an AVX-512 EPYC).

The tolerance is derived, not fitted to one run. A tree-reduced float32 sum of ``n`` terms is wrong
by at most ``ceil(log2 n) * eps`` relative to the sum of magnitudes (Higham, *Accuracy and Stability
of Numerical Algorithms*, section 4.2), and a step of any case sums at most ``N_DATA`` terms, then
adds a few ulps in the proposal's own arithmetic (a gradient step, an exponential, a QR): ``2 *
ceil(log2 N_DATA) + 8`` ulps a step covers both with a factor of two. A position carries the rounding
of every earlier step on its chain, so the bound is ``STEPS`` times that, relative to the array's
largest magnitude: ``40 * 32 * eps32 = 1.5e-4`` of it. A change of behaviour moves a position by a
proposal's scale (the smallest in the cases, MALA's ``sqrt(2 * 1e-3) = 0.045`` a step, is 300 times
the tolerance on the unit-scale positions) and flips a decision, so it still fails;
``test_comparison_has_power`` checks both directions on the stored draws.
"""

from __future__ import annotations

import math

import numpy as np
from reference_cases import N_DATA, STEPS

EPS32 = float(np.finfo(np.float32).eps)


def float_ulps(steps: int = STEPS, n_terms: int = N_DATA) -> int:
    """Float32 ulps a chain of ``steps`` steps, each summing at most ``n_terms`` terms, may drift by rounding."""
    return steps * (2 * math.ceil(math.log2(max(n_terms, 2))) + 8)


def float_tolerance(expected: np.ndarray, steps: int = STEPS, n_terms: int = N_DATA) -> float:
    """Absolute tolerance for one float array: ``float_ulps`` float32 ulps of its largest finite magnitude."""
    finite = np.abs(expected[np.isfinite(expected)])
    scale = float(finite.max()) if finite.size else 0.0
    return float_ulps(steps, n_terms) * EPS32 * max(scale, float(np.finfo(np.float32).tiny))


def mismatches(
    got: dict[str, np.ndarray], want: dict[str, np.ndarray], steps: int = STEPS, n_terms: int = N_DATA
) -> list[str]:
    """What differs between a rerun and the reference: exact for integers and booleans, rounding-tolerant for floats.

    ``steps`` and ``n_terms`` are the run's chain length and the most terms one step sums (the reference
    cases' by default): the tolerance grows with both (``float_ulps``).
    """
    out = [f"arrays recorded changed: {sorted(set(want) ^ set(got))}"] if set(want) - set(got) else []
    for key, expected in want.items():
        actual = got.get(key)
        if actual is None:
            continue
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            out.append(f"{key}: {actual.dtype}{actual.shape} against {expected.dtype}{expected.shape}")
        elif not np.issubdtype(expected.dtype, np.floating):
            bad = np.flatnonzero(actual.ravel() != expected.ravel())
            if bad.size:
                out.append(
                    f"{key}: {bad.size} of {expected.size} differ (first at flat index {bad[0]}: "
                    f"{actual.ravel()[bad[0]]} against {expected.ravel()[bad[0]]})"
                )
        else:
            tol = float_tolerance(expected, steps, n_terms)
            same_nan = np.isnan(actual) == np.isnan(expected)
            err = np.abs(np.where(np.isnan(expected), 0.0, actual.astype(np.float64) - expected))
            bad = np.flatnonzero(~same_nan.ravel() | (err.ravel() > tol))
            if bad.size:
                out.append(
                    f"{key}: {bad.size} of {expected.size} beyond {tol:.3g} (largest difference "
                    f"{float(np.nanmax(err)):.3g})"
                )
    return out
