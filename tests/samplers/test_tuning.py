"""tune_chains: reaches the target acceptance on a 2-D Gaussian posterior (checked on a fresh run) on one chain or several, counts data,
checks settings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import models
from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers.kernel import build_kernel
from minibatch_mcmc.samplers.scaled_runner import make_scaled_runner
from minibatch_mcmc.samplers.tuning import dual_averaging_init, dual_averaging_update, tune_chains

N = 200


def problem():
    x = np.asarray(jax.random.normal(jax.random.key(1), (N, 2)), np.float32) + np.float32([1.0, -2.0])
    mean, var = models.exact_posterior(x)
    factor = jnp.asarray(np.linalg.cholesky(var * np.array([[1.0, 0.5], [0.5, 1.0]])), jnp.float32)
    model = models.gaussian_mean()

    def kernel_for_scale(scale):
        return build_kernel(model, scaled_random_walk(factor, scale), MetropolisTest(), N)

    return x, jnp.asarray(mean, jnp.float32), kernel_for_scale


X, MEAN, KERNEL_FOR_SCALE = problem()
FRESH_STEPS = 6000


@pytest.fixture(scope="module")
def runners():
    """One runner per chain count (windows of 50 steps), shared by the parametrisations: the scale is traced, so each
    compiles its window once for both."""
    return {chains: make_scaled_runner(KERNEL_FOR_SCALE, chains, chunk=50) for chains in (1, 4)}


@jax.jit
def fresh_accepts(scale, position, key):
    """Acceptance decisions of a new chain of ``FRESH_STEPS`` at a fixed (traced) scale: one program for every call."""
    kernel = KERNEL_FOR_SCALE(scale)
    data = jnp.asarray(X)

    def one(state, k):
        return kernel.step(k, state, data, jnp.float32(1.0))

    return jax.lax.scan(one, kernel.init(position), jax.random.split(key, FRESH_STEPS))[1].accepted


def fresh_acceptance(scale, position, key, steps):
    """Acceptance rate of the first ``steps`` of a new chain at a fixed scale."""
    return float(np.mean(np.asarray(fresh_accepts(jnp.float32(scale), position, key))[:steps]))


@pytest.mark.parametrize("target, initial_scale", [(0.234, 0.05), (0.5, 20.0)])
def test_one_chain_reaches_the_target_on_a_fresh_run(runners, target, initial_scale):
    """One chain (the warm-up's tuning where sampling does not reuse the runner), 40 windows of 50 steps, from a
    scale 20 times too small or too large: a fresh chain at the tuned scale accepts within 0.05 of the target, and a
    scale 3x off misses it by more than 0.1 (the check has power)."""
    runner = runners[1]
    r = tune_chains(runner, X, MEAN[None], key=3, target_accept=target, num_windows=40, initial_scale=initial_scale)
    assert r.acceptance.shape == (40,) and r.position.shape == (1, 2)
    assert r.data_used == 40 * 50 * N  # exact Metropolis touches all N points every step
    assert r.compilations == 1  # the scale is traced: one window compiled for all 40 (and both parametrisations)
    rate = fresh_acceptance(r.scale, r.position[0], jax.random.key(11), 6000)
    assert abs(rate - target) < 0.05, (r.scale, rate)
    off = fresh_acceptance(3 * r.scale, r.position[0], jax.random.key(12), 2000)
    assert abs(off - target) > 0.1


def test_dual_averaging_moves_the_scale_the_right_way():
    da = dual_averaging_init(1.0)
    mu = np.log(10.0)
    up = dual_averaging_update(da, 1.0, 0.234, mu)  # accepted: above target, larger scale
    down = dual_averaging_update(da, 0.0, 0.234, mu)
    assert float(up.log_scale) > float(down.log_scale) and int(up.step) == 1


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"target_accept": 1.5}, "target_accept=1.5"),
        ({"num_windows": 0}, "num_windows=0"),
        ({"initial_scale": -1.0}, "initial_scale=-1.0"),
        ({"temperature": 0.0}, "temperature=0.0"),
    ],
)
def test_bad_settings_name_the_setting(kwargs, name):
    x, mean, kernel_for_scale = problem()
    with pytest.raises(ValueError, match=name):
        tune_chains(make_scaled_runner(kernel_for_scale, 1), x, mean[None], key=0, **kwargs)


@pytest.mark.parametrize("target, initial_scale", [(0.234, 0.05), (0.5, 20.0)])
def test_tune_chains_reaches_the_target_on_a_fresh_run(runners, target, initial_scale):
    """``tune_chains`` (4 chains on one compiled runner, the scale moved once per window of 50 steps) from a scale 20
    times too small or too large: a fresh chain at the tuned scale accepts within 0.05 of the target, and a scale 3x
    off would miss it by more than 0.1 (the check of power above)."""
    starts = jnp.broadcast_to(MEAN, (4, 2))
    runner = runners[4]
    r = tune_chains(runner, X, starts, key=3, target_accept=target, num_windows=20, initial_scale=initial_scale)
    assert r.acceptance.shape == (20,) and r.position.shape == (4, 2) and r.compilations == 1
    assert r.data_used == 20 * 50 * 4 * N
    rate = fresh_acceptance(r.scale, r.position[0], jax.random.key(11), 6000)
    assert abs(rate - target) < 0.05, (r.scale, rate, r.acceptance)
