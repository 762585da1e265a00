"""Subsampled PSIS-LOO against exact PSIS-LOO (ArviZ on every row) at N = 5,000, on exact conjugate posterior draws."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from minibatch_mcmc.models import exact_posterior, gaussian_mean
from minibatch_mcmc.samplers.loo import loo_subsample
from minibatch_mcmc.samplers.pointwise import log_likelihood_data
from minibatch_mcmc.samplers.results import SampleResult

N = 5_000


@pytest.fixture(scope="module")
def setting():
    """Student-t data under a Gaussian model (so rows differ in how well they are predicted), exact posterior draws."""
    rng = np.random.default_rng(0)
    x = rng.standard_t(5, size=(N, 1)).astype(np.float32)
    mean, var = exact_posterior(x)
    draws = (mean + np.sqrt(var) * rng.normal(size=(2, 100, 1))).astype(np.float32)
    records = {"accepted": np.ones((2, 100), bool), "batch_size": np.zeros((2, 100))}
    result = SampleResult(draws, records, "exact", N, np.ones(100), 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az

        exact = az.loo(log_likelihood_data(result, gaussian_mean(), x), var_name="obs")
    return x, result, exact


def test_all_rows_give_exact_psis_loo(setting):
    """With m = N the difference estimator is exact PSIS-LOO, its subsampling error 0 (would catch a wrong N/m)."""
    x, result, exact = setting
    full = loo_subsample(result, gaussian_mean(), x, m=N)
    assert full.elpd_loo == pytest.approx(float(exact.elpd_loo), rel=1e-6)
    assert full.se == pytest.approx(float(exact.se), rel=1e-3) and full.subsampling_se == 0.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_subsample_of_a_fifth_agrees_with_exact_within_its_error(setting, seed):
    """m = 1000 rows (a fifth): within 4 subsampling s.e.s of exact, that s.e. below 1% of |elpd| (so the check has power)
    and the reported s.e. within 10% of exact PSIS-LOO's."""
    x, result, exact = setting
    sub = loo_subsample(result, gaussian_mean(), x, m=1000, key=seed)
    assert len(set(sub.rows)) == 1000 and sub.max_pareto_k < 0.7
    assert 0 < sub.subsampling_se < 0.01 * abs(float(exact.elpd_loo))
    assert abs(sub.elpd_loo - float(exact.elpd_loo)) < 4 * sub.subsampling_se
    assert sub.se == pytest.approx(float(exact.se), rel=0.1)
