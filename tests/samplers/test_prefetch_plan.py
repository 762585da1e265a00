"""The prefetch plan names the rows each minibatch test reads first at every step of every chain."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches
from reference_cases import flat_draws

from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.acceptance import MetropolisTest, austere_mh, mh_sublhd, naive_minibatch
from minibatch_mcmc.acceptance.mhminibatch import first_chunk_indices
from minibatch_mcmc.data import open_npy, prefetch
from minibatch_mcmc.models import gaussian_mean
from minibatch_mcmc.samplers import prefetch_plan
from minibatch_mcmc.samplers.keys import split_step, step_keys

N, M, CHAINS, STEPS = 600, 25, 2, 12


def test_plan_follows_the_key_schedule():
    plan = prefetch_plan(mh_minibatch(M), 4, STEPS, CHAINS, N)
    assert plan.shape == (STEPS, CHAINS, M)
    assert plan.min() >= 0 and plan.max() < N
    assert all(len(set(row)) == M for row in plan.reshape(-1, M))  # without replacement
    for t in (0, STEPS - 1):
        for c in range(CHAINS):
            _, k_test = split_step(step_keys(jax.random.key(4), t, CHAINS)[c])
            np.testing.assert_array_equal(plan[t, c], np.asarray(first_chunk_indices(k_test, M, N)))


@pytest.mark.parametrize(
    "test", [mh_minibatch(M), austere_mh(M, 0.05), mh_sublhd(M), naive_minibatch(M)], ids=lambda t: t.name
)
def test_every_step_of_a_run_asks_for_its_planned_rows(tmp_path, test):
    """The rows a test declares it reads first are the first rows its decide gathers (every planned read is asked for)."""
    x = np.random.default_rng(0).normal(size=(N, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = prefetch(open_npy(tmp_path / "x.npy"), prefetch_plan(test, 9, STEPS, CHAINS, N), depth=3)
    kw = dict(
        proposal=random_walk(scale=0.05),
        test=test,
        num_samples=STEPS,
        num_chains=CHAINS,
        key=9,
        temperature=5.0,
        progress=False,
    )
    res = sample(gaussian_mean(), src, jnp.zeros(2), **kw)
    src.reader.close()
    # every planned read asked for: once on the planned runner's rows, and once more where the chunk (here the whole
    # run) is rerun on the source because a step read past its first minibatch (samplers.planned_runner)
    assert src.reader.hits + src.reader.misses in (STEPS, 2 * STEPS)
    in_memory = sample(gaussian_mean(), x, jnp.zeros(2), **kw)
    assert not (bad := mismatches(flat_draws(res), flat_draws(in_memory), STEPS, N)), (
        bad
    )  # decisions exact, floats to rounding (draws_tolerance)


def test_plan_rejects_bad_settings():
    with pytest.raises(ValueError, match="num_samples=0 must be a positive integer"):
        prefetch_plan(mh_minibatch(5), 0, 0, 1, 10)
    with pytest.raises(ValueError, match=r"batch_size m=11 exceeds the number of data points N=10"):
        prefetch_plan(mh_minibatch(11), 0, 3, 1, 10)
    with pytest.raises(ValueError, match="'metropolis' reads no minibatch first"):
        prefetch_plan(MetropolisTest(), 0, 3, 1, 10)
