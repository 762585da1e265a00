"""GLM proxies (logistic, probit, Poisson with an offset, Gaussian): residuals against a float64 reference, the
per-datum bounds on random moves near and far, and bounds tight where the family's derivative peaks.

The reference is numpy/scipy in float64 from the definition ``r_i = l_i(theta') - l_i(theta) - q_i`` (log-likelihood
values and the Taylor polynomial's derivatives at the centre), sharing no code with the library's delta-eta remainders.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import NU_T, SIGMA_T, family_settings
from helpers_glm import make_family_data as make
from helpers_glm import residual_reference as reference

from minibatch_mcmc.control_variates.glm import glm_proxy, model_glm_proxy
from minibatch_mcmc.models import gaussian_mean, poisson_regression

FAMILIES = ("logistic", "probit", "poisson", "gaussian", "student_t")


WHITEN = np.linalg.cholesky(np.diag([0.04, 0.09, 0.01]) + 0.005)


@functools.lru_cache(maxsize=None)
def family_data(family):
    """``make_family_data(family)``, drawn once per family (its draws run op by op) for both orders and every test."""
    return make(family)


@functools.lru_cache(maxsize=None)
def setting(family, order):
    """Data, centre and ``(t0, t1) -> (r, b)`` (the estimator's residuals and bounds on every row, compiled once)."""
    data, centre = family_data(family)
    return (
        data,
        centre,
        jitted(
            glm_proxy(data, centre, family, order=order, whiten=WHITEN, alias=False, **family_settings(family)), data
        ),
    )


def jitted(est, data):
    """``(t0, t1) -> (r, b)`` compiled once."""

    @jax.jit
    def run(t0, t1):
        return est.log_ratio(None, t0, t1)(data), est.residual_bounds(None, t0, t1).per_datum(data)

    return lambda t0, t1: tuple(np.asarray(v, np.float64) for v in run(jnp.asarray(t0), jnp.asarray(t1)))


@pytest.mark.parametrize("family", FAMILIES)
def test_bounds_hold_on_random_moves_near_and_far(family):
    """``|r_i| <= b_i`` with float64 residuals for moves from 1e-3 to 3 whitened units from the centre, orders 1 and 2
    (a bound missing a factor, a wrong sup or a dropped Poisson growth term fails on the far moves)."""
    rng = np.random.default_rng(1)
    whiten = WHITEN
    for order in (1, 2):
        data, centre, run = setting(family, order)
        for _ in range(12):
            t0 = (centre + whiten @ rng.normal(size=3) * rng.choice([1e-3, 0.1, 1.0, 3.0])).astype(np.float32)
            t1 = (t0 + whiten @ rng.normal(size=3) * rng.choice([1e-3, 0.1, 1.0, 3.0])).astype(np.float32)
            b = run(t0, t1)[1]
            r = reference(family, data, centre, t0, t1, order)
            assert np.all(np.abs(r) <= b * (1 + 1e-4) + 1e-9), (order, np.max(np.abs(r) - b))


@pytest.mark.parametrize("family", FAMILIES)
def test_residuals_match_float64(family):
    """The delta-eta residuals equal the float64 reference to 1e-3 of their size, at N = 10^6-like moves (delta eta
    ~1e-3, where a float32 difference of log-likelihoods is pure rounding) and at moves across the series/quadrature
    switch (delta eta ~0.05 to 3), there up to float32 rounding of the ``O(delta)`` terms (1e-7 |delta|)."""
    rng = np.random.default_rng(2)
    for order in (1, 2):
        data, centre, run = setting(family, order)
        for scale in (1e-3, 3e-2, 0.3, 1.0):
            t0 = (centre + scale * rng.normal(size=3)).astype(np.float32)
            t1 = (centre + scale * rng.normal(size=3)).astype(np.float32)
            want = reference(family, data, centre, t0, t1, order)
            got = run(t0, t1)[0]
            if family == "gaussian" and order == 2:
                assert np.all(got == 0.0) and np.max(np.abs(want)) < 1e-9  # the quadratic proxy is exact
                continue
            # beyond the series/quadrature switch the closed forms round their O(|delta|) terms in float32
            delta = np.abs(np.asarray(data["x"], np.float64) @ np.stack([t0 - centre, t1 - centre], 1)).max()
            rounding = 0.0 if scale < 0.01 else 1e-7 * delta
            assert np.max(np.abs(got - want)) < 1e-3 * np.max(np.abs(want)) + rounding, (order, scale)


TIGHT = {  # (family, order): the centre's eta where |f^(order+1)| peaks (its sup; probit order 1: near it)
    ("logistic", 1): 0.0,
    ("logistic", 2): np.log(2 + np.sqrt(3)),
    ("probit", 1): -6.0,
    ("probit", 2): 1.00237,
    ("poisson", 1): 0.3,
    ("poisson", 2): 0.3,
    ("gaussian", 1): 0.5,
    ("student_t", 1): 0.0,
    ("student_t", 2): -SIGMA_T * np.sqrt(NU_T) * (np.sqrt(2.0) - 1.0),  # y = 0: e = -eta
}


@pytest.mark.parametrize("family, order", list(TIGHT))
def test_bound_is_tight_where_the_derivative_peaks(family, order):
    """One covariate, rows at the peak of ``|f^(order+1)|``, a small move out of the centre: the largest ``|r_i| / b_i``
    (float64 residuals) exceeds 0.9, so a bound 10% too small there would be exceeded (and the bound holds)."""
    eta = TIGHT[(family, order)]
    x = np.ones((4, 1), np.float32)
    data = {"x": x, "y": np.array([1, 1, 1, 1], np.int32)}
    if family in ("gaussian", "student_t"):
        data["y"] = np.zeros(4, np.float32)
    centre = np.array([eta], np.float32)
    est = glm_proxy(data, centre, family, order=order, alias=False, **family_settings(family))
    t1 = centre + np.float32(0.01)
    b = np.asarray(est.residual_bounds(None, jnp.asarray(centre), jnp.asarray(t1)).per_datum(data), np.float64)
    ratio = np.abs(reference(family, data, centre, centre, t1, order)) / b
    assert 0.9 < ratio.max() <= 1 + 1e-4, ratio


def test_model_without_a_glm_family_is_refused():
    data, centre = family_data("logistic")
    with pytest.raises(ValueError, match="does not declare a GLM family.*residual_bounds"):
        model_glm_proxy(gaussian_mean(), data, centre)
    est = model_glm_proxy(poisson_regression(offset=True), *family_data("poisson"))
    assert est.family == "poisson" and est.weight_max is not None
