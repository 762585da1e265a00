"""Where a GLMM's group effects are sampled centred and where non-centred: per level, from a cheap pilot fit.

Each effect ``u`` of a level (one column of one level of a factor with s.d. ``sd``) is sampled as ``e`` with
``u = sd^(1 - w) e`` and ``e ~ N(0, sd^(2 w))``: ``w = 1`` centred (``e = u``), ``w = 0`` non-centred (``e = u / sd``),
between them partially centred (Papaspiliopoulos, Roberts and Skold 2007). The prior of ``u`` given ``sd`` is
``N(0, sd^2)`` for every ``w``, so the posterior of ``(beta, u, sd)`` does not depend on the weights; only the geometry
the sampler sees does. The weight chosen is ``w = I sd^2 / (1 + I sd^2)``, the data's share of the effect's
posterior precision, with ``I`` the data's Fisher information about the effect and ``1 / sd^2`` the prior's: near 1
where the data pin the effect, near 0 where the prior does (docs/notes-on-the-papers.md, "Centred or non-centred").

The pilot (``centring_weights``): a pooled fit of the fixed effects (and the family's shared parameters) ignoring the
groups, penalised IRLS by the model's own fixed-effect prior on at most ``PILOT_ROWS`` evenly spaced rows; then one
pass over all rows (numpy, in chunks) summing each level's score and Fisher information at that fit; each level's
one-step estimate ``score / I`` and the moment estimate of each column's s.d. across levels (``between_sd``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from minibatch_mcmc.models.glmm_design import GLMMDesign

PILOT_ROWS = 1 << 16
"""Rows of the pooled fit (evenly spaced over the design)."""
PILOT_CHUNK = 1 << 18
"""Rows per chunk of the pass over all rows."""
PILOT_NU = 4.0
"""The Student-t family's degrees of freedom in the pilot (its Fisher information per row is ``(nu + 1) / ((nu + 3) sigma^2)``)."""


class Centring(NamedTuple):
    """The pilot's measurements and the weights they give, per factor (design order)."""

    weights: tuple[np.ndarray, ...]
    """``(G_f, k_f)`` in ``[0, 1]``: 1 centred, 0 non-centred."""
    information: tuple[np.ndarray, ...]
    """``(G_f, k_f)`` the data's Fisher information about each effect at the pooled fit (0 for a level without rows)."""
    sd: tuple[np.ndarray, ...]
    """``(k_f,)`` the moment estimate of each column's group s.d."""
    rows: int
    """Rows read by the pass (the pooled fit reads at most ``PILOT_ROWS`` more)."""


