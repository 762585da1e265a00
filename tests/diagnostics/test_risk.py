"""Risk utility against iid Gaussian draws with known bias and variance."""

import numpy as np
import pytest

from minibatch_mcmc.diagnostics import Risk, RiskCurve, posterior_risk, risk_curve


def _gaussian_estimates(rng, r, q, offset, s):
    """R x Q estimates ~ N(reference + offset, s^2) with reference 0.5 * arange(Q)."""
    ref = 0.5 * np.arange(q)
    return ref + offset + s * rng.standard_normal((r, q)), ref


def test_posterior_risk_known_bias_and_variance():
    rng = np.random.default_rng(0)
    r, q, offset, s = 400, 5, 0.3, 0.2
    est, ref = _gaussian_estimates(rng, r, q, offset, s)
    out = posterior_risk(est, ref)
    assert isinstance(out, Risk)
    assert out.risk == pytest.approx(out.bias2 + out.variance)
    # risk = mean of (est - ref)^2 over R*Q iid terms with mean o^2 + s^2, variance 2 s^4 + 4 o^2 s^2
    se_risk = np.sqrt((2 * s**4 + 4 * offset**2 * s**2) / (r * q))
    assert abs(out.risk - (offset**2 + s**2)) < 4 * se_risk
    # R * variance / s^2 summed over q ~ chi2(Q (R - 1)), so E = (R-1)/R s^2, sd = s^2 sqrt(2 Q) / (R Q)
    mean_var = (r - 1) / r * s**2
    sd_var = s**2 * np.sqrt(2 * q * (r - 1)) / (r * q)
    assert abs(out.variance - mean_var) < 4 * sd_var
    # bias2 = mean_q (o + s z_q / sqrt(R))^2 with z_q iid N(0, 1)
    sd_bias = np.sqrt((2 * (s**2 / r) ** 2 + 4 * offset**2 * s**2 / r) / q)
    assert abs(out.bias2 - (offset**2 + s**2 / r)) < 4 * sd_bias


def test_posterior_risk_zero_for_exact_estimates():
    ref = np.array([1.0, -2.0])
    out = posterior_risk(np.tile(ref, (3, 1)), ref)
    assert out == Risk(0.0, 0.0, 0.0)
    # one quantity given as a 1-D vector of chain estimates, scalar reference
    assert posterior_risk(np.array([1.0, 3.0]), 1.0) == pytest.approx(Risk(1.0, 1.0, 2.0))


def test_risk_curve_iid_draws_match_offset2_plus_sigma2_over_t():
    rng = np.random.default_rng(1)
    r, t, q, offset, sigma = 300, 400, 2, 0.1, 1.0
    ref = np.array([0.0, 2.0])
    values = ref + offset + sigma * rng.standard_normal((r, t, q))
    wall = 0.01 * np.arange(1, t + 1)
    curve = risk_curve(values, wall, ref, num_points=12)
    assert isinstance(curve, RiskCurve)
    assert curve.times.shape == curve.risk.shape == (12,)
    assert curve.times[0] == pytest.approx(0.01) and curve.times[-1] == pytest.approx(t * 0.01)
    assert np.all(np.diff(curve.times) > 0)
    n = np.floor(curve.times / 0.01 + 1e-9)  # draws completed by each time
    s2 = sigma**2 / n
    expected = offset**2 + s2
    se = np.sqrt((2 * s2**2 + 4 * offset**2 * s2) / (r * q))
    assert np.all(np.abs(curve.risk - expected) < 4 * se)
    np.testing.assert_allclose(curve.risk, curve.bias2 + curve.variance)
    # the last point is posterior_risk of the full-run means
    last = posterior_risk(values.mean(axis=1), ref)
    assert curve.risk[-1] == pytest.approx(last.risk)
    assert curve.bias2[-1] == pytest.approx(last.bias2)


def test_risk_curve_per_chain_wall_times():
    rng = np.random.default_rng(2)
    r, t = 4, 50
    values = rng.standard_normal((r, t))
    speed = np.array([1.0, 2.0, 0.5, 1.5])  # seconds per draw of each chain
    wall = speed[:, None] * np.arange(1, t + 1)
    curve = risk_curve(values, wall, np.array([0.0]), num_points=5)
    assert curve.times[0] == pytest.approx(2.0) and curve.times[-1] == pytest.approx(25.0)
    for k, tau in enumerate(curve.times):
        counts = np.floor(tau / speed + 1e-9).astype(int)
        est = np.array([values[i, : counts[i]].mean() for i in range(r)])
        assert curve.risk[k] == pytest.approx(posterior_risk(est, 0.0).risk)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: posterior_risk(np.zeros((2, 3)), np.zeros(2)), "reference must have shape"),
        (lambda: posterior_risk(np.zeros((2, 3, 1)), np.zeros(3)), "estimates must have shape"),
        (lambda: posterior_risk(np.array([[np.nan]]), np.zeros(1)), "estimates must be finite"),
        (lambda: risk_curve(np.zeros((2, 3, 1)), np.zeros(4), np.zeros(1)), "wall_times must have shape"),
        (lambda: risk_curve(np.zeros((2, 3, 1)), np.array([1.0, 0.5, 2.0]), np.zeros(1)), "non-decreasing"),
        (lambda: risk_curve(np.zeros((2, 3, 1)), np.zeros(3), np.zeros(1)), "positive time"),
        (lambda: risk_curve(np.zeros((2, 3, 1)), np.arange(1.0, 4.0), np.zeros(1), num_points=0), "num_points"),
        (
            lambda: risk_curve(np.zeros((2, 2, 1)), np.array([[1.0, 2.0], [3.0, 4.0]]), np.zeros(1)),
            "do not overlap",
        ),
    ],
)
def test_risk_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
