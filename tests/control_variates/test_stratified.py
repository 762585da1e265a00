"""The Taylor proxy with an exact stratum: by enumeration of every minibatch of the rest, its estimate of the
log-likelihood difference is unbiased with the finite-population variance of the rest; the minibatch never
draws a stratum row; the exact part is exact; an empty stratum is the plain proxy."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_cauchy import cauchy_rows_data, cauchy_rows_model, mode_and_factor

from minibatch_mcmc.control_variates import plain, taylor_proxy
from minibatch_mcmc.control_variates.base import minibatch_rows
from minibatch_mcmc.control_variates.stratified import StratifiedProxy, stratify
from minibatch_mcmc.data.arrays import slice_rows, take


@functools.lru_cache(maxsize=1)
def _tiny():
    """The model, 15 rows (five of them Cauchy), their indices, the proxy at the mode and the mode (built once)."""
    data, idx = cauchy_rows_data(15, seed=3)
    centre, _ = mode_and_factor(data)
    model = cauchy_rows_model()
    proxy = taylor_proxy(model, data, jnp.asarray(centre, jnp.float32))
    return model, data, idx, proxy, centre


def test_unbiased_with_rest_variance_by_enumeration():
    """Over all C(12, 3) = 220 minibatches of the 12 rows outside a 3-row stratum, ``(N - S) mean + known_sum``
    averages to the full-data difference (to float32 rounding) and its variance is
    ``(N - S)^2 (1 - b / (N - S)) s^2 / b`` with ``s^2`` the rest's residual variance: an estimator scaled by N
    instead of N - S, or drawing from all N rows, is off by a factor 15/12 or more."""
    model, data, idx, proxy, centre = _tiny()
    est = stratify(model, data, proxy, idx[:3])
    assert isinstance(est, StratifiedProxy) and est.population_size(15) == 12
    a, b = jnp.asarray(centre + [0.7, 0.02], jnp.float32), jnp.asarray(centre + [-0.9, -0.03], jnp.float32)
    exact = float(jnp.sum(plain().log_ratio(model, a, b)(data)))
    rest = est.population(jax.tree_util.tree_map(jnp.asarray, data))
    terms = np.asarray(est.log_ratio(model, a, b)(slice_rows(rest, 0, 12)), np.float64)
    known = float(est.known_sum(a, b))
    m = 3
    estimates = np.asarray([12 * terms[list(s)].mean() + known for s in itertools.combinations(range(12), m)])
    np.testing.assert_allclose(estimates.mean(), exact, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(estimates.var(), 12**2 * (1 - m / 12) * terms.var(ddof=1) / m, rtol=1e-6)
    assert abs(terms.sum() + known - exact) < 1e-4  # the split is exact


def test_rest_excludes_the_stratum_rows():
    """``population`` renumbers the rows outside the stratum (in order), and every minibatch drawn from it avoids
    the stratum: the estimator's stratum and the minibatch's population are disjoint and cover all rows."""
    model, data, idx, proxy, _ = _tiny()
    est = stratify(model, data, proxy, idx[[4, 1]])
    rows = {"i": jnp.arange(15)}
    rest = est.population(rows)
    np.testing.assert_array_equal(np.asarray(take(rest, jnp.arange(13))["i"]), np.delete(np.arange(15), idx[[1, 4]]))
    np.testing.assert_array_equal(
        np.asarray(slice_rows(rest, jnp.int32(5), 4)["i"]), np.delete(np.arange(15), idx[[1, 4]])[5:9]
    )
    draws = jax.jit(jax.vmap(lambda k: minibatch_rows(k, rest, 13, 5)["i"]))(jax.random.split(jax.random.key(0), 50))
    for drawn in np.asarray(draws):
        assert not set(drawn) & set(idx[[1, 4]]) and len(set(drawn)) == 5


def test_gradient_estimate_unbiased_over_keys():
    """The minibatch log-likelihood sum (for gradient proposals) is exact for ``batch_size=0`` and, averaged over
    2000 keys, its gradient matches the full-data gradient within 4 Monte Carlo standard errors."""
    model, data, idx, proxy, centre = _tiny()
    est = stratify(model, data, proxy, idx[:3])
    theta = jnp.asarray(centre + [0.5, 0.01], jnp.float32)
    jdata = jax.tree_util.tree_map(jnp.asarray, data)
    full = np.asarray(jax.grad(lambda t: jnp.sum(model.log_lik(t, jdata)))(theta))
    f0, s0 = est.log_lik_sum(model, jax.random.key(0), jdata, 15, 0)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda t: s0 * f0(t))(theta)), full, rtol=1e-5, atol=1e-5)

    def grad_at(key):
        f, s = est.log_lik_sum(model, key, jdata, 15, 4)
        return jax.grad(lambda t: s * f(t))(theta)

    g = np.asarray(jax.jit(jax.vmap(grad_at))(jax.random.split(jax.random.key(1), 2000)), np.float64)
    se = g.std(axis=0) / np.sqrt(g.shape[0])
    assert np.all(np.abs(g.mean(axis=0) - full) <= 4 * se + 1e-5), (g.mean(axis=0), full, se)


def test_empty_stratum_is_the_plain_proxy():
    model, data, _, proxy, _ = _tiny()
    assert stratify(model, data, proxy, []) is proxy


@pytest.mark.slow
def test_out_of_core_source_gives_the_same_draws(tmp_path):
    """(~50 s on a loaded 2-core machine: four compilations.) A memory-mapped source with a stratum (gathered once, the rest read by row) gives the in-memory run's draws
    and decisions exactly, with MHminibatch (minibatch of the rest) and the exact Barker test (a full pass)."""
    from minibatch_mcmc.acceptance import BarkerTest, mh_minibatch
    from minibatch_mcmc.data import open_npz
    from minibatch_mcmc.proposals import random_walk
    from minibatch_mcmc.samplers import sample

    data, idx = cauchy_rows_data(400, seed=5)
    np.savez(tmp_path / "rows.npz", **data)
    host = open_npz(tmp_path / "rows.npz")
    centre, _ = mode_and_factor(data)
    model = cauchy_rows_model()
    start = jnp.asarray(centre, jnp.float32)
    for test in (mh_minibatch(batch_size=20), BarkerTest()):
        runs = []
        for source in (data, host):
            est = stratify(model, source, taylor_proxy(model, source, start), idx)
            res = sample(
                model,
                source,
                start,
                proposal=random_walk(scale=0.3),
                test=test,
                estimator=est,
                num_samples=30,
                key=4,
                progress=False,
            )
            runs.append((np.asarray(res.positions), np.asarray(res.records["batch_size"])))
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert np.all(runs[0][1] == 395)  # the full-data test reads the N - S rows of the rest
