"""The design of a generalised linear mixed model (GLMM): what a formula or a user's own arrays hand to the model.

A GLMM's row ``i`` has the linear predictor ``eta_i = x_i . beta + sum_f z_{f,i} . u_{f, g_f(i)} (+ offset_i)``: fixed
effects ``beta`` on the columns of ``x``, and for each grouping factor ``f`` (``(1 | g)``, ``(x1 | h)``) the effects
``u_{f,g}`` of the row's level ``g_f(i)`` on the factor's own columns ``z_f`` (a column of ones for a random intercept).
This module holds only that description and its checks; the model (priors, families, parameterisation) is
``models.glmm``, the formula front end builds a ``GLMMDesign`` from a table.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class GroupFactor(NamedTuple):
    """One grouping factor: each row's level and the columns its group effects multiply."""

    name: str
    """The factor's name as the user wrote it (``"g"`` in ``(1 | g)``)."""
    codes: np.ndarray
    """``(N,)`` integer level of each row, in ``0 .. len(levels) - 1``."""
    z: np.ndarray
    """``(N, k)`` the factor's columns (a column of ones for a random intercept)."""
    levels: tuple[str, ...]
    """The ``G`` level names, in code order."""
    terms: tuple[str, ...]
    """The ``k`` column names (``"1"`` for the intercept, e.g. ``("1", "x1")``)."""


class GLMMDesign(NamedTuple):
    """A GLMM's response, fixed-effect columns and grouping factors, all with ``N`` rows."""

    y: np.ndarray
    """``(N,)`` response (0/1 for bernoulli, counts for binomial/poisson/negative binomial, reals otherwise)."""
    x: np.ndarray
    """``(N, p)`` fixed-effect columns (the intercept a column of ones when the formula has one)."""
    fixed: tuple[str, ...]
    """The ``p`` fixed-effect names (``"Intercept"``, ``"x1"``, ...)."""
    factors: tuple[GroupFactor, ...]
    """The grouping factors, in formula order."""
    offset: np.ndarray | None = None
    """``(N,)`` offset added to ``eta`` (e.g. log exposure for Poisson), or None."""
    trials: np.ndarray | None = None
    """``(N,)`` binomial trials, or None (bernoulli: one trial)."""


def check_design(design: GLMMDesign) -> int:
    """``N`` after checking that every array has ``N`` rows and every code names a level; else a ValueError naming it."""
    n = int(np.shape(design.y)[0])
    if np.ndim(design.x) != 2 or np.shape(design.x)[0] != n:
        raise ValueError(f"x must have shape (N, p) with N = {n} rows (the length of y); got {np.shape(design.x)}")
    if len(design.fixed) != np.shape(design.x)[1]:
        raise ValueError(f"fixed names {len(design.fixed)} columns; x has {np.shape(design.x)[1]}")
    for name, column in (("offset", design.offset), ("trials", design.trials)):
        if column is not None and np.shape(column) != (n,):
            raise ValueError(f"{name} must have shape ({n},); got {np.shape(column)}")
    for f in design.factors:
        codes = np.asarray(f.codes)
        if codes.shape != (n,) or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"factor {f.name!r}: codes must be ({n},) integers; got {codes.shape} {codes.dtype}")
        if n and (codes.min() < 0 or codes.max() >= len(f.levels)):
            raise ValueError(
                f"factor {f.name!r}: codes must lie in 0..{len(f.levels) - 1}; got {codes.min()}..{codes.max()}"
            )
        if np.ndim(f.z) != 2 or np.shape(f.z) != (n, len(f.terms)):
            raise ValueError(f"factor {f.name!r}: z must have shape ({n}, {len(f.terms)}); got {np.shape(f.z)}")
    return n
