"""A bound-based exact test (Scalable MH, MH-SS, TunaMH) names, from a step's key alone, the rows its thinned pass
reads first (its contract's ``rows_ahead``), so an out-of-core run can read them before the step runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.acceptance import mhss, scalable_mh, tunamh
from minibatch_mcmc.acceptance.base import ResidualBounds, Statistics
from minibatch_mcmc.acceptance.registry import contract, named_test
from minibatch_mcmc.acceptance.thinning import ROWS_AHEAD

N = 500
BUILDERS = {"smh": scalable_mh, "mhss": mhss, "tunamh": tunamh}
BOUND = {"smh": 0.02, "mhss": 0.02, "tunamh": 0.006}
"""Each row's bound: about ten expected rows a step (TunaMH reads ``B + B^2``, ``B = N b``)."""
SLOW = pytest.mark.slow  # each case compiles a vmapped while loop: ~10-40 s on the loaded 2-core machine
CASES = [
    ("smh", "drawn"),
    pytest.param("smh", "uniform", marks=SLOW),
    pytest.param("mhss", "drawn", marks=SLOW),
    pytest.param("mhss", "uniform", marks=SLOW),
    pytest.param("tunamh", "drawn", marks=SLOW),
    ("tunamh", "uniform"),
]


def lower_half(key: jax.Array, count: int) -> jax.Array:
    """A state-free draw of rows (the lower half only), standing in for a proxy's alias table."""
    return jax.random.randint(key, (count,), 0, N // 2, jnp.int32)


def decide(test, draw, key: jax.Array, values: jax.Array):
    """The decision of ``test`` at ``key`` on the column ``values`` (terms ``b v_i`` within their bound ``b``, as
    ``|v_i| <= 1``), ten rows expected: most steps read a few chunks, a few more than planned."""
    b = jnp.float32(BOUND[test.name])
    bounds = ResidualBounds(lambda rows: jnp.full(rows.shape, b), b * N, b, draw)
    stats = Statistics(lambda rows: b * rows, values, N, jnp.float32(0.1), jnp.float32(1.0), 0.0, bounds)
    return test.decide(key, stats)


@pytest.mark.parametrize(("name", "how"), CASES)
def test_a_step_within_its_planned_rows_reads_only_them(name, how):
    """On data whose rows outside each step's named rows are NaN, every step that read at most ``ROWS_AHEAD`` rows and
    did not fall back decides exactly as on the clean data and reads no NaN: named rows from another key, another split
    of it or another draw would put NaN into the decision (``nonfinite``) or change it."""
    test, draw = BUILDERS[name](chunk_size=8), lower_half if how == "drawn" else None
    ahead = contract(test).rows_ahead
    keys = jax.random.split(jax.random.key(11), 300)
    clean = jax.random.uniform(jax.random.key(2), (N,), jnp.float32, -1.0, 1.0)
    # one compiled program decides both: each key on its own column of data (the vmapped while loop compiled once)
    decide_all = jax.jit(jax.vmap(lambda k, values: decide(test, draw, k, values)))
    want = decide_all(keys, jnp.broadcast_to(clean, (keys.shape[0], N)))

    def masked(key):
        named = ahead(test, key, N, draw)
        return jnp.full((N,), jnp.nan, jnp.float32).at[named].set(clean[named])

    got = decide_all(keys, jax.vmap(masked)(keys))
    within = np.asarray((want.batch_size <= ROWS_AHEAD) & ~want.fallback)
    assert within.mean() > 0.9 and np.asarray(want.batch_size)[within].max() > 8  # several chunks read, most planned
    assert not np.any(np.asarray(got.nonfinite)[within])
    np.testing.assert_array_equal(np.asarray(got.accepted)[within], np.asarray(want.accepted)[within])
    np.testing.assert_array_equal(np.asarray(got.delta_star)[within], np.asarray(want.delta_star)[within])


def test_the_exact_tests_declare_rows_ahead_and_the_others_do_not():
    """The three bound-based tests declare ``rows_ahead`` in their contract, a fixed count of rows; the minibatch tests
    name theirs with ``first_rows`` instead."""
    for name in ("smh", "mhss", "tunamh"):
        test = named_test(name)
        rows = contract(test).rows_ahead(test, jax.random.key(0), N, None)
        assert rows.dtype == jnp.int32 and rows.shape == (ROWS_AHEAD,) and bool(jnp.all((rows >= 0) & (rows < N)))
    assert contract(named_test("penalty")).rows_ahead is None
