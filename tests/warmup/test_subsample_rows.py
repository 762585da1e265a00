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
    return sn.climb_all(
        logistic_regression(10.0), data, N, np.zeros((2, 3)), unravel, jax.random.key(3), 1.0, flat.dtype
    )


def test_tall_subsample_permutes_no_population(monkeypatch, data):
    """From ``KEYED_ROWS`` rows (lowered here to 10^4 so N = 4e4 is past it) the climb draws its m distinct sorted rows
    without a ``choice``/``permutation`` over all N (the old code called ``jax.random.choice(key, N, ...)``: this fails on
    it), and still climbs from both starts to the subsample mode (Newton decrement within ``SUB_DECREMENT``)."""
    monkeypatch.setattr(sn, "KEYED_ROWS", 10_000)
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
    """Below ``KEYED_ROWS`` rows the subsample is ``jax.random.choice`` without replacement, bit for bit (draws kept)."""
    key = jax.random.key(5)
    want = np.sort(np.asarray(jax.random.choice(key, N, (1250,), replace=False)))
    assert np.array_equal(sn.subsample_index(key, N, 1250), want)
    assert np.array_equal(sn.subsample_index(key, 100, 100), np.arange(100))


def test_a_million_rows_need_no_permutation_of_n(monkeypatch):
    """At ``N = 10^6`` (``KEYED_ROWS``) neither the subsample nor the influence probes' bulk rows permute all ``N``: both are
    the head of the keyed bijection, distinct, sorted, in range and spread over the rows. Before, both permuted every row
    up to 10^7 rows (``ONE_OFF_WORK``): about 20 CPU s each at 10^7 in the tall benchmark's fit, 1.5 s each at 10^6."""
    from minibatch_mcmc.control_variates import influence

    def refuse(key, a, *args, **kwargs):
        raise AssertionError(f"a choice from / permutation of {a} rows")

    for name in ("choice", "permutation"):
        monkeypatch.setattr(jax.random, name, refuse)
    n = 1_000_000
    for rows in (
        sn.subsample_index(jax.random.key(3), n, sn.subsample_rows(n)),
        influence.probe_plan(np.eye(3), jax.random.key(4), n, 2048)[1],
    ):
        assert np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < n and rows[-1] - rows[0] > n // 2, rows
    assert sn.subsample_index(jax.random.key(3), n, sn.subsample_rows(n)).size == sn.subsample_rows(n)


def test_subsample_rows_stop_growing_with_n():
    """The subsample is ``N / 32`` rows up to ``2^20`` (so every fit up to 3.3e7 rows draws what it drew) and no more past
    it: at 10^8 rows it held 3.1e6 rows, and the climb's peak resident memory was 334 MiB above that at 10^7 (measured
    on a sparse 10^8-row ``.npy``). Catches a subsample that still grows with ``N``."""
    assert sn.subsample_rows(10**7) == 10**7 // 32 and sn.subsample_rows(2**25) == 2**20
    assert sn.subsample_rows(10**8) == sn.subsample_rows(10**9) == 2**20


def test_evaluator_memory_does_not_grow_with_the_subsample():
    """The compiled subsample evaluator's scratch memory (XLA's ``memory_analysis``) is the same for 2^18 rows as for 2^17:
    past ``EVAL_ROWS`` rows it sums blocks. Before, it held points x d x rows floats at once (118 MiB at 2^18 rows and 9
    points, 1.4 GB at the 3.1e6-row subsample of 10^8 rows: the fit's peak went from 955 MiB at 10^7 to over 2.2 GB)."""
    _, unravel = start_point(jnp.zeros(10))
    fn = sn.evaluator(logistic_regression(10.0), unravel, 1.0, 32.0)

    def scratch(m: int) -> int:
        rows = {"x": jax.ShapeDtypeStruct((m, 10), jnp.float32), "y": jax.ShapeDtypeStruct((m,), jnp.int32)}
        return fn.lower(jax.ShapeDtypeStruct((9, 10), jnp.float32), rows).compile().memory_analysis().temp_size_in_bytes

    assert scratch(1 << 18) <= scratch(1 << 17) * 1.05


def test_blocked_evaluation_matches_one_block(monkeypatch, data):
    """Summed over blocks (``EVAL_ROWS`` lowered to 3000, 40000 rows: 13 blocks and a remainder), the values, gradients and
    Hessians equal the single-block evaluation to float32 rounding of sums of 4e4 terms (relative 1e-4)."""
    _, unravel = start_point(jnp.zeros(3))
    points = jnp.asarray(np.random.default_rng(2).normal(0, 0.3, (2, 3)), jnp.float32)
    want = sn.evaluator(logistic_regression(10.0), unravel, 1.0, 2.0)(points, data)
    monkeypatch.setattr(sn, "EVAL_ROWS", 3000)
    got = sn.evaluator(logistic_regression(10.0), unravel, 1.0, 2.0)(points, data)
    for w, g in zip(want, got):
        np.testing.assert_allclose(
            np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4 * float(np.abs(np.asarray(w)).max())
        )
