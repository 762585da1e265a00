"""A mixed-model formula and a table to a ``GLMMDesign``, with lme4/brms/bambi conventions, parsed by ``formulae``.

``"y ~ x1 + c + (1 | g) + (x1 | h) + offset(log(e))"``: an intercept unless ``0 +`` or ``- 1``; categorical columns
treatment-coded (the first level is the reference, the others named ``c[level]``); ``(1 | g)`` a random intercept by
``g``; ``(x1 | h)`` an intercept and an ``x1`` slope by ``h`` (``(0 + x1 | h)`` the slope alone), each with its own
s.d.; ``(1 | g:h)`` one effect per observed pair. ``offset(...)`` terms go to the offset; a binomial response is
``y | trials(n)`` (brms) or ``p(y, n)`` (bambi). ``formulae`` parses the formula and builds the fixed-effect columns
(and rebuilds them for new rows); the grouping factors' codes are built here from the columns (``formulae`` would build
an ``N x G`` indicator matrix per factor, out of reach at ``G = 10^5``).
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

import numpy as np

from minibatch_mcmc.interop.formula_rows import drop_intercept_rows, float32_stack, level_codes, narrowed, release_rows
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor, check_design
from minibatch_mcmc.models.glmm_families import FAMILIES

COUNT_FAMILIES = ("binomial", "poisson", "negative_binomial")
TRIALS = re.compile(r"^\s*(?P<y>[A-Za-z_][\w.]*)\s*\|\s*trials\(\s*(?P<n>[A-Za-z_][\w.]*)\s*\)\s*$")
"""brms's binomial response ``y | trials(n)``."""


class FactorSpec(NamedTuple):
    """How one grouping factor's level and columns are read from a table (also for new rows)."""

    name: str
    columns: tuple[str, ...]
    """The data columns whose values make the level (two or more: an interaction ``g:h``, levels ``"a:b"``)."""
    categories: Any
    """The fitted levels as pandas categories (the values themselves for one column, ``"a:b"`` strings for several)."""
    exprs: tuple[Any, ...]
    """The evaluated ``formulae`` terms of the factor's columns, in the order of ``GroupFactor.terms``."""


class FormulaDesign(NamedTuple):
    """A ``GLMMDesign`` and what rebuilds its columns for new rows."""

    design: GLMMDesign
    family: str
    formula: str
    common: Any
    """The ``formulae`` ``CommonEffectsMatrix`` of the fixed effects and offset terms, or None (no such term)."""
    fixed_slices: tuple[slice, ...]
    """The columns of ``common`` that are fixed effects (the rest are ``offset(...)`` terms)."""
    offset_slices: tuple[slice, ...]
    offset_column: str | None
    """The ``offset=`` column, added to the formula's offset terms."""
    factors: tuple[FactorSpec, ...]
    offset_array: bool = False
    """The fit's ``offset=`` was an array: new rows need theirs (``predict(..., offset=...)``)."""


def family_name(family: str) -> str:
    """The family's canonical name (``-`` and ``_`` alike, any case: ``"Student-t"`` is ``"student_t"``), or a ValueError listing them."""
    name = str(family).strip().lower().replace("-", "_")
    if name not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; allowed: {', '.join(FAMILIES)}")
    return name


def split_trials(formula: str) -> tuple[str, str | None]:
    """``"y | trials(n) ~ rhs"`` -> ``("y ~ rhs", "n")``; any other formula as it is, with None."""
    if "~" not in formula:
        raise ValueError(f"formula {formula!r} has no '~': write it as 'y ~ x1 + (1 | g)'")
    lhs, rhs = formula.split("~", 1)
    match = TRIALS.match(lhs)
    return (f"{match['y']} ~{rhs}", match["n"]) if match else (formula, None)


def formula_columns(description, extra: tuple[str | None, ...] = ()) -> list[str]:
    """The data columns a parsed formula (and the ``offset=``/``trials=`` names in ``extra``) reads, sorted."""
    return sorted({*description.var_names, *(c for c in extra if isinstance(c, str))})


