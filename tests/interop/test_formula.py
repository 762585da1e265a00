"""A mixed-model formula and a table to a ``GLMMDesign`` (``interop.formula``), checked against arrays built by hand.

Each test fails on the code before issue 31 (no ``interop.formula``). What each would catch: a wrong column or coding
of the fixed effects (the intercept, treatment coding's reference level, ``0 +``), a random slope without its intercept
or with another row's values, codes that do not match the levels, an offset or trials lost or taken from the wrong
column, a Parquet or dict table read differently from the DataFrame, and errors that do not name the bad value.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pandas as pd
import pytest

from minibatch_mcmc.interop.formula import formula_design, new_rows


def table(n: int = 12, seed: int = 0) -> pd.DataFrame:
    """A small table: a 0/1 response, counts with trials, two numeric columns, a 3-level category and two factors."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "y": rng.integers(0, 2, n),
            "k": rng.integers(0, 3, n),
            "n": np.full(n, 4),
            "x1": rng.normal(size=n),
            "x2": rng.normal(size=n),
            "c": np.array(["lo", "mid", "hi"])[np.arange(n) % 3],
            "g": np.array(["b", "a"])[np.arange(n) % 2],
            "h": np.array([30, 10, 20, 10])[np.arange(n) % 4],
            "e": rng.uniform(1.0, 3.0, n),
            "unused": np.full(n, np.nan),
        }
    )


def test_design_equals_the_hand_built_arrays():
    """Intercept, treatment coding (first level in sorted order the reference), ``(1 | g)``, ``(x1 | h)``, an offset."""
    df = table()
    fd = formula_design("y ~ x1 + c + (1 | g) + (x1 | h) + offset(log(e))", df, "bernoulli")
    d = fd.design
    ones = np.ones(len(df))
    assert d.fixed == ("Intercept", "x1", "c[lo]", "c[mid]")  # "hi" is the reference: first of the sorted levels
    np.testing.assert_array_equal(d.x, np.column_stack([ones, df.x1, df.c == "lo", df.c == "mid"]).astype(np.float32))
    np.testing.assert_array_equal(d.y, df.y)
    np.testing.assert_allclose(d.offset, np.log(df.e), rtol=1e-15)
    assert d.trials is None
    g, h = d.factors
    assert (g.name, g.levels, g.terms) == ("g", ("a", "b"), ("1",))
    np.testing.assert_array_equal(g.codes, (df.g == "b").astype(int))
    np.testing.assert_array_equal(g.z, ones[:, None])
    assert (h.name, h.levels, h.terms) == ("h", ("10", "20", "30"), ("1", "x1"))
    np.testing.assert_array_equal(h.codes, df.h.map({10: 0, 20: 1, 30: 2}))
    np.testing.assert_array_equal(h.z, np.column_stack([ones, df.x1]).astype(np.float32))


@pytest.mark.parametrize("formula", ["y ~ 0 + x1 + x2 + (0 + x1 | g)", "y ~ x1 + x2 - 1 + (0 + x1 | g)"])
def test_no_intercept(formula):
    """``0 +`` and ``- 1`` drop the intercept, in the fixed part and inside a group term."""
    df = table()
    d = formula_design(formula, df).design
    assert d.fixed == ("x1", "x2")
    np.testing.assert_array_equal(d.x, df[["x1", "x2"]].to_numpy(np.float32))
    assert d.factors[0].terms == ("x1",)
    np.testing.assert_array_equal(d.factors[0].z, df[["x1"]].to_numpy(np.float32))
    assert d.offset is None


def test_without_intercept_a_category_has_every_level():
    """``0 + c``: full (cell-means) coding, one column per level, as lme4 and bambi code it."""
    df = table()
    d = formula_design("y ~ 0 + c + (1 | g)", df).design
    assert d.fixed == ("c[hi]", "c[lo]", "c[mid]")
    np.testing.assert_array_equal(d.x, np.column_stack([df.c == v for v in ("hi", "lo", "mid")]))


def test_interaction_factor_has_the_observed_pairs():
    """``(1 | g:h)``: one level per observed pair, named ``"a:10"``."""
    df = table()
    f = formula_design("y ~ 1 + (1 | g:h)", df).design.factors[0]
    pairs = df.g + ":" + df.h.astype(str)
    assert f.name == "g:h" and f.levels == tuple(sorted(set(pairs)))
    np.testing.assert_array_equal(np.asarray(f.levels)[f.codes], pairs)


