import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers_ratio import acceptance_draws, exact_delta, population
from minibatch_mcmc.acceptance import mh_sublhd
from minibatch_mcmc.acceptance.base import Statistics

N = 5000
DRAWS = 20_000


@pytest.mark.parametrize("delta, spread", [(-1.5, 5.0), (0.0, 20.0), (0.7, 3.0)])
def test_acceptance_probability_within_delta(delta, spread):
    test = mh_sublhd(50, gamma=1.5, p=2.0, delta=0.05)
    r, psi = population(N, delta, spread, seed=4)
    p = min(1.0, float(np.exp(exact_delta(r, psi))))
    acc, bs, _ = acceptance_draws(test, r, psi, DRAWS, seed=5)
    se = np.sqrt(max(p * (1 - p), 1e-4) / DRAWS)
    assert abs(acc.mean() - p) <= test.delta + 3 * se


def test_stage_sizes_are_geometric_multiples_of_m():
    r, psi = population(N, 0.0, 20.0, seed=4)
    _, bs, _ = acceptance_draws(mh_sublhd(50, gamma=1.5), r, psi, 2000, seed=1)
    stages = [50]
    while stages[-1] < N:
        stages.append(min(N, max(int(np.ceil(1.5 * stages[-1] / 50)) * 50, stages[-1] + 50)))
    assert set(np.unique(bs)) <= set(stages)


def test_exhausting_the_data_is_exact_metropolis():
    r, psi = population(800, -0.5, 1e4, seed=3)
    acc, bs, _ = acceptance_draws(mh_sublhd(50), r, psi, DRAWS, seed=2)
    assert np.mean(bs == 800) > 0.99
    p = min(1.0, float(np.exp(exact_delta(r, psi))))
    assert abs(acc[bs == 800].mean() - p) < 4 * np.sqrt(p * (1 - p) / (bs == 800).sum())


def test_hidden_data_counts_the_range_pass_unless_a_bound_is_given():
    r, psi = population(N, 0.0, 5.0, seed=1)
    stats = Statistics(lambda b: b, jnp.asarray(r), N, jnp.float32(psi), jnp.float32(1.0))
    out = mh_sublhd(50).decide(jax.random.key(0), stats)
    assert int(out.hidden_data) == N
    bound = float(np.max(np.abs(r)))
    out2 = mh_sublhd(50, range_bound=lambda s: jnp.float32(bound)).decide(jax.random.key(0), stats)
    assert int(out2.hidden_data) == 0
    assert int(out2.batch_size) == int(out.batch_size) and bool(out2.accepted) == bool(out.accepted)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gamma": 1.0}, "gamma=1.0"),
        ({"p": 1.0}, "p=1.0"),
        ({"delta": 0.0}, "delta=0.0"),
        ({"delta": 1.0}, "delta=1.0"),
        ({"batch_size": 1}, "m=1"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mh_sublhd(**kwargs)
    with pytest.raises(ValueError, match="m=60 exceeds"):
        mh_sublhd(60).validate(50)
