"""Cheap checks of the Section 5.3 analysis helpers (the sampler itself is tested in tests/samplers)."""

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.models.tied_mixture import make_tied_mixture_data, nearest_mode, tied_mixture, tied_mixture_truth
from reproductions.mintee import ExperimentConfig, elbow, kmeans_objective, mode_summary, quick, theta1_heights


def _mode_draws(c: int, per_mode: int, sd: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    modes = 2.0 * np.eye(c)
    return np.concatenate([m + sd * rng.standard_normal((per_mode, c)) for m in modes])


def test_modes_heights_and_elbow_on_draws_around_known_modes():
    c = 8
    draws = _mode_draws(c, 200, 0.1)
    s = mode_summary(draws, 2.0)
    assert s["modes_visited"] == c and s["fraction_in_a_mode"] == 1.0
    np.testing.assert_allclose([s["min_mode_fraction"], s["max_mode_fraction"]], 1 / c)
    low, high, ratio = theta1_heights(draws[:, 0], 2.0)
    assert 3.0 < ratio < 15.0  # (c - 1) : 1 in mass; peak heights within sampling noise of 7
    clusters = list(range(2, 13))
    assert elbow(clusters, kmeans_objective(draws, clusters)) == c
    one = mode_summary(_mode_draws(c, 50, 0.1)[:50], 2.0)
    assert one["modes_visited"] == 1 and one["mode_switches"] == 0


def test_tied_mixture_model_is_permutation_symmetric():
    model = tied_mixture(5)
    truth = tied_mixture_truth(5)
    x = make_tied_mixture_data(jax.random.key(0), 500, truth)
    perm = jnp.asarray(truth)[jnp.asarray([3, 1, 2, 0, 4])]
    np.testing.assert_allclose(model.log_lik(jnp.asarray(truth), x), model.log_lik(perm, x), rtol=1e-6)
    assert nearest_mode(np.asarray([perm, np.zeros(5)])).tolist() == [3, -1]
    assert quick(ExperimentConfig()).num_chains >= 2