def test_binomial_trials_three_ways():
    """``y | trials(n)`` (brms), ``p(y, n)`` (bambi) and ``trials="n"`` give the same response and trials."""
    df = table()
    designs = [
        formula_design("k | trials(n) ~ x1 + (1 | g)", df, "binomial").design,
        formula_design("p(k, n) ~ x1 + (1 | g)", df, "binomial").design,
        formula_design("k ~ x1 + (1 | g)", df, "binomial", trials="n").design,
        formula_design("k ~ x1 + (1 | g)", df, "binomial", trials=df.n.to_numpy()).design,
    ]
    for d in designs:
        np.testing.assert_array_equal(d.y, df.k)
        np.testing.assert_array_equal(d.trials, df.n)
        np.testing.assert_array_equal(d.x, designs[0].x)


def test_a_text_response_names_its_success_level():
    """``g[b] ~ ...``: formulae's syntax for a text response, 1 where ``g == "b"``."""
    df = table()
    np.testing.assert_array_equal(formula_design("g[b] ~ x1 + (1 | h)", df).design.y, df.g == "b")


def test_offset_argument_adds_to_the_formula_offset():
    """``offset="e"`` is the column; with ``offset(log(e))`` in the formula too, the two add."""
    df = table()
    d = formula_design("k ~ x1 + (1 | g)", df, "poisson", offset="e").design
    np.testing.assert_array_equal(d.offset, df.e)
    d = formula_design("k ~ x1 + offset(log(e)) + (1 | g)", df, "poisson", offset=df.x2.to_numpy()).design
    np.testing.assert_allclose(d.offset, np.log(df.e) + df.x2, rtol=1e-15)


def test_dict_and_parquet_give_the_dataframe_design(tmp_path):
    """A dict of arrays and a Parquet file (only the formula's columns read) give the DataFrame's design."""
    df = table()
    formula = "y ~ x1 + c + (x1 | h) + offset(log(e))"
    path = tmp_path / "rows.parquet"
    df.to_parquet(path)
    reference = formula_design(formula, df).design
    for data in ({k: df[k].to_numpy() for k in df}, path, str(path)):
        d = formula_design(formula, data).design
        for a, b in zip(
            (d.x, d.y, d.offset, d.factors[0].codes, d.factors[0].z),
            (reference.x, reference.y, reference.offset, reference.factors[0].codes, reference.factors[0].z),
        ):
            np.testing.assert_array_equal(a, b)
        assert d.fixed == reference.fixed and d.factors[0].levels == reference.factors[0].levels


def test_new_rows_keep_the_fitted_coding_and_number_new_levels():
    """New rows: the fitted levels' codes and coding (one category present), new levels ``G, G + 1, ...`` by first use."""
    df = table()
    fd = formula_design("y ~ x1 + c + (x1 | h) + offset(log(e))", df)
    new = pd.DataFrame(
        {"x1": [0.5, -1.0, 2.0, 3.0], "c": ["mid"] * 4, "h": [20, 99, 10, 99], "e": [1.0, 2.0, 3.0, 4.0]}
    )
    rows = new_rows(fd, new)
    np.testing.assert_array_equal(rows.x, np.column_stack([np.ones(4), new.x1, np.zeros(4), np.ones(4)]))
    np.testing.assert_allclose(rows.offset, np.log(new.e), rtol=1e-15)
    np.testing.assert_array_equal(rows.codes[0], [1, 3, 0, 3])
    np.testing.assert_array_equal(rows.z[0], np.column_stack([np.ones(4), new.x1]))


@pytest.mark.parametrize(
    "formula, family, message",
    [
        ("y ~ x1 + x3 + (1 | g)", "bernoulli", "column 'x3' is not in the data; columns found: y, k, n, x1"),
        ("y ~ x1 + (1 | grp)", "bernoulli", "column 'grp' is not in the data"),
        (
            "y ~ x1 + (1 | g)",
            "logistic",
            "unknown family 'logistic'; allowed: bernoulli, binomial, poisson, negative_binomial",
        ),
        (
            "y ~ x1 + (1 | one)",
            "bernoulli",
            "grouping factor 'one' has 1 level(s) (z); a group effect needs at least two",
        ),
        ("y ~ x1 + (1 | g)", "binomial", "binomial needs trials"),
        ("k ~ x1 + (1 | g)", "bernoulli", "bernoulli needs a 0/1 response"),
        ("c ~ x1 + (1 | g)", "bernoulli", "response 'c' is categorical (hi, lo, mid): write 'c[level] ~ ...'"),
        ("y ~ x1 + (1 | g", "bernoulli", "formulae cannot read the formula 'y ~ x1 + (1 | g'"),
        ("y ~ x1 + offset(e)", "bernoulli", None),
    ],
)
def test_errors_name_the_value(formula, family, message):
    """A missing column (with the columns found), an unknown family (with the allowed), one level, a bad response."""
    df = table().assign(one="z")
    if message is None:  # a clean formula: the NaN column it does not read is no error
        assert formula_design(formula, df, family).design.offset is not None
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        formula_design(formula, df, family)


