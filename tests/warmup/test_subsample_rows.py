"""The lean mode search's subsample of a tall source is drawn in memory O(m), not from a permutation of all N rows.

``climb_all`` read its ``N / 32`` rows as ``jax.random.choice(key, N, (m,), replace=False)``, which permutes all ``N``: 19 CPU
seconds at 10^7 rows on the 2-core machine, and at 10^8 rows an array of ``N`` keys and indices (GBs) whatever the source
(benchmarks/tall.py). Past ``ONE_OFF_WORK`` rows it now takes the head of the keyed bijection minibatches use.
"""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.optim.mode import start_point

sn = importlib.import_module("minibatch_mcmc.warmup.subsample_newton")

N = 40_000


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 3)).astype(np.float32)
    y = (rng.random(N) < 1 / (1 + np.exp(-(x @ np.array([0.5, -0.3, 0.2]))))).astype(np.int32)
    return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def spy_on_permutations(monkeypatch) -> list[int]:
    """Record the population size of every ``jax.random.choice`` / ``permutation`` call."""
    seen: list[int] = []
    for name in ("choice", "permutation"):
        real = getattr(jax.random, name)

        def spy(key, a, *args, _real=real, **kwargs):
            seen.append(int(a) if np.ndim(a) == 0 else int(np.shape(a)[0]))
            return _real(key, a, *args, **kwargs)

        monkeypatch.setattr(jax.random, name, spy)
    return seen


def climb(data):
    flat, unravel = start_point(jnp.zeros(3))
    return sn.climb_all(logistic_regression(10.0), data, N, np.zeros((2, 3)), unravel, jax.random.key(3), 1.0, flat.dtype)


def test_tall_subsample_permutes_no_population(monkeypatch, data):
    """Past ``ONE_OFF_WORK`` rows (lowered here to 10^4 so N = 4e4 is past it) the climb draws its m distinct sorted rows
    without a ``choice``/``permutation`` over all N (the old code called ``jax.random.choice(key, N, ...)``: this fails on
    it), and still climbs from both starts to the subsample mode (Newton decrement within ``SUB_DECREMENT``)."""
    monkeypatch.setattr(sn, "ONE_OFF_WORK", 10_000, raising=False)
    seen = spy_on_permutations(monkeypatch)
    out = climb(data)
    assert not [a for a in seen if a >= N], f"a permutation of {seen} rows for N={N}"
    m = sn.subsample_rows(N)
    assert out.m == m and out.sample["x"].shape == (m, 3)
    idx = sn.subsample_index(jax.random.key(3), N, m)
    assert idx.size == m and np.all(np.diff(idx) > 0) and 0 <= idx[0] and idx[-1] < N
    assert np.array_equal(np.asarray(out.sample["x"]), np.asarray(data["x"])[idx])
    assert out.ok.all() and all(sn.at_mode(e) for e in out.evals)


def test_short_subsample_unchanged():
    """Up to ``ONE_OFF_WORK`` rows the subsample is ``jax.random.choice`` without replacement, bit for bit (draws kept)."""
    key = jax.random.key(5)
    want = np.sort(np.asarray(jax.random.choice(key, N, (1250,), replace=False)))
    assert np.array_equal(sn.subsample_index(key, N, 1250), want)
    assert np.array_equal(sn.subsample_index(key, 100, 100), np.arange(100))
