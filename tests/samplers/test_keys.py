"""The key schedule: seeds become keys, and the driver and kernel draw step ``t`` of chain ``c`` from it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import random_walk, sample
from minibatch_mcmc.acceptance import no_test
from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
from minibatch_mcmc.samplers.keys import as_key, gradient_key, split_step, step_keys


def _data(key: jax.Array) -> np.ndarray:
    return np.asarray(jax.random.key_data(key))


def test_as_key_accepts_seeds_typed_and_legacy_keys():
    typed = jax.random.key(7)
    np.testing.assert_array_equal(_data(as_key(7)), _data(typed))
    np.testing.assert_array_equal(_data(as_key(np.int64(7))), _data(typed))
    assert as_key(typed) is typed
    np.testing.assert_array_equal(_data(as_key(jax.random.PRNGKey(7))), _data(typed))


def test_as_key_rejects_key_arrays_bools_and_other_values():
    with pytest.raises(ValueError, match=r"single PRNG key; got a key array of shape \(2,\)"):
        as_key(jax.random.split(jax.random.key(0)))
    for bad in (True, "seed", 1.5, np.zeros(3, np.uint32)):
        with pytest.raises(ValueError, match="must be an int seed or a jax PRNG key"):
            as_key(bad)


def test_step_keys_split_and_gradient_key_are_distinct_and_deterministic():
    base = jax.random.key(3)
    keys = step_keys(base, 5, 4)
    assert keys.shape == (4,)
    np.testing.assert_array_equal(_data(keys), _data(step_keys(base, jnp.int32(5), 4)))
    assert not np.array_equal(_data(keys), _data(step_keys(base, 6, 4)))
    k_proposal, k_test = split_step(keys[0])
    k_grad = gradient_key(k_proposal)
    words = {tuple(_data(k)) for k in (keys[0], k_proposal, k_test, k_grad)}
    assert len(words) == 4
    np.testing.assert_array_equal(_data(gradient_key(k_proposal)), _data(k_grad))


def test_driver_and_kernel_draw_step_t_of_chain_c_from_the_schedule():
    # with every candidate accepted, draw t of chain c is the proposal made from split_step(step_keys(t)[c])
    proposal, chains, steps = random_walk(scale=0.3), 3, 6
    res = sample(
        gaussian_mixture(),
        make_mixture_data(jax.random.key(0), 200),
        jnp.zeros(2),
        proposal=proposal,
        test=no_test(),
        num_samples=steps,
        num_chains=chains,
        key=11,
        block_size=4,
        progress=False,
    )
    pos = np.asarray(res.positions)
    for c in range(chains):
        for t in range(steps):
            k_proposal, _ = split_step(step_keys(jax.random.key(11), t, chains)[c])
            previous = jnp.zeros(2) if t == 0 else jnp.asarray(pos[c, t - 1])
            np.testing.assert_allclose(pos[c, t], np.asarray(proposal.sample(k_proposal, previous)[0]), rtol=1e-6)


def test_one_key_per_chain():
    """A key array is one base key per chain: chain c folds its own key with t (MCMC's split keys), checked by count."""
    from minibatch_mcmc.samplers.keys import as_run_key, step_keys

    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    base = as_run_key(keys, 3)
    assert base.shape == (3,)
    got = jax.random.key_data(step_keys(base, 7, 3))
    want = [jax.random.key_data(step_keys(jax.random.wrap_key_data(keys[c]), 7, 1)[0]) for c in range(3)]
    np.testing.assert_array_equal(got, np.stack(want))
    with pytest.raises(ValueError, match="2 keys for num_chains=3"):
        as_run_key(keys[:2], 3)
