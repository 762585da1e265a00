"""Importance-sampled minibatches (``control_variates.importance``): by enumeration of every minibatch of the repeated
population, the estimate is unbiased for the full residual sum with the Hansen-Hurwitz variance (float64 from the
rows' residuals), and the tests' variance estimate is unbiased for it; equal weights are today's uniform estimator;
on five Cauchy rows among 5,000 the penalty test's acceptance with the weights is within 0.02 of the exact float64
``min(1, e^Delta)`` where uniform rows are off by 0.09."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_cauchy import PRIOR_SCALE, cauchy_rows_data, cauchy_rows_model, mode_and_factor

from minibatch_mcmc.acceptance import penalty_test
from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.control_variates.importance import (
    ImportanceProxy,
    copies_for,
    hansen_hurwitz_variance,
    importance_sample,
    probe_weights,
)
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.data.arrays import COPIES, slice_rows


@functools.lru_cache(maxsize=2)
def _case(n: int):
    """The five-Cauchy-rows model on ``n`` rows, its Taylor proxy at the float64 mode, the mode and the Laplace factor."""
    data, idx = cauchy_rows_data(n, seed=3)
    centre, factor = mode_and_factor(data)
    model = cauchy_rows_model()
    return model, data, idx, taylor_proxy(model, data, jnp.asarray(centre, jnp.float32)), centre, factor


def _exact_log_ratio(data: dict, a: np.ndarray, b: np.ndarray) -> float:
    """``sum_i l_i(b) - l_i(a)`` in float64 numpy, independently of the library."""
    x, c = np.asarray(data["x"], np.float64), np.asarray(data["cauchy"]) > 0

    def ll(t):
        return np.where(c, -np.log1p((x - t[0]) ** 2) - np.log(np.pi), -0.5 * (x - t[1]) ** 2 - 0.5 * np.log(2 * np.pi))

    return float(ll(b).sum() - ll(a).sum())


def test_copies_limits():
    """Equal weights give one copy per row (uniform sampling); zero weights too; a heavy weight gets copies in proportion
    while every row keeps one, and ``M <= budget N``."""
    np.testing.assert_array_equal(copies_for(np.full(7, 3.5)), np.ones(7))
    np.testing.assert_array_equal(copies_for(np.zeros(4)), np.ones(4))
    n = copies_for(np.array([1.0, 1.0, 1.0, 1.0, 100.0]), budget=4)
    assert n.min() == 1 and n.sum() <= 20 and n[-1] >= 15
    with pytest.raises(ValueError, match="weights"):
        copies_for(np.array([1.0, -1.0]))


def test_unbiased_with_hansen_hurwitz_variance_by_enumeration():
    """Over all C(M, 3) minibatches of the repeated population (a 3-row exact stratum, the 12 other rows weighted by their
    probe residuals), ``M mean(y) + known_sum`` averages to the float64 full-data difference, its variance equals
    ``(M - m)/(M - 1) (sum r_i^2 / p_i - T^2) / m`` computed from the rows' own residuals, and the tests' estimate
    ``M^2 (1 - m/M) s_y^2 / m`` averages to that variance. Scaling by N instead of M, or forgetting the 1/n_i, is off by
    a factor of M/N or more."""
    model, data, idx, proxy, centre, factor = _case(15)
    base = stratify(model, data, proxy, idx[:3])
    rest_rows = base.population(jax.tree_util.tree_map(jnp.asarray, data))
    weights = probe_weights(model, base, data, jnp.asarray(centre, jnp.float32), factor, jax.random.key(0)).weights
    est = importance_sample(base, data, weights, budget=2)
    assert isinstance(est, ImportanceProxy)
    copies = np.diff(np.concatenate([[0], np.asarray(est.ends)]))
    size = est.population_size(15)
    assert size == copies.sum() and 12 < size <= 24 and copies.max() > 1
    a, b = np.asarray(centre) + [0.7, 0.02], np.asarray(centre) + [-0.9, -0.03]
    a32, b32 = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    r = np.asarray(base.log_ratio(model, a32, b32)(slice_rows(rest_rows, 0, 12)), np.float64)  # the rows' residuals
    rows = slice_rows(est.population(jax.tree_util.tree_map(jnp.asarray, data)), 0, size)
    np.testing.assert_array_equal(np.asarray(rows[COPIES]), np.repeat(copies, copies))
    y = np.asarray(est.log_ratio(model, a32, b32)(rows), np.float64)
    known = float(est.known_sum(a32, b32))
    m = 3
    subsets = np.asarray(list(itertools.combinations(range(size), m)))
    estimates = size * y[subsets].mean(axis=1) + known
    variance_estimates = size**2 * (1 - m / size) * y[subsets].var(axis=1, ddof=1) / m
    exact = _exact_log_ratio(data, a, b)
    np.testing.assert_allclose(estimates.mean(), exact, rtol=1e-5, atol=2e-4)
    formula = hansen_hurwitz_variance(r, copies, m)
    np.testing.assert_allclose(estimates.var(), formula, rtol=1e-5)
    np.testing.assert_allclose(variance_estimates.mean(), formula, rtol=1e-5)


def test_equal_weights_return_the_estimator_itself():
    """Equal weights (any value) leave the estimator unwrapped: uniform rows, today's draws by construction."""
    model, data, _, proxy, _, _ = _case(15)
    assert importance_sample(proxy, data, np.full(15, 0.3)) is proxy
    assert importance_sample(proxy, data, np.full(15, 7.0), budget=2) is proxy


