"""Our kernels as BlackJAX ``SamplingAlgorithm``s: run by ``blackjax.util.run_inference_algorithm`` and by a
user's own ``lax.scan``, with the exact posterior of the conjugate model recovered."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.acceptance import base as acceptance_base
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.interop import blackjax as bj_interop
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean
from minibatch_mcmc.samplers import ChainState
from minibatch_mcmc.samplers.keys import step_keys

N, D, K = 5000, 2, 50.0
SETTINGS = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    x = rng.normal([1.0, -0.5], 1.0, size=(N, D)).astype(np.float32)
    mean, var = exact_posterior(x, K, SETTINGS)
    sd = float(np.sqrt(var))
    algo = bj_interop.as_sampling_algorithm(
        gaussian_mean(SETTINGS), x, random_walk(scale=1.2 * sd), mh_minibatch(batch_size=50), temperature=K
    )
    return x, mean, var, algo


def test_run_inference_algorithm_recovers_exact_posterior(problem):
    blackjax = pytest.importorskip("blackjax")
    x, mean, var, algo = problem
    assert isinstance(algo, blackjax.base.SamplingAlgorithm)
    start = jnp.asarray(mean + 2 * np.sqrt(var), jnp.float32)

    def one_chain(key):
        return blackjax.util.run_inference_algorithm(key, algo, 3000, initial_position=start)

    keys = jax.random.split(jax.random.key(11), 4)
    final, (states, infos) = jax.vmap(one_chain)(keys)
    assert isinstance(states, ChainState) and isinstance(infos, acceptance_base.TestOutcome)
    draws = np.asarray(states.position)[:, 300:]
    chk = check_moments(draws, mean, var)
    assert np.all(chk.ess > 300), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    rate = float(np.mean(infos.accepted))
    assert 0.1 < rate < 0.9, rate
    assert np.all(np.asarray(infos.batch_size) >= 50) and np.all(np.asarray(infos.batch_size) <= N)
    np.testing.assert_array_equal(np.asarray(final.position), draws[:, -1])


def test_user_scan_gives_the_same_draws_as_run_inference_algorithm(problem):
    blackjax = pytest.importorskip("blackjax")
    x, mean, var, algo = problem
    state = jax.jit(algo.init)(jnp.asarray(mean, jnp.float32))  # compiled, not op by op
    key = jax.random.key(3)
    _, (states, infos) = blackjax.util.run_inference_algorithm(key, algo, 200, initial_state=state)

    def one_step(state, rng_key):
        state, info = algo.step(rng_key, state)
        return state, (state, info)

    _, (user_states, user_infos) = jax.jit(lambda s, ks: jax.lax.scan(one_step, s, ks))(
        state, jax.random.split(key, 200)
    )
    np.testing.assert_array_equal(np.asarray(user_states.position), np.asarray(states.position))
    for name in acceptance_base.TestOutcome._fields:
        np.testing.assert_array_equal(
            np.asarray(getattr(user_infos, name)), np.asarray(getattr(infos, name)), err_msg=name
        )


def test_step_with_the_driver_keys_reproduces_sample(problem):
    x, mean, var, algo = problem
    start = jnp.asarray(mean, jnp.float32)
    res = sample(
        gaussian_mean(SETTINGS),
        x,
        start,
        proposal=random_walk(scale=1.2 * float(np.sqrt(var))),
        test=mh_minibatch(batch_size=50),
        num_samples=50,
        temperature=K,
        key=5,
        progress=False,
    )

    def one(state, t):
        state, info = algo.step(step_keys(jax.random.key(5), t, 1)[0], state)
        return state, state.position

    _, positions = jax.jit(lambda s: jax.lax.scan(one, s, jnp.arange(50)))(algo.init(start))
    assert not (bad := mismatches({"pos": np.asarray(positions)}, {"pos": np.asarray(res.positions)[0]}, 50, N)), (
        bad
    )  # decisions exact, floats to rounding (draws_tolerance)


def test_without_blackjax_the_pair_has_the_same_fields(problem, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "blackjax", None)  # makes ``import blackjax...`` raise ImportError
    monkeypatch.setitem(sys.modules, "blackjax.base", None)
    x, mean, var, _ = problem
    algo = bj_interop.as_sampling_algorithm(gaussian_mean(SETTINGS), x, random_walk(scale=0.01), mh_minibatch())
    assert type(algo) is bj_interop.SamplingAlgorithm and algo._fields == ("init", "step")
    state, info = jax.jit(lambda k, p: algo.step(k, algo.init(p, None)))(
        jax.random.key(0), jnp.asarray(mean, jnp.float32)
    )
    assert isinstance(info, acceptance_base.TestOutcome) and info.accepted.shape == ()


def test_bad_temperature_is_named(problem):
    x, *_ = problem
    with pytest.raises(ValueError, match="temperature=-1.0"):
        bj_interop.as_sampling_algorithm(
            gaussian_mean(SETTINGS), x, random_walk(scale=0.1), mh_minibatch(), temperature=-1.0
        )
