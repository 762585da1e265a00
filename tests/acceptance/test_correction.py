import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.acceptance.correction import (
    LOGISTIC_SD,
    correction_cdf,
    load_correction,
    make_sampler,
    sample_correction,
    shipped_sigmas,
    solve_correction,
)


def independent_error(table) -> float:
    """Max |CDF error| recomputed with scipy on a grid offset from the one used for the table."""
    x = np.arange(-40.0, 40.0, 0.0037)
    cdf = stats.norm.cdf((x[:, None] - table.support[None, :]) / table.sigma) @ table.probs
    return float(np.max(np.abs(cdf - stats.logistic.cdf(x))))


@pytest.mark.parametrize("sigma", shipped_sigmas())
def test_shipped_tables_meet_their_stated_error(sigma):
    t = load_correction(sigma)
    assert t.shipped
    assert np.all(t.probs >= 0) and abs(t.probs.sum() - 1) < 1e-12
    assert abs(np.sum(t.probs * t.support)) < 1e-9
    assert independent_error(t) <= t.max_cdf_error * 1.05 + 1e-9
    if t.max_cdf_error < 1e-5:
        # a near-exact decomposition carries the remaining variance (a small CDF error does not
        # pin the variance down: at large sigma a tiny mass far out can move it a lot)
        var = np.sum(t.probs * t.support**2)
        assert abs(var - (math.pi**2 / 3 - sigma**2)) < 0.01


def test_error_is_far_below_the_papers_and_grows_with_sigma():
    assert load_correction(1.0).max_cdf_error < 1e-6  # paper, ridge least squares: 8.9e-4
    errs = [load_correction(s).max_cdf_error for s in shipped_sigmas() if s >= 1.0]
    assert all(a <= b for a, b in zip(errs, errs[1:]))


def test_sampled_sum_is_standard_logistic():
    n = 200_000
    t = load_correction(1.0)
    k1, k2 = jax.random.split(jax.random.key(0))
    x = np.asarray(sample_correction(k1, make_sampler(t), (n,)) + jax.random.normal(k2, (n,)))
    for q in (-4.0, -2.0, -1.0, -0.3, 0.0, 0.5, 1.5, 3.0):
        p = stats.logistic.cdf(q)
        assert abs(np.mean(x <= q) - p) < 4 * np.sqrt(p * (1 - p) / n) + t.max_cdf_error


def test_alias_sampler_frequencies_match_masses():
    n = 400_000
    t = load_correction(1.3)
    draws = np.asarray(sample_correction(jax.random.key(1), make_sampler(t), (n,)))
    idx = np.searchsorted(t.support, draws.astype(np.float64) - 1e-4)
    np.testing.assert_allclose(t.support[idx], draws, atol=1e-5)
    counts = np.bincount(idx, minlength=t.support.size)
    expected = n * t.probs
    big = expected > 5
    stat = np.sum((counts[big] - expected[big]) ** 2 / expected[big])
    assert stat < stats.chi2.ppf(0.999, big.sum() - 1)


def test_non_shipped_sigma_is_solved_on_demand():
    t = load_correction(0.95)
    assert not t.shipped
    assert t.max_cdf_error < 1e-6
    assert independent_error(t) <= t.max_cdf_error * 1.05 + 1e-9
    # the error at the CDF points is the LP's objective; the reported one is on a finer grid
    x = np.linspace(-10, 10, 101)
    assert np.max(np.abs(correction_cdf(x, t.support, t.probs, t.sigma) - stats.logistic.cdf(x))) <= t.max_cdf_error + 1e-12


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan"), float("inf"), LOGISTIC_SD, 2.0, "abc"])
def test_bad_sigma_is_rejected(bad):
    with pytest.raises(ValueError, match="sigma="):
        solve_correction(bad)
    with pytest.raises(ValueError, match="sigma="):
        load_correction(bad)


@pytest.mark.parametrize("kwargs", [{"grid_step": 0.0}, {"grid_step": -0.1}, {"half_width": 0.05}])
def test_bad_grid_is_rejected(kwargs):
    with pytest.raises(ValueError):
        solve_correction(1.0, **kwargs)
