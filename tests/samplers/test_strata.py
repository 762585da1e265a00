"""The stratified estimator of the data-parallel sampler (``samplers.strata``) against float64 enumeration.

Small shards are enumerated exactly: every ordered draw with replacement of ``m_s`` rows from each shard, equally
likely, so the estimator's mean and variance and the mean of its variance estimate are exact averages over the
enumeration, compared with the closed forms of docs/notes-on-the-papers.md ("Stratified minibatches over shards").
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.samplers.strata import allocate, combine, stack, stratum_sums, unstack

U32 = 2.0**-24
SIZES = (3, 4, 2)
DRAWS = (2, 3, 2)


def shards(offset: float) -> list[np.ndarray]:
    """Three shards' terms (fixed, unequal means and spreads) around ``offset``."""
    rng = np.random.default_rng(7)
    return [offset + rng.normal(s, 1.0 + s, n) for s, n in enumerate(SIZES)]


def enumerate_draws(terms: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every shard's every ordered draw and the float32 ``StratumSums`` of each (one compiled function: draws padded to
    the widest shard's and masked), summed over the shards per combination: the estimate and the variance estimate."""
    width = max(DRAWS)
    vals, valid, sizes, counts, owner = [], [], [], [], []
    for s, (t, n, m) in enumerate(zip(terms, SIZES, DRAWS)):
        idx = np.asarray(list(itertools.product(range(n), repeat=m)))  # (n^m, m)
        vals.append(np.pad(t[idx], ((0, 0), (0, width - m))))
        valid.append(np.arange(width)[None, :].repeat(len(idx), 0) < m)
        sizes += [n] * len(idx)
        counts += [m] * len(idx)
        owner += [s] * len(idx)
    f = jax.jit(jax.vmap(lambda v, ok, n, m: stack(stratum_sums(v, ok, n, m))))
    out = np.asarray(
        f(
            jnp.asarray(np.concatenate(vals), jnp.float32),
            jnp.asarray(np.concatenate(valid)),
            jnp.asarray(sizes),
            jnp.asarray(counts),
        ),
        np.float64,
    )
    per = [out[np.asarray(owner) == s] for s in range(len(SIZES))]
    grids = np.meshgrid(*[np.arange(len(p)) for p in per], indexing="ij")
    summed = sum(p[g.reshape(-1)] for p, g in zip(per, grids))
    return summed[:, 0], summed[:, 1]


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_estimator_unbiased_with_the_derived_variance(offset):
    """Over all 2,304 equally likely draws: ``E T = sum_i r_i``, ``Var T = sum_s N_s^2 sigma_s^2 / m_s`` (population
    variance, denominator ``N_s``) and ``E V = Var T``, in float64 from the terms themselves. Would catch a shard
    weighted by ``N / m`` instead of ``N_s / m_s``, a variance with the wrong denominator (``m_s`` for ``m_s - 1``:
    ``E V`` off by a factor 2/3 to 1/2 here), a missing ``N_s^2``, and (offset 1e4) a variance computed from raw
    float32 powers, which cancels to noise; tolerances are float32 rounding of terms of size ``|offset| + 10``."""
    terms = shards(offset)
    est, var_hat = enumerate_draws(terms)
    r = [np.asarray(t, np.float32).astype(np.float64) for t in terms]  # the values the estimator sees
    exact_sum = sum(t.sum() for t in r)
    exact_var = sum(n * n * t.var() / m for t, n, m in zip(r, SIZES, DRAWS))
    scale = sum(n * (np.abs(t).max()) for t, n in zip(r, SIZES))
    assert abs(est.mean() - exact_sum) <= 16 * U32 * scale
    spread = sum(n * np.abs(t - t.mean()).max() for t, n in zip(r, SIZES))
    assert est.var() == pytest.approx(exact_var, rel=1e-9, abs=64 * U32 * scale * spread)
    assert var_hat.mean() == pytest.approx(exact_var, rel=1e-4, abs=64 * U32 * scale * spread)


def test_each_draw_reduced_as_in_float64():
    """Per combination, the float32 ``StratumSums`` of a shard equal the float64 formulas (``N_s`` times the mean,
    ``N_s^2 v_s / m_s``, ``that^2 / (m_s - 1)``) to float32 rounding, far from zero and near it."""
    for offset in (0.0, 1e4):
        t = np.asarray(shards(offset)[1], np.float32)
        idx = np.asarray(list(itertools.product(range(4), repeat=3)))
        got = np.asarray(
            jax.vmap(lambda v: stack(stratum_sums(v, jnp.ones(3, bool), jnp.asarray(4), jnp.asarray(3))))(
                jnp.asarray(t[idx])
            ),
            np.float64,
        )
        x = t[idx].astype(np.float64)
        a = 16 * x.var(axis=1, ddof=1) / 3
        want = np.stack([4 * x.mean(axis=1), a, a * a / 2, np.zeros(len(x))], axis=1)
        tol = 32 * U32 * np.array([4 * np.abs(x).max(), 16 * np.abs(x).max() * 10, 0, 0])
        tol[2] = 2 * tol[1] * np.abs(a).max() / 2 + 1e-30
        assert np.all(np.abs(got - want) <= tol + 1e-6 * np.abs(want)), np.abs(got - want).max(axis=0)


def test_padding_and_nonfinite_terms():
    """Draws beyond ``count`` (padding) do not enter; a non-finite drawn term sets ``bad``, one in the padding does not."""
    v = jnp.asarray([1.0, 3.0, 5.0, jnp.nan])
    valid = jnp.asarray([True, True, True, False])
    sums = jax.jit(stratum_sums)  # one compilation, not one per operation
    s = sums(v, valid, jnp.asarray(10), jnp.asarray(3))
    np.testing.assert_allclose([s.total, s.variance, s.bad], [10 * 3.0, 100 * 4.0 / 3, 0.0], rtol=1e-6)
    assert float(sums(v, jnp.ones(4, bool), jnp.asarray(10), jnp.asarray(4)).bad) == 1.0


def test_combine_satterthwaite():
    """``combine``: the summed estimate, the summed variance and ``nu = V^2 / sum a_s^2 / (m_s - 1)``: ``m - 1`` for
    one shard, ``m - S`` for ``S`` alike shards; infinite for a zero variance (the penalty vanishes)."""
    one = np.asarray([5.0, 2.0, 4.0 / 9, 0.0], np.float32)  # a = 2, m = 10
    run = jax.jit(lambda v: combine(unstack(v)))
    assert float(run(one)[2]) == pytest.approx(9.0)
    total, var, dof = run(one + one)  # two alike shards of 10 draws: nu = 18
    assert (float(total), float(var), float(dof)) == pytest.approx((10.0, 4.0, 18.0))
    assert np.isinf(float(run(np.asarray([1.0, 0.0, 0.0, 0.0], np.float32))[2]))


def test_allocate():
    """Proportional shares by largest remainders, at least 2 each, summing to ``m``; too small an ``m`` is refused."""
    assert allocate(np.array([500, 500]), 200).tolist() == [100, 100]
    assert allocate(np.array([1, 1, 998]), 20).tolist() == [2, 2, 16]
    got = allocate(np.array([333, 333, 334]), 100)
    assert got.sum() == 100 and got.tolist() == [33, 33, 34]
    with pytest.raises(ValueError, match="batch_size=5 is below 2 rows for each of the 3 shards"):
        allocate(np.array([10, 10, 10]), 5)


def test_sample_data_parallel_refuses_what_it_cannot_run():
    """One clear error each, before anything compiles: a gradient proposal (its minibatch would be read outside the
    stratified draws), an estimator drawing from other rows than the ``N`` (an exact stratum), a minibatch below 2 rows
    a shard."""
    from minibatch_mcmc import langevin, random_walk, sample_data_parallel, stratify, taylor_proxy
    from minibatch_mcmc.models import gaussian_mean

    x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    model, start = gaussian_mean(), np.zeros(2, np.float32)
    run = dict(batch_size=10, num_samples=2)
    with pytest.raises(ValueError, match="gradient-free proposal"):
        sample_data_parallel(model, x, start, proposal=langevin(step_size=0.1, batch_size=10), **run)
    proxy = stratify(model, x, taylor_proxy(model, x, jnp.zeros(2)), np.asarray([0, 1]))
    with pytest.raises(ValueError, match="draws its minibatch from 38 rows, not the N=40 rows"):
        sample_data_parallel(model, x, start, proposal=random_walk(0.1), estimator=proxy, **run)
    with pytest.raises(ValueError, match="batch_size=1"):
        sample_data_parallel(model, x, start, proposal=random_walk(0.1), batch_size=1, num_samples=2)
