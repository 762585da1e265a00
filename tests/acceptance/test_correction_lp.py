"""The offline builder of C_sigma: the minimax LP, the alias table construction, grid checks."""

import re

import numpy as np
import pytest
from helpers_correction import implied_alias_probs, independent_error, shipped_sigmas

from minibatch_mcmc.acceptance.correction import (
    LOGISTIC_SD,
    alias_cells,
    correction_error,
    format_correction_report,
    load_correction,
)
from minibatch_mcmc.acceptance.correction_lp import alias_table, solve_correction


def test_shipped_table_is_reproduced_by_a_fresh_solve():
    t = solve_correction(1.3)
    assert not t.shipped
    assert abs(t.max_cdf_error - correction_error(1.3)) <= 0.01 * correction_error(1.3)


def test_alias_table_handles_zero_masses_and_padding():
    p = np.array([0.0, 0.5, 0.0, 0.25, 0.25])
    for cells in (None, 8):
        prob, index = alias_table(p, cells)
        np.testing.assert_allclose(implied_alias_probs(prob, index, p.size), p, atol=1e-15)
        assert prob[0] == prob[2] == 0.0
    assert alias_cells(401) == 512 and alias_cells(512) == 512 and alias_cells(1) == 1


@pytest.mark.parametrize("bad", [0.0, 0, -0.5, float("nan"), float("inf"), LOGISTIC_SD, 2.0, "abc", None])
def test_bad_sigma_raises_with_the_value(bad):
    shown = repr(float(bad)) if isinstance(bad, (int, float)) else repr(bad)
    with pytest.raises(ValueError, match=re.escape(f"sigma={shown}")) as info:
        solve_correction(bad)
    assert "pi/sqrt(3)" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"grid_step": 0.0}, "grid_step=0.0"),
        ({"grid_step": -0.1}, "grid_step=-0.1"),
        ({"grid_step": float("nan")}, "grid_step=nan"),
        ({"half_width": 0.0}, "half_width=0.0"),
        ({"half_width": -3.0}, "half_width=-3.0"),
        ({"grid_step": 1.0, "half_width": 0.5}, "grid_step=1.0"),
        ({"grid_step": 1e-4}, "support points"),
        ({"half_width": 1000.0}, "half_width=1000.0"),
    ],
)
def test_bad_grid_raises_with_the_value(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        solve_correction(1.0, **kwargs)


def test_non_shipped_sigma_is_solved_on_demand_and_accurate():
    assert 0.95 not in shipped_sigmas()
    t = load_correction(0.95)
    assert not t.shipped and t.sigma == 0.95
    assert np.all(t.probs >= 0) and abs(t.probs.sum() - 1) < 1e-12
    assert t.max_cdf_error <= correction_error(1.0)  # smaller sigma, smaller error
    assert independent_error(t) <= t.max_cdf_error * (1 + 1e-3) + 1e-12
    assert "computed" in format_correction_report(0.95)
