"""The non-finite diagnosis names the step, the chain and the datum, at the position or at the replayed candidate."""

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data import as_data_source
from minibatch_mcmc.models import Model, gaussian_mean
from minibatch_mcmc.proposals import langevin, random_walk
from minibatch_mcmc.samplers.diagnose import first_nonfinite, locate_nonfinite, nonfinite_error, replay_candidate
from minibatch_mcmc.samplers.keys import split_step, step_keys


def _broken(bad_row: int, threshold: float) -> Model:
    """``gaussian_mean`` whose datum ``bad_row`` has a NaN log-likelihood where ``theta[0] > threshold``."""
    base = gaussian_mean()

    def log_lik(theta, batch):
        ll = base.log_lik(theta, batch)
        return jnp.where((batch[:, 1] == bad_row) & (theta[0] > threshold), jnp.nan, ll)

    return Model(base.log_prior, log_lik, "broken")


def _rows(n: int) -> np.ndarray:
    return np.stack([np.zeros(n), np.arange(n)], axis=1).astype(np.float32)


def test_first_nonfinite_scans_past_the_first_read():
    data = _rows(70_000)
    model = _broken(68_000, 0.5)
    assert first_nonfinite(model, data, 70_000, jnp.zeros(2)) is None
    row, value = first_nonfinite(model, data, 70_000, jnp.ones(2))
    assert row == 68_000 and np.isnan(value)


def test_locate_nonfinite_blames_the_position_then_the_candidate():
    data, model = _rows(50), _broken(7, 0.5)
    assert "datum 7 has log-likelihood nan at the chain's current position" in locate_nonfinite(
        model, data, 50, jnp.ones(2)
    )
    assert "datum 7 has log-likelihood nan at the proposed candidate" in locate_nonfinite(
        model, data, 50, jnp.zeros(2), jnp.ones(2)
    )
    assert "all finite, so the candidate produced it" in locate_nonfinite(model, data, 50, jnp.zeros(2), jnp.zeros(2))


def test_replay_candidate_uses_the_step_key_and_skips_gradient_proposals():
    key, position = jax.random.key(2), jnp.array([0.1, 0.2])
    k_proposal, _ = split_step(step_keys(key, 4, 3)[1])
    expected = random_walk(scale=0.5).sample(k_proposal, position)[0]
    np.testing.assert_array_equal(replay_candidate(random_walk(scale=0.5), key, 4, 1, 3, position), expected)
    assert replay_candidate(langevin(0.01, batch_size=10), key, 4, 1, 3, position) is None


def test_nonfinite_error_takes_the_position_before_the_flagged_step():
    data, model = _rows(50), _broken(7, 0.5)
    start = jnp.zeros((2, 2))  # the chains before the block
    block = np.zeros((3, 2, 2), np.float32)
    block[0, 1] = 1.0  # chain 1 moved into the bad region at the block's first step
    flags = np.zeros((3, 2), bool)
    flags[1, 1] = True
    err = nonfinite_error(
        model, random_walk(scale=0.1), as_data_source(data), jax.random.key(0), 2, start, block, flags, 100
    )
    assert isinstance(err, FloatingPointError)
    assert "at step 101, chain 1; datum 7 has log-likelihood nan at the chain's current position" in str(err)