@pytest.mark.slow
def test_equal_copies_give_uniform_draws():
    """(~15 s, compile-bound.) The repeated population with one copy per row decides as the uniform estimator does, key
    for key (same rows, same terms to rounding)."""
    model, data, _, proxy, centre, factor = _case(400)
    ones = ImportanceProxy(inner=proxy, ends=jnp.arange(1, 401, dtype=jnp.int32), size=400)
    rng = np.random.default_rng(1)
    a, b = (jnp.asarray(centre + factor @ rng.standard_normal(2), jnp.float32) for _ in range(2))
    djax = jax.tree_util.tree_map(jnp.asarray, data)
    test, keys = penalty_test(batch_size=20), jax.random.split(jax.random.key(3), 128)
    outs = []
    for e in (proxy, ones):
        st = Statistics(
            e.log_ratio(model, a, b),
            e.population(djax),
            e.population_size(400),
            jnp.float32(0.0),
            jnp.float32(1.0),
            e.known_sum(a, b),
        )
        outs.append(jax.jit(jax.vmap(lambda k, st=st: test.decide(k, st)))(keys))
    np.testing.assert_array_equal(np.asarray(outs[0].accepted), np.asarray(outs[1].accepted))
    np.testing.assert_array_equal(np.asarray(outs[0].batch_size), np.asarray(outs[1].batch_size))
    np.testing.assert_allclose(np.asarray(outs[0].delta_star), np.asarray(outs[1].delta_star), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_penalty_acceptance_error_with_weights():
    """Five Cauchy rows among 5,000, a Laplace-drawn move with ``Delta = -1.06``: over 20,000 keys the penalty test on
    uniform rows accepts 0.09 below the exact float64 ``min(1, e^Delta)`` (its 50-row minibatch mostly misses the Cauchy
    rows), and on rows drawn by their probe weights within 0.02 + 4 MC s.e. of it, reading fewer rows."""
    model, data, _, proxy, centre, factor = _case(5000)
    weights = probe_weights(model, proxy, data, jnp.asarray(centre, jnp.float32), factor, jax.random.key(1))
    assert weights.variance_ratio < 0.01
    est = importance_sample(proxy, data, weights.weights)
    rng = np.random.default_rng(4)
    a, b = centre + factor @ rng.standard_normal(2), centre + factor @ rng.standard_normal(2)
    psi = -0.5 * float(np.sum(b**2) - np.sum(a**2)) / PRIOR_SCALE**2
    exact = min(1.0, float(np.exp(_exact_log_ratio(data, a, b) + psi)))
    assert 0.2 < exact < 0.5
    a32, b32, djax = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), jax.tree_util.tree_map(jnp.asarray, data)
    test, keys = penalty_test(batch_size=50), jax.random.split(jax.random.key(0), 20_000)
    found = {}
    for e in (proxy, est):
        st = Statistics(
            e.log_ratio(model, a32, b32),
            e.population(djax),
            e.population_size(5000),
            jnp.float32(psi),
            jnp.float32(1.0),
            e.known_sum(a32, b32),
        )
        out = jax.jit(jax.vmap(lambda k, st=st: test.decide(k, st)))(keys)
        found[e.name] = (float(np.mean(out.accepted)), float(np.mean(out.batch_size)))
    se = np.sqrt(exact * (1 - exact) / keys.shape[0])
    assert found["taylor"][0] < exact - 0.05
    assert abs(found[est.name][0] - exact) < 0.02 + 4 * se
    assert found[est.name][1] < found["taylor"][1]


def test_warmup_rule_weights_only_where_they_help():
    """``estimator_for`` (the warm-up's choice) with an influence search that left three Cauchy rows of 5,000 to the
    minibatch: the rows' probe weights cut the held-out variance below ``HELPS`` and the uniform 50-row s.d. is above
    ``NOISE_FLOOR``, so the minibatch is drawn by weight (recorded in the estimator's name and variance ratio); with no
    rows found the proxy itself comes back (no weights pass, today's draws), and on the Gaussian rows alone (the five
    Cauchy rows in the stratum) the weights do not pay and the stratified proxy itself comes back."""
    from minibatch_mcmc.acceptance import penalty_test
    from minibatch_mcmc.control_variates.importance import HELPS, NOISE_FLOOR, probe_weights
    from minibatch_mcmc.control_variates.influence import Influence
    from minibatch_mcmc.control_variates.stratified import StratifiedProxy
    from minibatch_mcmc.data.arrays import as_data_source
    from minibatch_mcmc.warmup.exact_choice import estimator_for

    model, data, idx, proxy, centre, factor = _case(5000)
    source = as_data_source(data)

    def found(rows):
        return Influence(np.asarray(rows, np.int32), np.ones(len(rows)), 0.0, 100, 1, 5000, 0.0)

    assert estimator_for(penalty_test(), model, source, proxy, factor, found([])) is proxy
    weighted = estimator_for(penalty_test(), model, source, proxy, factor, found(idx[:2]))
    assert isinstance(weighted, ImportanceProxy) and weighted.name == "taylor+stratum+importance"
    assert weighted.variance_ratio <= HELPS
    rest = stratify(model, data, proxy, idx[:2])
    probe = probe_weights(model, rest, data, jnp.asarray(centre, jnp.float32), factor, jax.random.key(0))
    assert np.sqrt(probe.uniform_variance / 50) > NOISE_FLOOR
    plain_rows = estimator_for(penalty_test(), model, source, proxy, factor, found(idx))
    assert isinstance(plain_rows, StratifiedProxy)


