"""The lag-1 effective-draws estimate used to choose proposals, on Gaussian AR(1) chains with a known answer."""

import numpy as np
import pytest

from minibatch_mcmc.warmup.efficiency import lag1_ess_per_draw


def _ar1(rho: float, chains: int = 8, steps: int = 20_000, d: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty((chains, steps, d))
    x[:, 0] = rng.standard_normal((chains, d))
    noise = rng.standard_normal((chains, steps, d)) * np.sqrt(1 - rho**2)
    for t in range(1, steps):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x


@pytest.mark.parametrize("rho, expected", [(0.6, 0.4 / 1.6), (-0.6, 0.64 / 1.36), (0.0, 1.0)])
def test_lag1_estimate_on_ar1(rho, expected):
    """A Gaussian AR(1) with lag-1 correlation rho: the draws give (1 - rho) / (1 + rho), their squares rho^2; the
    minimum of the two is the answer (with rho < 0 it is the squares', which an antithetic move cannot flatter).
    160,000 draws: the estimate's s.e. is below 0.01, so 0.03 catches using the wrong one of the two."""
    assert abs(lag1_ess_per_draw(_ar1(rho)) - expected) < 0.03


def test_measured_run_is_the_run_sample_draws():
    """``measure_efficiency`` runs on the block runner with ``sample``'s key schedule: a random walk with Metropolis'
    exact test on a Gaussian mean, 4 chains x 50 steps from dispersed starts, has the same 200 decisions and rows read
    as ``sample`` with that kernel and key, and its effective draws per draw are those of ``sample``'s draws (to float32
    rounding, 1e-4). A private key schedule (the loop's own ``split``) would flip decisions and fail the first check."""
    import jax
    import jax.numpy as jnp

    from minibatch_mcmc import models
    from minibatch_mcmc.acceptance import MetropolisTest
    from minibatch_mcmc.proposals import random_walk
    from minibatch_mcmc.samplers.driver import sample
    from minibatch_mcmc.samplers.kernel import build_kernel
    from minibatch_mcmc.warmup.efficiency import measure_efficiency

    x = np.random.default_rng(3).normal([0.5, -1.0], 1.0, size=(500, 2)).astype(np.float32)
    model, proposal, test = models.gaussian_mean(), random_walk(scale=0.08), MetropolisTest()
    starts = jnp.asarray(np.random.default_rng(4).normal([0.5, -1.0], 0.05, size=(4, 2)), jnp.float32)
    key = jax.random.key(9)
    eff = measure_efficiency(build_kernel(model, proposal, test, len(x)), x, starts, key, num_steps=50)
    res = sample(
        model,
        x,
        starts,
        proposal=proposal,
        test=test,
        num_samples=50,
        num_chains=4,
        key=key,
        batched_init=True,
        block_size=50,
        progress=False,
    )
    assert 0.1 < eff.acceptance < 0.9  # decisions that a different key would change
    assert eff.acceptance == float(np.mean(res.records["accepted"]))
    assert eff.data_used == int(
        np.sum(res.records["batch_size"], dtype=np.int64) + np.sum(res.records["hidden_data"], dtype=np.int64)
    )
    assert abs(eff.ess_per_draw - lag1_ess_per_draw(np.asarray(res.positions))) < 1e-4