def row_score_info(
    family: str, eta: np.ndarray, y: np.ndarray, trials: np.ndarray | None, extra: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's score ``d log p / d eta`` and Fisher information at ``eta`` (``extra``: sigma, or alpha for the negative binomial)."""
    if family in ("bernoulli", "binomial"):
        n = 1.0 if trials is None else trials
        p = 1.0 / (1.0 + np.exp(-eta))
        return y - n * p, n * p * (1.0 - p)
    if family in ("poisson", "negative_binomial"):
        mu = np.exp(np.minimum(eta, 50.0))
        if family == "poisson":
            return y - mu, mu
        return (y - mu) * extra / (extra + mu), mu * extra / (extra + mu)
    r = y - eta
    if family == "gaussian":
        return r / extra**2, np.full_like(eta, 1.0 / extra**2)
    return (PILOT_NU + 1.0) * r / (PILOT_NU * extra**2 + r * r), np.full_like(
        eta, (PILOT_NU + 1.0) / ((PILOT_NU + 3.0) * extra**2)
    )


def pilot_rows(n: int) -> np.ndarray:
    """At most ``PILOT_ROWS`` evenly spaced row indices of ``n``."""
    return np.unique(np.linspace(0, n - 1, min(n, PILOT_ROWS)).astype(np.int64)) if n else np.zeros(0, np.int64)


def rows64(values, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` of ``values`` in float64 (no float64 copy of the other rows)."""
    return np.asarray(np.asarray(values)[idx], np.float64)


def pooled_fit(
    design: GLMMDesign, family: str, loc: np.ndarray, scale: np.ndarray, iterations: int = 30
) -> tuple[np.ndarray, float]:
    """``(beta, extra)``: the fixed effects without the groups (penalised IRLS, prior ``N(loc, scale^2)``) and sigma or alpha."""
    idx = pilot_rows(len(design.y))
    x, y = rows64(design.x, idx), rows64(design.y, idx)  # the pilot's rows, not all N, in float64
    off = 0.0 if design.offset is None else rows64(design.offset, idx)
    trials = None if design.trials is None else rows64(design.trials, idx)
    weight = len(design.y) / max(len(idx), 1)
    precision = np.diag(1.0 / scale**2)
    beta, extra = loc.astype(np.float64), 1.0
    if family in ("gaussian", "student_t"):
        beta = np.linalg.solve(weight * x.T @ x + precision, weight * x.T @ (y - off) + precision @ beta)
        return beta, residual_scale(design, y - off - x @ beta, idx)
    for _ in range(iterations):
        eta = x @ beta + off
        score, info = row_score_info("poisson" if family == "negative_binomial" else family, eta, y, trials, extra)
        step = np.linalg.solve(weight * (x.T * info) @ x + precision, weight * x.T @ score - precision @ (beta - loc))
        beta = beta + step
        if np.max(np.abs(step)) < 1e-8:
            break
    if family == "negative_binomial":
        mu = np.exp(np.minimum(x @ beta + off, 50.0))
        excess = np.sum((y - mu) ** 2 - mu)
        extra = float(np.clip(np.sum(mu**2) / excess, 1e-3, 1e6)) if excess > 0 else 1e6
    return beta, extra


def residual_scale(design: GLMMDesign, resid: np.ndarray, idx: np.ndarray) -> float:
    """The residuals' spread within levels (each factor's level means removed in turn): the pilot's sigma."""
    r = resid.copy()
    for f in design.factors:
        codes = np.asarray(f.codes)[idx]
        counts = np.bincount(codes, minlength=len(f.levels))
        r = r - (np.bincount(codes, r, minlength=len(f.levels)) / np.maximum(counts, 1))[codes]
    spread = 1.4826 * np.median(np.abs(r - np.median(r))) if r.size else 1.0
    return float(spread) if spread > 0 else max(float(np.std(r)), 1e-6)


def level_sums(
    design: GLMMDesign, family: str, beta: np.ndarray, extra: float
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per factor ``(G_f, k_f)`` sums over each level's rows of ``score z`` and ``information z^2`` at ``eta = x beta (+ offset)``."""
    n = len(design.y)
    scores = [np.zeros((len(f.levels), len(f.terms))) for f in design.factors]
    infos = [np.zeros((len(f.levels), len(f.terms))) for f in design.factors]
    for start in range(0, n, PILOT_CHUNK):
        rows = slice(start, min(n, start + PILOT_CHUNK))
        eta = np.asarray(design.x[rows], np.float64) @ beta
        if design.offset is not None:
            eta = eta + np.asarray(design.offset[rows], np.float64)
        trials = None if design.trials is None else np.asarray(design.trials[rows], np.float64)
        score, info = row_score_info(family, eta, np.asarray(design.y[rows], np.float64), trials, extra)
        for f, factor in enumerate(design.factors):
            codes, z = np.asarray(factor.codes[rows]), np.asarray(factor.z[rows], np.float64)
            for j in range(z.shape[1]):
                scores[f][:, j] += np.bincount(codes, score * z[:, j], minlength=len(factor.levels))
                infos[f][:, j] += np.bincount(codes, info * z[:, j] ** 2, minlength=len(factor.levels))
    return scores, infos


def between_sd(score: np.ndarray, info: np.ndarray) -> np.ndarray:
    """``(k,)``: per column, the moment estimate of the s.d. of the effects from their one-step estimates ``score / I``.

    With ``c_g = score_g / I_g ~ N(0, 1 / I_g + sd^2)`` (mean zero: the pooled fit took the common part),
    ``sum_g I_g c_g^2`` has expectation ``G + sd^2 sum_g I_g``; levels without information are left out."""
    seen = info > 0
    q = np.sum(np.where(seen, score**2 / np.where(seen, info, 1.0), 0.0), axis=0)
    total = np.sum(info, axis=0)
    var = np.where(total > 0, (q - np.sum(seen, axis=0)) / np.where(total > 0, total, 1.0), 0.0)
    return np.sqrt(np.maximum(var, 0.0))


def partial_weights(info: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``w = I sd^2 / (1 + I sd^2)``: the data's share of each effect's posterior precision (1 centred, 0 non-centred)."""
    ratio = info * np.asarray(sd)[None, :] ** 2
    return ratio / (1.0 + ratio)


def centring_weights(design: GLMMDesign, family: str, loc: np.ndarray, scale: np.ndarray) -> Centring:
    """The pilot of the module docstring: each level's weight from its Fisher information and the factor's s.d. estimate.

    Args:
        design: the GLMM's design.
        family: its response family.
        loc: the fixed effects' prior locations (the pooled fit's penalty).
        scale: their prior scales.
    """
    beta, extra = pooled_fit(design, family, np.asarray(loc, np.float64), np.asarray(scale, np.float64))
    scores, infos = level_sums(design, family, beta, extra)
    sds = tuple(between_sd(s, i) for s, i in zip(scores, infos))
    weights = tuple(partial_weights(i, sd) for i, sd in zip(infos, sds))
    return Centring(weights=weights, information=tuple(infos), sd=sds, rows=len(design.y))


def fixed_centring(design: GLMMDesign, centred: bool) -> tuple[np.ndarray, ...]:
    """Every weight 1 (``centred``) or 0: the parameterisation as written."""
    return tuple(np.full((len(f.levels), len(f.terms)), 1.0 if centred else 0.0) for f in design.factors)


def written_mismatch(centring: Centring, centred: bool, names: tuple[str, ...]) -> str | None:
    """A sentence naming the factors with effects whose measured weight is on the other side of 1/2 from ``centred``, or None."""
    parts = []
    for name, w, info, sd in zip(names, centring.weights, centring.information, centring.sd):
        wrong = (w < 0.5) if centred else (w > 0.5)
        if np.any(wrong):
            ratio = info * sd[None, :] ** 2
            worst = float(np.min(ratio[wrong]) if centred else np.max(ratio[wrong]))
            parts.append(
                f"factor {name!r}: {int(np.sum(wrong))} of {w.size} effects (data/prior precision "
                f"{'down to' if centred else 'up to'} {worst:.3g}, group s.d. ~ {np.round(sd, 3).tolist()})"
            )
    if not parts:
        return None
    kind = "centred, but the prior dominates" if centred else "non-centred, but the data dominate"
    return f"sampling as written ({kind}): " + "; ".join(parts)
