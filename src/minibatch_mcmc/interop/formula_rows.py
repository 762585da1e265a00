"""A formula design's rows held once, in the dtypes the model reads (issue 31, memory at ``N = 10^7``).

``formulae`` evaluates a formula in float64 and keeps what it evaluated (its design matrix, the table, each
intercept's column of ones); a GLMM reads float32 columns and int32 codes. ``interop.formula`` builds the design in
those dtypes, aligned so that JAX shares them (``data.aligned``; ``models.glmm.glmm_data`` shares them too), and lets
``formulae``'s copies go: new rows are evaluated from the terms alone.
"""

from __future__ import annotations

import numpy as np

from minibatch_mcmc.data.aligned import aligned, aligned_empty, frozen


def float32_stack(blocks: list, n: int) -> np.ndarray:
    """The ``(n, k_i)`` ``blocks`` side by side as one aligned read-only float32 ``(n, sum k_i)`` array (no float64 copy
    of them)."""
    width = sum(np.shape(b)[1] for b in blocks)
    out, at = aligned_empty((n, width), np.float32), 0
    for b in blocks:
        out[:, at : at + np.shape(b)[1]] = b
        at += np.shape(b)[1]
    return frozen(out)


def level_codes(codes: np.ndarray, levels: int) -> np.ndarray:
    """Each row's level code (the formula's own array) as an aligned read-only int32 array (int64 from ``2^31``
    levels)."""
    return frozen(aligned(codes, np.int32 if levels < 2**31 else np.int64))


def narrowed(values: np.ndarray) -> np.ndarray:
    """``values`` as (aligned) float32 where that holds them exactly (0/1 and counts below 2^24), else as they are."""
    small = aligned(values, np.float32)
    return small if np.array_equal(small, values) else values


def release_rows(common) -> None:
    """Drop the fitted rows ``formulae``'s matrix keeps (its design matrix and table): new rows are evaluated from its
    terms alone (``evaluate_new_data``), so the fit need not hold a float64 copy of its rows."""
    if common is not None:
        common.design_matrix, common.data = None, None
        drop_intercept_rows(common.terms.values())


def drop_intercept_rows(terms) -> None:
    """Let go of the int64 column of ones (``N`` rows) an evaluated ``formulae`` intercept holds: new
    rows' intercepts are made afresh (``Intercept.eval_new_data``)."""
    from formulae.terms import Intercept

    for term in terms:
        if isinstance(term, Intercept):
            term.data = None
