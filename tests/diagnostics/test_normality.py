"""``minibatch_shape``: the m-row mean's moments from a population's power sums, against closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from minibatch_mcmc.diagnostics.normality import minibatch_shape


def power_sums(x: np.ndarray) -> np.ndarray:
    """``[sum x, sum x^2, sum x^3, sum x^4]`` (float64)."""
    return np.array([[np.sum(x**k) for k in range(1, 5)]])


def test_spikes_give_the_closed_form_moments():
    """k spikes of height h among n rows (p = k / n): skewness (1 - 2p) / sqrt(p (1 - p)), excess kurtosis
    (1 - 6 p (1 - p)) / (p (1 - p)), both of the m-row mean divided by sqrt(m) and m; the estimate's s.d. is
    (n / K) sqrt(var (n / (n - 1)) (1 - m / n) / m); the acceptance error is capped at 1."""
    n, k, h, m, temperature = 100_000, 5, 2.0, 50, 2.0
    x = np.zeros(n)
    x[:k] = h
    p = k / n
    out = minibatch_shape(power_sums(x), n, m, temperature)
    np.testing.assert_allclose(out.skewness, (1 - 2 * p) / np.sqrt(p * (1 - p)) / np.sqrt(m), rtol=1e-6)
    np.testing.assert_allclose(out.excess_kurtosis, (1 - 6 * p * (1 - p)) / (p * (1 - p)) / m, rtol=1e-6)
    np.testing.assert_allclose(
        out.estimate_sd, n / temperature * np.sqrt(x.var() * n / (n - 1) * (1 - m / n) / m), rtol=1e-9
    )
    assert out.acceptance_error[0] == 1.0


def test_normal_rows_give_a_small_error():
    """100,000 normal rows: the m = 50 mean's Edgeworth error is below 0.01, and a flat population gives 0."""
    x = np.random.default_rng(0).standard_normal(100_000) + 3.0
    out = minibatch_shape(power_sums(x), x.size, 50)
    assert out.edgeworth_error[0] < 0.01 and abs(out.skewness[0]) < 0.01, out
    flat = minibatch_shape(power_sums(np.full(10, 0.5)), 10, 5)
    assert flat.acceptance_error[0] == 0.0 and flat.edgeworth_error[0] == 0.0


def test_metropolis_rule_bounds_the_penalty_test():
    """For the penalty test's Metropolis rule the noise can move ``min(1, e^x)`` by up to ``sd (1 + sd/2)`` (slope 1, and
    the penalty's shift), four times Barker's ``sd / 4``: with spikes (Edgeworth error capped at 1) the check must
    report the larger cap, or a penalty run's error would be understated; normal rows stay near 0 under both rules, and
    an unknown rule is refused by name."""
    n, m = 100_000, 50
    x = np.zeros(n)
    x[:5] = 3e-3  # est. s.d. ~ 0.3 nats: a noise small enough for the cap to decide
    barker = minibatch_shape(power_sums(x), n, m)
    metro = minibatch_shape(power_sums(x), n, m, rule="metropolis")
    sd = metro.estimate_sd[0]
    assert 0.05 < sd < 1.0 and barker.edgeworth_error[0] == 1.0
    np.testing.assert_allclose(barker.acceptance_error[0], sd / 4, rtol=1e-12)
    np.testing.assert_allclose(metro.acceptance_error[0], min(sd * (1 + sd / 2), 1.0), rtol=1e-12)
    normal = np.random.default_rng(0).standard_normal(n) * 1e-4
    assert minibatch_shape(power_sums(normal), n, m, rule="metropolis").acceptance_error[0] < 0.01
    with pytest.raises(ValueError, match="rule='austere' must be one of 'barker', 'metropolis'"):
        minibatch_shape(power_sums(normal), n, m, rule="austere")
