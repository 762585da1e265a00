"""sigma without a shipped table: derived tables (accuracy), refusals below SIGMA_MIN and above the tables,
warnings above MAX_CORRECTION_ERROR, and an LP never started beyond its budget (issue 13)."""

import re
import time
import warnings

import jax
import numpy as np
import pytest
from helpers_correction import implied_alias_probs, independent_error, shipped_sigmas
from scipy import stats

from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.acceptance.correction import (
    MAX_CORRECTION_ERROR,
    SIGMA_MIN,
    correction_error,
    format_correction_report,
    load_correction,
    make_sampler,
    sample_correction,
)
from minibatch_mcmc.acceptance.correction_lp import LP_MAX_ENTRIES, solve_correction


@pytest.mark.parametrize(
    "sigma, source", [(0.1, 0.5), (0.33, 0.5), (0.95, 1.0), (0.999, 1.0), (1.32, 1.35), (1.69, 1.7)]
)
def test_derived_table_has_the_error_of_its_source(sigma, source):
    assert sigma not in shipped_sigmas()
    t = load_correction(sigma)
    assert t.sigma == sigma and t.derived_from == source and not t.shipped
    assert np.all(t.probs >= 0) and abs(t.probs.sum() - 1) < 1e-12
    assert np.allclose(t.support, -t.support[::-1]) and np.allclose(np.diff(t.support), t.support[1] - t.support[0])
    # N(0, sigma^2) + [N(0, S^2 - sigma^2) + C_S] = N(0, S^2) + C_S: same error, measured independently too
    assert abs(t.max_cdf_error - correction_error(source)) <= 1e-3 * correction_error(source) + 1e-12
    assert independent_error(t) <= t.max_cdf_error * (1 + 1e-3) + 1e-12
    src = load_correction(source)
    var = lambda table: float(table.probs @ table.support**2)  # noqa: E731 (symmetric: mean 0)
    assert abs(var(t) - (var(src) + source**2 - sigma**2)) < 1e-9
    np.testing.assert_allclose(implied_alias_probs(t.alias_prob, t.alias_index, t.probs.size), t.probs, atol=1e-12)


def test_derived_table_draws_match_the_logistic():
    sigma = 0.77
    key_x, key_z = jax.random.split(jax.random.key(3))
    x = np.asarray(sample_correction(key_x, make_sampler(load_correction(sigma)), (200_000,)), dtype=np.float64)
    z = sigma * np.asarray(jax.random.normal(key_z, (200_000,)), dtype=np.float64)
    assert stats.kstest(x + z, stats.logistic.cdf).pvalue > 1e-3


@pytest.mark.parametrize("sigma", [1.8, 1.7 - 1e-5])
def test_sigma_above_the_tables_is_refused(sigma):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=re.escape(f"sigma={sigma!r}")) as info:
        mh_minibatch(sigma=sigma)
    assert "largest shipped sigma is 1.7" in str(info.value)
    assert time.perf_counter() - start < 5.0  # no LP started


@pytest.mark.parametrize("sigma", [1e-3, 0.02, 0.05, 0.0999])
def test_sigma_below_the_lower_bound_is_refused_with_the_reason(sigma):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=re.escape(f"sigma={sigma!r} must be at least {SIGMA_MIN}")) as info:
        mh_minibatch(sigma=sigma)
    assert "1/sigma^2" in str(info.value) and "lattice" in str(info.value)
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("sigma", [1.48, 1.6, 1.7])
def test_inaccurate_sigma_warns_with_sigma_and_error(sigma):
    err = load_correction(sigma).max_cdf_error
    assert err > MAX_CORRECTION_ERROR
    with pytest.warns(UserWarning, match=re.escape(f"sigma={sigma!r}")) as record:
        test = mh_minibatch(sigma=sigma)
    text = str(record[0].message)
    assert f"{err:.2e}" in text and "sigma <= 1.45" in text and "MAX_CORRECTION_ERROR" in text
    assert record[0].filename == __file__  # points at the caller
    assert test.correction_error == err


@pytest.mark.parametrize("sigma", [0.1, 1.0, 1.3, 1.45])
def test_accurate_sigma_does_not_warn(sigma):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mh_minibatch(sigma=sigma)


def test_report_names_the_source_table():
    text = format_correction_report(0.95)
    assert "computed now" in text and "shipped table at sigma=1 smoothed by N(0, 0.0975)" in text
    assert "mh_minibatch warns" in format_correction_report(1.6)


@pytest.mark.parametrize("sigma", [1e-3, 0.02])
def test_lp_beyond_its_budget_is_never_started(sigma):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=re.escape(f"sigma={sigma!r} with grid_step=0.1 needs an LP")) as info:
        solve_correction(sigma)
    assert f"LP_MAX_ENTRIES={LP_MAX_ENTRIES:.3g}" in str(info.value) and "1/sigma^2" in str(info.value)
    assert time.perf_counter() - start < 2.0
    with pytest.raises(ValueError, match="needs an LP"):
        solve_correction(1.0, grid_step=0.02, half_width=10.0)
