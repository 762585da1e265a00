import numpy as np
import pytest

from helpers_ratio import acceptance_draws, exact_delta, population
from minibatch_mcmc.acceptance import naive_minibatch

DRAWS = 20_000


def test_naive_test_is_biased_when_the_estimate_is_noisy():
    # Delta = -1.5 but the plug-in estimate has s.d. ~3: the naive test accepts far too often
    r, psi = population(5000, -1.5, 30.0, seed=1)
    p = min(1.0, float(np.exp(exact_delta(r, psi))))
    acc, bs, _ = acceptance_draws(naive_minibatch(100), r, psi, DRAWS, seed=2)
    se = np.sqrt(p * (1 - p) / DRAWS)
    assert acc.mean() - p > 20 * se
    assert np.all(bs == 100)


def test_naive_test_is_nearly_exact_when_the_estimate_is_precise():
    r, psi = population(5000, -1.5, 0.5, seed=1)
    p = min(1.0, float(np.exp(exact_delta(r, psi))))
    acc, _, _ = acceptance_draws(naive_minibatch(100), r, psi, DRAWS, seed=2)
    assert abs(acc.mean() - p) < 0.01 + 3 * np.sqrt(p * (1 - p) / DRAWS)


def test_bad_batch_size_raises():
    with pytest.raises(ValueError, match="m=1"):
        naive_minibatch(1)