def test_missing_values_in_a_used_column_are_named():
    """A NaN (or None) in a column the formula reads is refused, naming the column and the count; never dropped."""
    df = table()
    df.loc[[3, 5], "x2"] = np.nan
    with pytest.raises(ValueError, match=r"column 'x2' has 2 missing value\(s\).*first in row 3"):
        formula_design("y ~ x1 + x2 + (1 | g)", df)
    df.loc[4, "g"] = None
    with pytest.raises(ValueError, match="column 'g' has 1 missing"):
        formula_design("y ~ x1 + (1 | g)", df)


def test_a_categorical_factor_keeps_its_order_and_drops_unused_levels():
    """A pandas ``Categorical`` grouping column: its own level order (as an R factor's), unused levels left out."""
    df = table().assign(g=lambda d: pd.Categorical(d.g, categories=["b", "unused", "a"]))
    fd = formula_design("y ~ x1 + (1 | g)", df)
    f = fd.design.factors[0]
    assert f.levels == ("b", "a")
    np.testing.assert_array_equal(f.codes, (df.g == "a").astype(int))
    rows = new_rows(fd, pd.DataFrame({"x1": [0.0, 0.0, 0.0], "g": ["a", "new", "b"]}))
    np.testing.assert_array_equal(rows.codes[0], [1, 2, 0])


def test_new_rows_need_the_offset_an_array_gave():
    """A fit whose ``offset=`` was an array: new rows without theirs are refused (not given offset 0); with, it is used."""
    df = table()
    fd = formula_design("k ~ x1 + (1 | g)", df, "poisson", offset=np.log(df.e.to_numpy()))
    new = pd.DataFrame({"x1": [0.0, 1.0], "g": ["a", "b"]})
    with pytest.raises(ValueError, match="offset= was an array"):
        new_rows(fd, new)
    np.testing.assert_array_equal(new_rows(fd, new, offset=[0.5, 0.25]).offset, [0.5, 0.25])
    with pytest.raises(ValueError, match="the fit had no offset= argument"):
        new_rows(formula_design("k ~ x1 + (1 | g)", df, "poisson"), new, offset=[0.5, 0.25])


def test_design_holds_the_models_dtypes_once():
    """The design is built in the dtypes the model reads (float32 columns and 0/1 response, int32 codes), so
    ``glmm_data`` shares its arrays instead of copying them, and ``formulae``'s own float64 matrix and table are let go
    (issue 31, memory at ``N = 10^7``); new rows are still evaluated. Catches: a float64/int64 design (a second copy
    of every row at ``glmm_model``) or the fitted rows kept in ``fd.common``."""
    from minibatch_mcmc.models.glmm import glmm_data

    df = table()
    fd = formula_design("y ~ x1 + c + (x1 | h)", df, "bernoulli")
    d = fd.design
    assert (d.x.dtype, d.y.dtype, d.factors[0].z.dtype, d.factors[0].codes.dtype) == (
        np.float32,
        np.float32,
        np.float32,
        np.int32,
    )
    data = glmm_data(d, "bernoulli")
    for key, held in (("x", d.x), ("y", d.y), ("g_0", d.factors[0].codes), ("z_0", d.factors[0].z)):
        assert np.shares_memory(data[key], held), key
    assert fd.common.design_matrix is None and fd.common.data is None
    rows = new_rows(fd, df.iloc[:5])
    np.testing.assert_allclose(rows.x, d.x[:5], rtol=1e-6)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="sharing host memory is the CPU client's")
def test_jax_shares_the_designs_rows():
    """The rows handed to JAX (``as_data_source`` of ``glmm_model``'s data) are the design's own memory, not a copy:
    the design is built aligned (``data.aligned``). Catches a second copy of every row between the formula and the
    sampler (0.28 GB at ``N = 10^7``)."""
    from minibatch_mcmc.data.arrays import as_data_source
    from minibatch_mcmc.models.glmm import glmm_model

    df = table(2000)
    d = formula_design("y ~ x1 + c + (x1 | h)", df, "bernoulli").design
    _, data = glmm_model(d, "bernoulli")
    rows = as_data_source(data).arrays()
    for key, held in (("x", d.x), ("y", d.y), ("g_0", d.factors[0].codes), ("z_0", d.factors[0].z)):
        assert rows[key].unsafe_buffer_pointer() == held.ctypes.data, key


def test_counts_too_large_for_float32_stay_exact():
    """A response float32 cannot hold exactly (a count above 2^24) is kept in float64: nothing is rounded silently."""
    df = table()
    df["k"] = 2**24 + 1 + np.arange(len(df))
    d = formula_design("k ~ x1 + (1 | g)", df, "poisson").design
    np.testing.assert_array_equal(d.y, df["k"].to_numpy())