def test_out_of_core_source_reads_the_same_positions(tmp_path):
    """From a memory-mapped ``.npz`` (``open_npz``: rows gathered on the host by index) the weights pass gives the same
    weights as in memory, and the repeated population's positions gather the same rows, counts and terms: the table is
    built in the pass and the minibatch is read by index."""
    from minibatch_mcmc.data.arrays import take
    from minibatch_mcmc.data.memmap import open_npz

    model, data, _, proxy, centre, factor = _case(2000)
    np.savez(tmp_path / "rows.npz", **data)
    source = open_npz(tmp_path / "rows.npz")
    key, c32 = jax.random.key(1), jnp.asarray(centre, jnp.float32)
    w_mem = probe_weights(model, proxy, data, c32, factor, key).weights
    w_disk = probe_weights(model, proxy, source, c32, factor, key).weights
    np.testing.assert_allclose(w_disk, w_mem, rtol=1e-6)
    est = importance_sample(proxy, source, w_disk)
    idx = jnp.asarray(np.random.default_rng(0).integers(0, est.size, 64), jnp.int32)
    on_disk = take(est.population(source.arrays()), idx)
    in_memory = take(est.population(jax.tree_util.tree_map(jnp.asarray, data)), idx)
    for k in in_memory:
        np.testing.assert_array_equal(np.asarray(on_disk[k]), np.asarray(in_memory[k]))
    a, b = c32 + 0.1, c32 - 0.1
    np.testing.assert_allclose(
        np.asarray(est.log_ratio(model, a, b)(on_disk)), np.asarray(est.log_ratio(model, a, b)(in_memory)), rtol=1e-6
    )


def test_glm_bound_weights_stream_the_row_weights():
    """``bound_weights`` of a GLM proxy streams ``row_weights`` over every row (chunks of 700 over 2,000: the overlapping
    last chunk included), and a feature set in five rows, whose ``|W' x_i|`` is far above the others' under the Laplace
    whitening, gets them the most copies, each row keeping at least one."""
    from minibatch_mcmc.control_variates.glm import glm_proxy
    from minibatch_mcmc.control_variates.importance import bound_weights

    rng = np.random.default_rng(0)
    n = 2000
    rare = np.zeros(n, np.float32)
    rare[[3, 400, 999, 1500, 1998]] = 1.0
    x = np.column_stack([np.ones(n), rng.standard_normal(n), rare]).astype(np.float32)
    data = {"x": x, "y": (rng.random(n) < 0.5).astype(np.int32)}
    whiten = np.linalg.cholesky(np.linalg.inv(x.astype(np.float64).T @ x / 4 + np.eye(3) / 25))
    proxy = glm_proxy(data, np.zeros(3, np.float32), "logistic", whiten=whiten, alias=False)
    w = bound_weights(proxy, data, chunk=700)
    np.testing.assert_allclose(w, np.asarray(proxy.row_weights(data), np.float64), rtol=1e-6)
    copies = copies_for(w)
    assert set(np.argsort(-copies)[:5]) == {3, 400, 999, 1500, 1998} and copies.min() == 1


def test_proxy_check_counts_the_stratum_under_importance_weights():
    """The post-sampling check's ``stratum_rows`` is ``N`` less the distinct rows the minibatch draws from: 3 for a
    3-row stratum under importance weights, 0 without a stratum. Taking ``N - M`` (``M``, the repeated population's size,
    exceeds ``N``) gave a negative count and said no stratum was there."""
    from minibatch_mcmc.diagnostics.proxy_check import check_proxy

    model, data, idx, proxy, centre, factor = _case(15)
    draws = jnp.asarray(centre, jnp.float32) + 0.01 * jax.random.normal(jax.random.key(4), (2, 20, 2))
    for base, rows in ((stratify(model, data, proxy, idx[:3]), 3), (proxy, 0)):
        weights = probe_weights(model, base, data, jnp.asarray(centre, jnp.float32), factor, jax.random.key(0)).weights
        est = importance_sample(base, data, weights, budget=2)
        assert isinstance(est, ImportanceProxy) and est.population_size(15) > 15 - rows
        out = check_proxy(model, data, est, proxy.centre, draws, num_draws=10, warn=False)
        assert out.stratum_rows == rows and out.stratum == (rows > 0), out