def read_table(data, columns: list[str]):
    """``columns`` of a pandas DataFrame, a dict of arrays or a Parquet file or directory (read through pyarrow)."""
    import pandas as pd

    if isinstance(data, (str, os.PathLike)):
        import pyarrow.dataset as ds

        dataset = ds.dataset(os.fspath(data), format="parquet")
        check_columns(columns, dataset.schema.names)
        return dataset.to_table(columns=columns).to_pandas()
    if isinstance(data, pd.DataFrame):
        check_columns(columns, [str(c) for c in data.columns])
        return data[columns]
    if isinstance(data, dict):
        check_columns(columns, [str(c) for c in data])
        return pd.DataFrame({c: np.asarray(data[c]) for c in columns})
    raise TypeError(f"data must be a pandas DataFrame, a dict of arrays or a Parquet path; got {type(data).__name__}")


def check_columns(needed: list[str], found: list[str]) -> None:
    """A ValueError naming the first needed column the table lacks, with the columns it has."""
    missing = [c for c in needed if c not in found]
    if missing:
        raise ValueError(f"column {missing[0]!r} is not in the data; columns found: {', '.join(map(str, found))}")


def check_no_missing(table) -> None:
    """A ValueError naming the first column with missing values (NaN, None, NA), how many and the first row."""
    for column in table.columns:
        bad = np.asarray(table[column].isna())
        if bad.any():
            raise ValueError(
                f"column {column!r} has {int(bad.sum())} missing value(s) (NaN/None), the first in row "
                f"{table.index[int(np.argmax(bad))]!r}; drop or fill them before fitting"
            )


def formula_env(extra_namespace: dict | None):
    """The namespace formula calls see: NumPy as ``np``, ``log``/``exp`` as brms users write them, and the user's."""
    from formulae.environment import Environment

    return Environment([{"np": np, "numpy": np, "log": np.log, "exp": np.exp, **(extra_namespace or {})}])


