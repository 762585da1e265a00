"""A state-independent mixture of proposals: component frequencies, each component's own ratio, bad settings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.proposals import independence_gaussian, langevin, mixture, random_walk
from minibatch_mcmc.proposals.mixture import component_chooser


def test_component_frequencies_and_ratios():
    """Weights (1, 3): the independence move is chosen in 25% of 20,000 draws (within 4 binomial s.e.), and each
    draw reports its own component's ratio (0 for the random walk, the Gaussian density ratio for the other)."""
    far = independence_gaussian(np.full(2, 100.0), scale=1.0)
    prop = mixture([far, random_walk(scale=0.01)], [1.0, 3.0])
    assert not prop.symmetric
    keys = jax.random.split(jax.random.key(0), 20_000)
    theta = jnp.zeros(2)
    new, lq = jax.vmap(lambda k: prop.sample(k, theta))(keys)
    x, lq = np.asarray(new, np.float64), np.asarray(lq, np.float64)
    chose_far = x[:, 0] > 50
    frac = chose_far.mean()
    assert abs(frac - 0.25) < 4 * np.sqrt(0.25 * 0.75 / x.shape[0]), frac
    chosen = np.asarray(jax.vmap(component_chooser([1.0, 3.0]))(keys))  # what the warm-up reads to tune one component
    np.testing.assert_array_equal(chosen == 0, chose_far)
    assert np.all(lq[~chose_far] == 0)
    expected = 0.5 * np.sum((x[chose_far] - 100.0) ** 2, 1) - 0.5 * np.sum((0 - 100.0) ** 2 * np.ones((1, 2)), 1)
    np.testing.assert_allclose(lq[chose_far], expected, rtol=1e-4)


@pytest.mark.parametrize(
    "components, weights, message",
    [
        ([], [], "one weight per component"),
        ([random_walk(scale=1.0)], [1.0, 1.0], "one weight per component"),
        ([random_walk(scale=1.0)], [-1.0], "non-negative"),
        ([langevin(0.1, batch_size=10)], [1.0], "gradient-free"),
    ],
)
def test_rejects_bad_settings(components, weights, message):
    with pytest.raises(ValueError, match=message):
        mixture(components, weights)
