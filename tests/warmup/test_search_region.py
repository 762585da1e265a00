"""A non-finite region the mode search's Adam phase reaches from a finite start is reported as that, with the step and
the position, not blamed on ``theta0``.

Before: 'the mode search (Adam phase): non-finite minibatch log posterior or gradient from theta0; check theta0 and the
model's support', for a start where everything is finite."""

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import models
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.warmup import warmup

GAUSS = models.gaussian_mean()


def walled(wall: float) -> Model:
    """The Gaussian mean model, NaN for ``theta >= wall``."""
    return Model(GAUSS.log_prior, lambda t, b: GAUSS.log_lik(t, b) + jnp.where(t[0] < wall, 0.0, jnp.nan), "walled")


def test_adam_reaching_a_nan_region_names_the_step_and_the_position():
    """Data around 10, a NaN wall at theta = 3 and the start at 0 (finite): Adam's steps of about its learning rate 0.05
    reach the wall near step 60; the error says the region was reached from a finite start, at which step, the position
    (just past 3), and what to do. A start inside the region is refused before any pass, naming the start."""
    x = (np.random.default_rng(0).standard_normal((500, 1)) + 10.0).astype(np.float32)
    with pytest.raises(
        ValueError,
        match=r"reached a region where .* non-finite, at Adam step (\d+) of 300, from a finite start "
        r"theta0: it stopped at theta\[0\] = 3\.\d+\. .*prior",
    ) as err:
        warmup(walled(3.0), x, jnp.zeros(1), key=0, num_starts=0, num_windows=2, window_size=20)
    step = int(str(err.value).split("Adam step ")[1].split()[0])
    assert 40 <= step <= 100, step
    assert "check theta0" not in str(err.value)
    with pytest.raises(ValueError, match=r"^model 'walled': log_lik is not finite at the start for rows \[0, 1\]"):
        warmup(walled(3.0), x, jnp.full(1, 5.0), key=0, num_starts=0, num_windows=2, window_size=20)