def response_arrays(description, table, env, trials_column: str | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The response and the trials (``p(y, n)``, or the ``trials`` column), as floats."""
    from formulae.matrices import ResponseMatrix

    if description.response is None:
        raise ValueError("the formula has no response: write it as 'y ~ ...'")
    response = ResponseMatrix(description.response)
    response.evaluate(table, env)
    values = np.asarray(response.design_matrix, dtype=np.float64)
    if response.kind == "proportion":
        return values[:, 0], values[:, 1]
    if values.ndim == 2 and values.shape[1] != 1:
        levels = ", ".join(map(str, response.levels)) if response.levels is not None else f"{values.shape[1]} columns"
        raise ValueError(
            f"response {response.name!r} is categorical ({levels}): write '{response.name}[level] ~ ...' "
            "for the level that counts as 1, or give a numeric column"
        )
    trials = None if trials_column is None else np.asarray(table[trials_column], dtype=np.float64)
    return values.reshape(-1), trials


def check_response(y: np.ndarray, trials: np.ndarray | None, family: str, name: str) -> None:
    """A ValueError when the response (or trials) cannot come from the family, naming the first bad value."""

    def refuse(values: np.ndarray, bad: np.ndarray, what: str) -> None:
        if bad.any():
            raise ValueError(
                f"{family} needs {what}; {name} has {values[np.argmax(bad)]!r} (row {int(np.argmax(bad))})"
            )

    if family == "bernoulli":
        refuse(y, (y != 0) & (y != 1), f"a 0/1 response (binomial with trials: '{name} | trials(n) ~ ...')")
    if family in COUNT_FAMILIES:
        refuse(y, (y < 0) | (y != np.round(y)), "a response of non-negative integers")
    if family == "binomial":
        if trials is None:
            raise ValueError(
                "binomial needs trials: write 'y | trials(n) ~ ...' or 'p(y, n) ~ ...', or pass trials='n'"
            )
        refuse(trials, (trials < 1) | (trials != np.round(trials)), "trials of positive integers")
        refuse(y, y > trials, "successes at most the trials")
    elif trials is not None:
        raise ValueError(f"trials are for the binomial family, not {family}")


def common_part(description, table, env):
    """The ``formulae`` matrix of the fixed effects and offset terms (or None), its fixed slices and offset slices."""
    from formulae.matrices import CommonEffectsMatrix
    from formulae.terms import Model

    if not description.common_terms:
        return None, (), ()
    fixed_model = Model(*description.common_terms)
    fixed_model.eval(table, env)  # types, treatment coding and the terms full rank needs, as formulae's design_matrices
    common = CommonEffectsMatrix(fixed_model.common_terms)
    common.evaluate(table, env)
    fixed = tuple(common.slices[n] for n, t in common.terms.items() if t.kind != "offset")
    offsets = tuple(common.slices[n] for n, t in common.terms.items() if t.kind == "offset")
    return common, fixed, offsets


def fixed_names(common, fixed: tuple[slice, ...]) -> tuple[str, ...]:
    """The fixed effects' column names in matrix order (``Intercept``, ``x1``, ``c[b]``, ...)."""
    if common is None:
        return ()
    names = [label for t in common.terms.values() if t.kind != "offset" for label in t.labels]
    return tuple(names)


def factor_key(table, columns: tuple[str, ...]):
    """Each row's level key: the column itself, or ``"a:b"`` strings for an interaction."""
    if len(columns) == 1:
        return table[columns[0]]
    key = table[columns[0]].astype(str)
    for c in columns[1:]:
        key = key + ":" + table[c].astype(str)
    return key


def factor_codes(key, categories) -> np.ndarray:
    """Each row's level code among ``categories``; a level not among them ``G, G + 1, ...`` in order of first appearance."""
    import pandas as pd

    codes = np.asarray(categories.get_indexer(pd.Index(np.asarray(key))), dtype=np.int64)
    new = codes < 0
    if new.any():
        codes[new] = len(categories) + pd.factorize(np.asarray(key)[new])[0]
    return codes


def group_terms_by_factor(description) -> dict[str, list]:
    """The group terms of each factor, factors in formula order (``(x1 | h)`` is ``1|h`` and ``x1|h``)."""
    out: dict[str, list] = {}
    for term in description.group_terms:
        out.setdefault(term.factor.name, []).append(term)
    return out


def evaluate_factor(name: str, terms: list, table, env) -> tuple[GroupFactor, FactorSpec]:
    """One grouping factor's codes, columns and names, and what rebuilds them for new rows."""
    import pandas as pd
    from formulae.terms.variable import Variable

    components = terms[0].factor.components
    if not all(isinstance(c, Variable) for c in components):
        raise ValueError(
            f"grouping factor {name!r} must name data columns (e.g. '(1 | g)' or '(1 | g:h)'); "
            "compute it as a column first"
        )
    columns = tuple(c.name for c in components)
    codes, categories = pd.factorize(factor_key(table, columns), sort=True)  # the observed levels, sorted
    categories = pd.Index(categories)
    if len(categories) < 2:
        raise ValueError(
            f"grouping factor {name!r} has {len(categories)} level(s) ({', '.join(map(str, categories))}); "
            "a group effect needs at least two levels"
        )
    has_intercept = any(t.expr.name == "Intercept" for t in terms)
    blocks, labels, exprs = [], [], []
    for term in terms:
        expr = term.expr
        expr.set_type(table, env)
        expr.set_data(expr.name == "Intercept" or not has_intercept)  # formulae's rule: full rank without (1 | g)
        blocks.append(np.reshape(expr.data, (len(table), -1)))
        labels.extend("1" if expr.name == "Intercept" else label for label in expr.labels)
        exprs.append(expr)
    drop_intercept_rows(exprs)
    factor = GroupFactor(
        name=name,
        codes=level_codes(codes, len(categories)),
        z=float32_stack(blocks, len(table)),
        levels=tuple(str(c) for c in categories),
        terms=tuple(labels),
    )
    return factor, FactorSpec(name, columns, categories, tuple(exprs))


def formula_design(
    formula: str, data, family: str = "bernoulli", *, offset=None, trials=None, extra_namespace: dict | None = None
) -> FormulaDesign:
    """Parse ``formula`` with ``formulae`` and build its ``GLMMDesign`` from ``data`` (DataFrame, dict, Parquet path).

    ``offset``/``trials``: a column name or an ``(N,)`` array (``trials`` also as ``y | trials(n)`` in the formula).
    """
    from formulae import model_description

    family = family_name(family)
    formula, trials_in_formula = split_trials(formula)
    if trials_in_formula is not None and trials is not None:
        raise ValueError(f"trials given twice: '| trials({trials_in_formula})' in the formula and trials={trials!r}")
    trials = trials_in_formula if trials is None else trials
    try:
        description = model_description(formula)
    except Exception as err:  # formulae's scanner, parser and resolver raise several types
        raise ValueError(f"formulae cannot read the formula {formula!r}: {err}") from err
    table = read_table(data, formula_columns(description, (offset, trials)))
    check_no_missing(table)
    env = formula_env(extra_namespace)
    y, n_trials = response_arrays(description, table, env, trials if isinstance(trials, str) else None)
    if trials is not None and not isinstance(trials, str):
        n_trials = given_column(trials, "trials", len(table))
    check_response(y, n_trials, family, str(description.response.term.name))
    common, fixed, offsets = common_part(description, table, env)
    x = float32_stack([common.design_matrix[:, s] for s in fixed], len(table))
    offset_values = total_offset(common, offsets, table, offset)
    release_rows(common)
    factors = [evaluate_factor(name, terms, table, env) for name, terms in group_terms_by_factor(description).items()]
    design = GLMMDesign(
        y=narrowed(y),
        x=x,
        fixed=fixed_names(common, fixed),
        factors=tuple(f for f, _ in factors),
        offset=offset_values,
        trials=n_trials,
    )
    check_design(design)
    return FormulaDesign(
        design,
        family,
        formula,
        common,
        fixed,
        offsets,
        offset if isinstance(offset, str) else None,
        tuple(s for _, s in factors),
        offset is not None and not isinstance(offset, str),
    )


def given_column(values, what: str, n: int) -> np.ndarray:
    """An ``offset=``/``trials=`` array as ``(n,)`` finite floats, or a ValueError naming its shape or first bad value."""
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (n,):
        raise ValueError(f"{what} must be a column name or an array of shape ({n},); got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} has a non-finite value {array[~np.isfinite(array)][0]!r}")
    return array


def total_offset(common, offsets: tuple[slice, ...], table, offset) -> np.ndarray | None:
    """The formula's ``offset(...)`` terms plus the ``offset=`` column or array; None when there is neither."""
    parts = [np.asarray(common.design_matrix[:, s], dtype=np.float64).sum(axis=1) for s in offsets]
    if isinstance(offset, str):
        parts.append(np.asarray(table[offset], dtype=np.float64))
    elif offset is not None:
        parts.append(given_column(offset, "offset", len(table)))
    return np.sum(parts, axis=0) if parts else None


class NewRows(NamedTuple):
    """New rows in a fitted design's columns: fixed effects, offset, and each factor's codes (-1: a new level) and columns."""

    x: np.ndarray
    offset: np.ndarray | None
    codes: tuple[np.ndarray, ...]
    """Each factor's level codes: ``0 .. G - 1`` the fitted levels, ``G, G + 1, ...`` each new level."""
    z: tuple[np.ndarray, ...]


def new_rows(fitted: FormulaDesign, data, *, offset=None) -> NewRows:
    """``data``'s rows in ``fitted``'s columns (categories, stateful transforms and levels as fitted; no response needed).

    ``offset``: the new rows' ``offset=`` values, needed where the fit's was an array (else its column is read).
    """
    if fitted.offset_array and offset is None:
        raise ValueError("the fit's offset= was an array: pass the new rows' offset (predict(..., offset=...))")
    if fitted.offset_array is False and fitted.offset_column is None and offset is not None:
        raise ValueError(
            "offset= given for new rows, but the fit had no offset= argument (offset() terms are read from the data)"
        )
    needed = sorted(
        {
            *(c for f in fitted.factors for c in f.columns),
            *fixed_columns(fitted),
            *([fitted.offset_column] if fitted.offset_column and offset is None else []),
        }
    )
    table = read_table(data, needed)
    check_no_missing(table)
    n = len(table)
    common = None if fitted.common is None else fitted.common.evaluate_new_data(table)
    x = (
        np.column_stack([common.design_matrix[:, s] for s in fitted.fixed_slices])
        if fitted.fixed_slices
        else np.zeros((n, 0))
    )
    given = table[fitted.offset_column] if offset is None and fitted.offset_column else offset
    off = total_offset(
        common, fitted.offset_slices, table, None if given is None else np.asarray(given, dtype=np.float64)
    )
    codes = tuple(factor_codes(factor_key(table, f.columns), f.categories) for f in fitted.factors)
    z = tuple(
        np.column_stack([np.asarray(e.eval_new_data(table), dtype=np.float64).reshape(n, -1) for e in f.exprs])
        for f in fitted.factors
    )
    return NewRows(np.asarray(x, dtype=np.float64), off, codes, z)


def fixed_columns(fitted: FormulaDesign) -> list[str]:
    """The data columns the fixed effects, offset terms and the factors' columns read (not the response)."""
    names: set[str] = set()
    if fitted.common is not None:
        for term in fitted.common.terms.values():
            names |= set(term.var_names)
    for f in fitted.factors:
        for e in f.exprs:
            names |= set(getattr(e, "var_names", ()))
    return sorted(names)
