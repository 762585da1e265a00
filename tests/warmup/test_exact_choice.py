"""Exact tests by name in ``warmup``/``auto_sample``: the name table, the GLM bounds built from the model, the
refusal of a model without a GLM family, and (slow) the sampled posterior against quadrature at temperature 1."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import glm_data, glm_quadrature, poisson_data

from minibatch_mcmc.acceptance.registry import TESTS, named_test
from minibatch_mcmc.acceptance.smh import ScalableMH
from minibatch_mcmc.control_variates import GLMProxy, taylor_proxy
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import gaussian_mean, logistic_regression, poisson_regression
from minibatch_mcmc.samplers.results import SUMMARY_KEYS
from minibatch_mcmc.warmup import auto_sample
from minibatch_mcmc.warmup.exact_choice import estimator_for, needs_bounds

EXACT_TESTS = ("smh", "mhss", "tunamh")
"""The exact tests, which read per-datum bounds (written out here, not read from the registry under test)."""


def test_names_pick_the_named_tests():
    assert tuple(name for name, t in TESTS.items() if t.contract.reads_bounds) == EXACT_TESTS
    assert isinstance(named_test("smh"), ScalableMH) and needs_bounds(named_test("smh")) and "smh" in EXACT_TESTS
    assert [named_test(name).name for name in ("mhss", "tunamh")] == ["mhss", "tunamh"]
    assert named_test("tunamh").chi == 1.0 and named_test("mhss").chi == 0.0
    assert all(needs_bounds(named_test(name)) for name in EXACT_TESTS)
    with pytest.raises(
        ValueError, match="test='smhh' must be one of 'mhminibatch', 'penalty', 'smh', 'mhss', 'tunamh'"
    ):
        named_test("smhh")
    assert [named_test(name).decision_rule for name in ("penalty", "mhminibatch")] == ["metropolis", "barker"]
    assert not needs_bounds(named_test("penalty"))  # a minibatch test keeps the Taylor proxy and its stratum
    assert {"fallback_steps", "bound_exceeded_steps", "mean_expected_batch_size"} <= set(SUMMARY_KEYS)


def test_bounds_built_from_the_model_or_refused():
    """A GLM gets the GLM proxy (the warm-up's Taylor sums reused, Laplace-whitened); a model without a GLM family is
    refused with a message naming what to supply."""
    data = glm_data(200, (0.3, -0.8), 1)
    proxy = taylor_proxy(logistic_regression(), data, jnp.asarray([0.3, -0.8]), order=2)
    chol = np.array([[0.2, 0.0], [0.05, 0.3]])
    est = estimator_for(named_test("smh"), logistic_regression(5.0), data, proxy, chol, None)
    assert isinstance(est, GLMProxy) and est.proxy is proxy and np.allclose(est.whiten, chol)
    with pytest.raises(ValueError, match="does not declare a GLM family.*residual_bounds"):
        estimator_for(named_test("smh"), gaussian_mean(), data, proxy, chol, None)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["logistic", "poisson"])
def test_auto_sample_smh_matches_quadrature(family):
    """``auto_sample(test="smh")`` from a far start, temperature 1, N = 5000: posterior means and variances within
    |z| < 4 of quadrature at ESS > 3200 per coordinate (a 5% s.d. error is a 10% variance error, about 4 s.e. there),
    reading well under one row per step, with no fallback and no exceeded bound."""
    if family == "logistic":
        data, model = glm_data(5_000, (0.3, -0.8), 8), logistic_regression(prior_scale=5.0)
    else:
        data, model = poisson_data(5_000, (0.5, -0.3), 9), poisson_regression(prior_scale=5.0)
    mean, var, _, _ = glm_quadrature(data, 5.0, family=family)
    res, w = auto_sample(
        model,
        data,
        jnp.asarray([1.5, 1.0]),
        num_samples=6000,
        num_chains=4,
        key=2,
        test="smh",
        progress=False,
        block_size=3000,
    )
    assert isinstance(w.estimator, GLMProxy) and w.estimator.family == family
    chk = check_moments(np.asarray(res.positions)[:, 200:], mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
    s = res.summary(posterior=False)
    assert s["data_per_test"] < 1 and s["fallback_steps"] == 0 and s["bound_exceeded_steps"] == 0, s
