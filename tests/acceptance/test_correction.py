"""The correction distribution C_sigma at run time: shipped tables, the alias sampler, input checks."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_correction import implied_alias_probs, independent_error, shipped_sigmas
from scipy import stats

from minibatch_mcmc.acceptance.correction import (
    LOGISTIC_SD,
    alias_cells,
    correction_error,
    correction_from_uniforms,
    format_correction_report,
    largest_sigma_with_error,
    load_correction,
    make_sampler,
    sample_correction,
)
from minibatch_mcmc.acceptance.correction_lp import SHIPPED_SIGMAS

PAPER_ERROR_SIGMA_1 = 8.9e-4  # Seita et al. 2017, Table 3: ridge least squares, N = 4000, lambda = 10


# (a) shipped tables ----------------------------------------------------------------------------


def test_all_requested_sigmas_are_shipped_and_below_the_cut():
    assert shipped_sigmas() == tuple(sorted(SHIPPED_SIGMAS))
    assert all(correction_error(s) < 1e-2 for s in shipped_sigmas())


@pytest.mark.parametrize("sigma", shipped_sigmas())
def test_shipped_table_is_a_distribution_meeting_its_stated_error(sigma):
    t = load_correction(sigma)
    assert t.shipped and t.sigma == sigma
    assert np.all(t.probs >= 0) and abs(t.probs.sum() - 1.0) < 1e-12
    assert t.support.shape == t.probs.shape and t.alias_prob.shape == t.alias_index.shape
    assert t.alias_prob.size == alias_cells(t.support.size) == 512
    assert abs(t.probs @ t.support) < 1e-12  # symmetric masses: zero mean
    np.testing.assert_array_equal(t.probs, t.probs[::-1])
    # re-measured independently, the stated error holds (up to the sub-grid curvature of the error)
    assert independent_error(t) <= t.max_cdf_error * (1 + 1e-3) + 1e-12
    # the variance matches pi^2/3 - sigma^2 when the decomposition is near exact; a sup-norm CDF
    # error does not pin the variance down, so the tolerance grows with the error
    var, theory = t.probs @ t.support**2, math.pi**2 / 3 - sigma**2
    if t.max_cdf_error < 1e-7:
        assert abs(var - theory) < 1e-4
    elif t.max_cdf_error < 1e-4:
        assert abs(var - theory) < 2e-3
    # the alias table samples exactly these masses
    np.testing.assert_allclose(
        implied_alias_probs(t.alias_prob, t.alias_index, t.probs.size), t.probs, rtol=0, atol=1e-14
    )
    assert t.alias_index.dtype == np.int32 and np.all((t.alias_prob >= 0) & (t.alias_prob <= 1))
    assert np.all(t.alias_index < t.support.size) and np.all(t.alias_prob[t.support.size :] == 0)


# (b) accuracy vs the paper, growth with sigma ----------------------------------------------------


def test_error_at_sigma_1_is_far_below_the_papers():
    err = correction_error(1.0)
    assert err <= 1e-5
    assert err < PAPER_ERROR_SIGMA_1 / 1000


def test_error_grows_with_sigma():
    sigmas = shipped_sigmas()
    errors = [correction_error(s) for s in sigmas]
    # below sigma = 0.9 the decomposition is exact to the LP's tolerance (~1e-9): only noise there
    assert all(e < 1e-8 for s, e in zip(sigmas, errors) if s <= 0.9)
    tail = [e for s, e in zip(sigmas, errors) if s >= 0.9]
    assert all(a < b for a, b in zip(tail, tail[1:])), tail


def test_largest_sigma_with_error():
    assert largest_sigma_with_error(1e-2) == 1.7
    assert largest_sigma_with_error(1e-4) == 1.25
    assert largest_sigma_with_error(1e-6) == 1.05
    assert correction_error(largest_sigma_with_error(5e-4)) <= 5e-4
    with pytest.raises(ValueError, match="max_error=1e-15"):
        largest_sigma_with_error(1e-15)
    with pytest.raises(ValueError, match="max_error=-1.0"):
        largest_sigma_with_error(-1.0)


# (c) sampling --------------------------------------------------------------------------------------


def test_correction_plus_gaussian_is_standard_logistic():
    n, sigma = 200_000, 1.0
    t = load_correction(sigma)
    k_corr, k_norm = jax.random.split(jax.random.key(20170))
    draws = sample_correction(k_corr, make_sampler(t), (n,)) + sigma * jax.random.normal(k_norm, (n,))
    x = np.sort(np.asarray(draws, dtype=np.float64))
    for q in (-6.0, -4.0, -2.5, -1.0, -0.3, 0.0, 0.4, 1.2, 2.0, 3.5, 5.0):
        p = stats.logistic.cdf(q)
        emp = np.searchsorted(x, q, side="right") / n
        assert abs(emp - p) < 4 * math.sqrt(p * (1 - p) / n) + t.max_cdf_error, (q, emp, p)
    # the whole empirical CDF: Kolmogorov-Smirnov at the 1e-4 level
    assert stats.kstest(x, "logistic").pvalue > 1e-4


def test_alias_sampler_frequencies_match_the_masses():
    n = 200_000
    t = load_correction(1.3)
    sampler = make_sampler(t)
    draws = np.asarray(sample_correction(jax.random.key(3), sampler, (n,)))
    support = np.asarray(sampler.support)
    idx = np.searchsorted(support, draws)
    np.testing.assert_array_equal(support[idx], draws)  # every draw is a support point
    counts = np.bincount(idx, minlength=support.size)
    assert counts[t.probs == 0].sum() == 0  # atoms without mass are never drawn
    expected = n * t.probs
    keep = expected > 0
    chi2 = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    assert chi2 < stats.chi2.ppf(1 - 1e-4, keep.sum() - 1), chi2


def test_correction_from_uniforms_reproduces_the_masses_on_a_lattice():
    t = load_correction(1.0)
    sampler = make_sampler(t)
    cells, k = t.alias_prob.size, 2000
    u_index = jnp.repeat((jnp.arange(cells) + 0.5) / cells, k)
    u_coin = jnp.tile((jnp.arange(k) + 0.5) / k, cells)
    draws = np.asarray(correction_from_uniforms(u_index, u_coin, sampler))
    idx = np.searchsorted(np.asarray(sampler.support), draws)
    freq = np.bincount(idx, minlength=t.support.size) / (cells * k)
    # each cell's coin is resolved to 1/k; atom i gets mass from its own cell and the cells aliasing to it
    feeding = 1 + np.bincount(t.alias_index, minlength=t.support.size)
    assert np.all(np.abs(freq - t.probs) <= feeding / (cells * k) + 1e-7)


def test_float32_uniforms_pick_alias_cells_exactly_uniformly():
    # every float32 uniform on [0, 1) is k * 2^-23; with 2^m cells each cell gets the same count
    sampler = make_sampler(load_correction(1.0))
    cells = sampler.alias_prob.shape[0]
    u = jnp.arange(0, 2**23, 97, dtype=jnp.int32).astype(jnp.float32) * jnp.float32(2.0**-23)
    cell = np.floor(np.asarray(u) * np.float32(cells)).astype(np.int64)
    counts = np.bincount(cell, minlength=cells)
    assert counts.max() - counts.min() <= 1


def test_sampler_works_under_jit_and_vmap():
    sampler = make_sampler(load_correction(1.2))
    keys = jax.random.split(jax.random.key(0), 64)
    out = jax.jit(jax.vmap(lambda k: sample_correction(k, sampler, (3,))))(keys)
    assert out.shape == (64, 3)
    assert np.all(np.isin(np.asarray(out), np.asarray(sampler.support)))
    scalar = jax.jit(sample_correction)(jax.random.key(1), sampler)
    assert scalar.shape == ()


# (d) bad inputs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0.0, 0, -0.5, float("nan"), float("inf"), LOGISTIC_SD, 2.0, "abc", None])
def test_bad_sigma_raises_with_the_value(bad):
    shown = repr(float(bad)) if isinstance(bad, (int, float)) else repr(bad)
    for fn in (load_correction, format_correction_report):
        with pytest.raises(ValueError, match=re.escape(f"sigma={shown}")) as info:
            fn(bad)
        assert "pi/sqrt(3)" in str(info.value)


# (e) the report -----------------------------------------------------------------------------------------


def test_report_names_the_error_and_the_source():
    text = format_correction_report(1.0)
    assert "max CDF error" in text and f"{correction_error(1.0):.3e}" in text
    assert "shipped" in text and "pi^2/3 - sigma^2" in text
