"""Risk of posterior expectations (Korattikara et al., Section 4): bias^2 + variance over repeated chains.

The risk of an estimator ``I_hat`` of a posterior expectation ``I = E_post[f(theta)]`` is
``E[(I_hat - I)^2] = (E[I_hat] - I)^2 + Var[I_hat]``.  With ``R`` independent chains the expectation over
the sampler's randomness is replaced by the average over chains and ``I`` by a long reference run.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from minibatch_mcmc.checks import check_int


class Risk(NamedTuple):
    """Squared bias, variance and risk (= bias2 + variance) of R chains' estimates, averaged over the quantities."""

    bias2: float
    variance: float
    risk: float


class RiskCurve(NamedTuple):
    """Risk of the running-mean estimates at increasing wall-clock times (each field shaped ``(num_points,)``)."""

    times: np.ndarray
    bias2: np.ndarray
    variance: np.ndarray
    risk: np.ndarray


def _as_reference(reference: np.ndarray, q: int) -> np.ndarray:
    """The reference values as a float vector of length ``q``."""
    ref = np.asarray(reference, float)
    if ref.ndim == 0:
        ref = np.full(q, float(ref))
    if ref.shape != (q,):
        raise ValueError(f"reference must have shape ({q},) to match the estimates' {q} quantities; got {ref.shape}")
    if not np.all(np.isfinite(ref)):
        raise ValueError("reference must be finite")
    return ref


def _risk_terms(estimates: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-quantity squared bias and variance (ddof=0) of estimates ``(..., R, Q)`` against ``reference (Q,)``."""
    mean = estimates.mean(axis=-2)
    bias2 = (mean - reference) ** 2
    variance = estimates.var(axis=-2)
    return bias2, variance


def posterior_risk(estimates: np.ndarray, reference: np.ndarray) -> Risk:
    """Risk of ``R`` independent chains' estimates ``(R, Q)`` of ``Q`` posterior expectations against ``reference (Q,)``.

    ``bias2 = mean_q (mean_r est[r, q] - ref[q])^2`` and ``variance = mean_q var_r est[r, q]`` (population
    variance, so ``risk = bias2 + variance = mean_{r, q} (est[r, q] - ref[q])^2`` exactly).
    A 1-D ``estimates`` is read as ``R`` estimates of one quantity.
    """
    est = np.asarray(estimates, float)
    if est.ndim == 1:
        est = est[:, None]
    if est.ndim != 2 or est.shape[0] < 1 or est.shape[1] < 1:
        raise ValueError(f"estimates must have shape (R, Q) with R, Q >= 1; got {np.shape(estimates)}")
    if not np.all(np.isfinite(est)):
        raise ValueError("estimates must be finite")
    ref = _as_reference(reference, est.shape[1])
    bias2, variance = _risk_terms(est, ref)
    b, v = float(bias2.mean()), float(variance.mean())
    return Risk(bias2=b, variance=v, risk=b + v)


def _as_wall_times(wall_times: np.ndarray, r: int, t: int) -> np.ndarray:
    """Cumulative wall times as an ``(R, T)`` array, checked finite and non-decreasing along draws."""
    w = np.asarray(wall_times, float)
    if w.shape == (t,):
        w = np.broadcast_to(w, (r, t))
    if w.shape != (r, t):
        raise ValueError(f"wall_times must have shape ({t},) or ({r}, {t}) to match values; got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("wall_times must be finite")
    if np.any(np.diff(w, axis=1) < 0):
        raise ValueError("wall_times must be cumulative (non-decreasing along draws)")
    if np.any(w[:, -1] <= 0):
        raise ValueError("wall_times must reach a positive time in every chain")
    return w


def risk_curve(values: np.ndarray, wall_times: np.ndarray, reference: np.ndarray, num_points: int = 20) -> RiskCurve:
    """Risk vs wall-clock time of the running means of ``values (R, T, Q)`` (f(theta_t) of R repeated chains).

    ``wall_times`` is ``(T,)`` or ``(R, T)`` cumulative seconds at each draw.  At ``num_points`` times spaced
    logarithmically from the latest time at which every chain has a draw (with positive time) to the earliest
    time at which a chain ends, each chain's estimate is the mean of its draws completed by then; these ``R``
    estimates go to :func:`posterior_risk`.  ``values (R, T)`` is read as one quantity.
    """
    vals = np.asarray(values, float)
    if vals.ndim == 2:
        vals = vals[..., None]
    if vals.ndim != 3 or min(vals.shape) < 1:
        raise ValueError(f"values must have shape (R, T, Q) with R, T, Q >= 1; got {np.shape(values)}")
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite")
    num_points = check_int(num_points, "num_points", low=1)
    r, t, q = vals.shape
    ref = _as_reference(reference, q)
    w = _as_wall_times(wall_times, r, t)
    first_positive = np.array([row[row > 0][0] for row in w])
    t_lo, t_hi = float(first_positive.max()), float(w[:, -1].min())
    if t_lo > t_hi:
        raise ValueError(
            f"the chains' wall-time ranges do not overlap: every chain has a draw only after {t_lo:g} s "
            f"but one ends at {t_hi:g} s"
        )
    times = np.geomspace(t_lo, t_hi, int(num_points))
    running = np.cumsum(vals, axis=1) / np.arange(1, t + 1)[None, :, None]
    # index of the last draw completed by each time, per chain: (num_points, R)
    idx = np.stack([np.searchsorted(row, times, side="right") - 1 for row in w], axis=1)
    idx = np.clip(idx, 0, t - 1)
    estimates = running[np.arange(r)[None, :], idx]  # (num_points, R, Q)
    bias2, variance = _risk_terms(estimates, ref)
    b, v = bias2.mean(axis=-1), variance.mean(axis=-1)
    return RiskCurve(times=times, bias2=b, variance=v, risk=b + v)
