"""The prefetch plan names the rows MHminibatch reads first at every step of every chain."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.acceptance.mhminibatch import first_chunk_indices
from minibatch_mcmc.data import open_npy, prefetch
from minibatch_mcmc.models import gaussian_mean
from minibatch_mcmc.samplers import mhminibatch_plan
from minibatch_mcmc.samplers.keys import split_step, step_keys
from draws_tolerance import mismatches
from reference_cases import flat_draws

N, M, CHAINS, STEPS = 600, 25, 2, 12


def test_plan_follows_the_key_schedule():
    plan = mhminibatch_plan(4, STEPS, CHAINS, M, N)
    assert plan.shape == (STEPS, CHAINS, M)
    assert plan.min() >= 0 and plan.max() < N
    assert all(len(set(row)) == M for row in plan.reshape(-1, M))  # without replacement
    for t in (0, STEPS - 1):
        for c in range(CHAINS):
            _, k_test = split_step(step_keys(jax.random.key(4), t, CHAINS)[c])
            np.testing.assert_array_equal(plan[t, c], np.asarray(first_chunk_indices(k_test, M, N)))


def test_every_step_of_a_run_asks_for_its_planned_rows(tmp_path):
    x = np.random.default_rng(0).normal(size=(N, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = prefetch(open_npy(tmp_path / "x.npy"), mhminibatch_plan(9, STEPS, CHAINS, M, N), depth=3)
    kw = dict(proposal=random_walk(scale=0.05), test=mh_minibatch(M), num_samples=STEPS, num_chains=CHAINS, key=9,
              temperature=5.0, progress=False)
    res = sample(gaussian_mean(), src, jnp.zeros(2), **kw)
    src.reader.close()
    assert src.reader.hits + src.reader.misses == STEPS
    in_memory = sample(gaussian_mean(), x, jnp.zeros(2), **kw)
    assert not (bad := mismatches(flat_draws(res), flat_draws(in_memory), STEPS, N)), bad  # decisions exact, floats to rounding (draws_tolerance)


def test_plan_rejects_bad_settings():
    with pytest.raises(ValueError, match="num_samples=0 must be a positive integer"):
        mhminibatch_plan(0, 0, 1, 5, 10)
    with pytest.raises(ValueError, match=r"batch_size=11 must be an integer in \[1, 10\]"):
        mhminibatch_plan(0, 3, 1, 11, 10)
