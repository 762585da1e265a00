import numpy as np
import pytest
from helpers_ratio import acceptance_draws, exact_delta, population
from scipy.special import expit

from minibatch_mcmc.acceptance import BarkerTest, MetropolisTest

DRAWS = 100_000


@pytest.mark.parametrize("delta", [-2.0, -0.3, 0.0, 1.2])
@pytest.mark.parametrize("temperature", [1.0, 5.0])
def test_full_data_tests_hit_exact_probabilities(delta, temperature):
    r, psi = population(3000, delta, 20.0, seed=1)
    d = exact_delta(r, psi, temperature)
    for test, p in ((MetropolisTest(), min(1.0, np.exp(d))), (BarkerTest(), expit(d))):
        acc, bs, ds = acceptance_draws(test, r, psi, DRAWS, seed=2, temperature=temperature)
        se = np.sqrt(max(p * (1 - p), 1e-12) / DRAWS)
        assert abs(acc.mean() - p) < 3 * se + 1e-6, (test.name, acc.mean(), p)
        assert np.all(bs == 3000)
        np.testing.assert_allclose(ds[0], d, atol=1e-4 * (1 + abs(d)))
