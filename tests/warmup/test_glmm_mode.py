"""warmup.glmm_mode: a GLMM's mode from Newton steps on its proxy in predictor space, in few passes over N, against the
mode found by full-data Newton with jax.hessian in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.control_variates.glmm import glmm_proxy
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models.glmm import GLMMPrior, glmm_model, initial_theta
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor
from minibatch_mcmc.warmup.centre import find_centre
from minibatch_mcmc.warmup.glmm_climb import PROXY_STEP, at_mode, coordinate_steps, evaluate, near_mode, polish
from minibatch_mcmc.warmup.glmm_mode import glmm_mode, surrogate


def logistic_groups(n: int, levels: int, seed: int = 0):
    """A logistic GLMM (3 fixed effects, ``levels`` equal groups, intercept s.d. 0.5, centring chosen per level) and its data."""
    rng = np.random.default_rng(seed)
    g = rng.permutation(np.repeat(np.arange(levels), n // levels))
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    eta = x @ np.array([-0.5, 0.5, -0.3]) + rng.normal(0.0, 0.5, levels)[g]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    design = GLMMDesign(
        y=y,
        x=x,
        fixed=("Intercept", "x1", "x2"),
        factors=(GroupFactor("g", g, np.ones((n, 1)), tuple(range(levels)), ("1",)),),
    )
    return glmm_model(design, "bernoulli")


def float64_mode(model, data, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mode and Laplace covariance by full-data Newton steps (jax.hessian, float64) from ``start``."""
    with jax.enable_x64(True):
        arrays = {k: jnp.asarray(v, jnp.float64 if v.dtype == np.float32 else v.dtype) for k, v in data.items()}
        log_post = jax.jit(lambda t: model.log_prior(t) + jnp.sum(model.log_lik(t, arrays)))
        grad, hess = jax.jit(jax.grad(log_post)), jax.jit(jax.hessian(log_post))
        theta = jnp.asarray(start, jnp.float64)
        for _ in range(8):
            theta = theta - jnp.linalg.solve(hess(theta), grad(theta))
        return np.asarray(theta), np.linalg.inv(-np.asarray(hess(theta)))


@pytest.mark.slow
def test_glmm_mode_in_few_passes():
    """N = 60,000 rows in 50 groups: the mode, the proxy and the influence search together read at most 3 passes over N
    (two full passes, the second also the proxy's and the influence's first round, and the subsample's share; main's
    lean search read Adam's rows, the subsample climb, dense Newton passes, then a proxy pass and an influence pass of
    their own: over 5), and the mode is within 0.25 Laplace s.d.s of the float64 full-data Newton mode in every
    coordinate (a search stopped at the subsample's mode, several s.d.s per coordinate off, fails), its Laplace s.d.s
    within 5% of the float64 Hessian's."""
    model, data = logistic_groups(60_000, 50)
    centre = find_centre(
        model,
        as_data_source(data),
        initial_theta(model),
        jax.random.PRNGKey(0),
        jax.random.PRNGKey(1),
        temperature=1.0,
        order=2,
        newton_steps=10,
        num_starts=8,
        stratum=True,
    )
    passes = sum(c.passes for c in centre.cost.values())
    assert passes <= 3.0, centre.cost
    assert centre.cost["influence"].passes == 0.0, centre.cost  # its first round read by the mode's last pass
    mode, cov = float64_mode(model, data, np.asarray(centre.theta_hat, np.float64))
    off = np.abs(np.asarray(centre.theta_hat, np.float64) - mode) / np.sqrt(np.diag(cov))
    assert np.max(off) <= 0.25, np.max(off)
    np.testing.assert_allclose(np.sqrt(np.diag(centre.covariance)), np.sqrt(np.diag(cov)), rtol=0.05)


def unequal_groups(n: int, seed: int = 0):
    """Issue 31's shape, small: a logistic GLMM with 16 group intercepts of s.d. 0.3 on groups of very unequal size (the
    largest about 100 times the smallest), 3 fixed effects, a half-normal prior on the s.d., centring per level."""
    rng = np.random.default_rng(seed)
    w = 100.0 ** (-np.arange(16) / 15)
    sizes = np.maximum(np.round(w / w.sum() * n).astype(int), 1)
    sizes[0] += n - sizes.sum()
    g = rng.permutation(np.repeat(np.arange(16), sizes))
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    eta = x @ np.array([-1.0, 0.3, -0.2]) + rng.normal(0.0, 0.3, 16)[g]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    factor = GroupFactor("g", g, np.ones((n, 1)), tuple(range(16)), ("1",))
    design = GLMMDesign(y=y, x=x, fixed=("Intercept", "x1", "x2"), factors=(factor,))
    return glmm_model(design, "bernoulli", prior=GLMMPrior(sd="half_normal", sd_scale=1.0))


@pytest.mark.slow
def test_two_full_passes_then_the_mode_from_the_surrogate():
    """16 groups of very unequal size, N = 30,000: two full passes (the second one's point lands within
    ``PROXY_STEP`` but not ``COORDINATE_STEP`` Laplace s.d.s of the mode; the search before took a third pass for it), and
    the mode, the data-free climb's end on the last pass's surrogate, within 0.05 Laplace s.d.s of the float64 full-data
    Newton mode in every coordinate (a search that stopped at the last pass's point, up to 0.5 s.d.s off, fails), its
    Laplace s.d.s within 5% of the float64 Hessian's (the proxy posterior's curvature at its mode, not the data's there)."""
    model, data = unequal_groups(30_000)
    found = glmm_mode(model, as_data_source(data), initial_theta(model), jax.random.key(0))
    assert found.passes == 2, found.passes
    assert found.mode.converged
    mode, cov = float64_mode(model, data, np.asarray(found.mode.theta_hat, np.float64))
    sd = np.sqrt(np.diag(cov))
    assert np.max(np.abs(np.asarray(found.mode.theta_hat, np.float64) - mode) / sd) <= 0.05
    off = np.max(np.abs(np.asarray(found.proxy.centre, np.float64) - mode) / sd)
    assert off <= PROXY_STEP + 0.05, off  # the proxy's centre: the last pass's point
    got = np.sqrt(np.diag(np.linalg.inv(-found.mode.hessian)))
    np.testing.assert_allclose(got, sd, rtol=0.05)


def test_one_pass_surrogate_climbs_to_the_mode():
    """From a point 0.4 Laplace s.d.s off the float64 mode in every coordinate (past ``COORDINATE_STEP``, within
    ``PROXY_STEP``), the data-free climb on the one GLMM proxy built there (``polish``) ends within 0.05 s.d.s of the mode
    found by float64 Newton on all rows, and its Laplace s.d.s within 2% of the float64 Hessian's: the third full pass the
    search took before buys nothing that the surrogate does not give. Fails if the climb stops short (a point left 0.4
    s.d.s out) or climbs a wrong surrogate (a missing prior term or a mis-scaled sum moves the end by more)."""
    model, data = logistic_groups(6_000, 12)
    mode, cov = float64_mode(model, data, np.r_[-0.5, 0.5, -0.3, np.zeros(12), np.log(0.5)])  # the simulation's values
    sd = np.sqrt(np.diag(cov))
    x = np.asarray(np.asarray(mode + 0.4 * sd * np.where(np.arange(mode.size) % 2, 1.0, -1.0), np.float32), np.float64)
    proxy = glmm_proxy(model, data, jnp.asarray(x, jnp.float32))
    fn = surrogate(model, proxy, 1.0)
    _, g, h = evaluate(fn, proxy, x, jnp.float32, 1.0)
    assert not at_mode(g, h) and near_mode(g, h), coordinate_steps(g, h)
    end, (_, _, h_end) = polish(fn, proxy, x, g, h, jnp.float32, 1.0)
    assert np.max(np.abs(end - mode) / sd) <= 0.05, np.abs(end - mode) / sd
    np.testing.assert_allclose(np.sqrt(np.diag(np.linalg.inv(-h_end))), sd, rtol=0.02)


def test_coordinate_steps_against_the_dense_inverse():
    """``coordinate_steps`` (from the Cholesky factor of ``-H``) equals ``max |C g| / sqrt(diag C)`` with ``C = (-H)^{-1}``
    from numpy's dense inverse, on an arrow-shaped ``-H`` (``d = 60``); inf where ``-H`` is indefinite. Catches a
    variance taken from the rows of ``L^{-1}`` instead of its columns, or a step without the second solve."""
    rng = np.random.default_rng(5)
    d, p = 60, 3
    neg = np.diag(rng.uniform(2.0, 50.0, d))
    cross = rng.normal(0.0, 0.5, (d - p, p))
    neg[: d - p, d - p :], neg[d - p :, : d - p] = cross, cross.T
    neg[d - p :, d - p :] += 200.0 * np.eye(p)
    g = rng.normal(0.0, 3.0, d)
    cov = np.linalg.inv(neg)
    want = np.max(np.abs(cov @ g) / np.sqrt(np.diag(cov)))
    assert abs(coordinate_steps(g, -neg) - want) <= 1e-10 * want
    neg[0, 0] = -1.0
    assert coordinate_steps(g, -neg) == float("inf")


def test_a_climb_factors_its_start_hessian_once(monkeypatch):
    """``climb`` measures every trial from its start in the start's metric: with an indefinite start Hessian (the
    eigenbasis route) it factors that Hessian once, not once per trial (issue 31: the subsample climb from
    ``initial_theta`` at ``d = 1004`` spent tens of minutes in these repeated ``eigh`` calls). A 2-d concave quadratic
    ``f(x) = -x'Ax/2 + b'x`` read with the indefinite start: ``eigh`` calls counted. Fails on the per-trial code."""
    import minibatch_mcmc.optim.trust_region as tr
    from minibatch_mcmc.warmup.glmm_climb import climb

    a, b = np.array([[3.0, 0.5], [0.5, 1.0]]), np.array([1.0, -2.0])
    indefinite = np.array([[-3.0, 0.0], [0.0, 1.0]])

    def fn(x, arrays):
        x = np.asarray(x, np.float64)
        h = indefinite if np.allclose(x, 5.0) else -a
        evaluations.append(1)
        return -0.5 * x @ a @ x + b @ x, b - a @ x, h

    calls, evaluations = [], []
    eigh = np.linalg.eigh
    monkeypatch.setattr(tr.np.linalg, "eigh", lambda m: calls.append(1) or eigh(m))
    end, _, _ = climb(fn, {}, np.array([5.0, 5.0]), 100.0, jnp.float64)
    np.testing.assert_allclose(end, np.linalg.solve(a, b), atol=1e-6)
    assert len(calls) < len(evaluations), (len(calls), len(evaluations))  # per trial before: 2 or 3


@pytest.mark.slow
def test_no_dense_factorisation_with_many_groups(monkeypatch):
    """Issue 31: with many groups (150 levels of 200 rows, ``d = 155``) the mode search's Cholesky factors, solves and
    Laplace variances are those of the Hessian's level blocks and its Schur complement over the globals
    (``optim.arrow_trust``): numpy's and scipy's ``cholesky``, ``inv``, ``solve`` and ``solve_triangular`` are refused on
    any matrix larger than 16 x 16 (the ``|H|`` eigenbasis at non-concave points is still dense), and the search still
    ends at a converged mode within 0.25 Laplace s.d.s of the float64 full-data Newton mode in every coordinate. Fails on
    the code before (its dense Cholesky of ``-H`` and ``inv`` for the probes, ``d^3`` each)."""
    import scipy.linalg

    model, data = logistic_groups(30_000, 150)

    def refusing(fn, name):
        def wrapper(a, *args, **kwargs):
            if np.ndim(a) >= 2 and np.shape(a)[-1] > 16:
                raise AssertionError(f"{name} on a {np.shape(a)} matrix")
            return fn(a, *args, **kwargs)

        return wrapper

    for name in ("cholesky", "inv", "solve"):
        monkeypatch.setattr(np.linalg, name, refusing(getattr(np.linalg, name), f"numpy {name}"))
    for name in ("cholesky", "solve_triangular", "inv"):
        monkeypatch.setattr(scipy.linalg, name, refusing(getattr(scipy.linalg, name), f"scipy {name}"))
    found = glmm_mode(model, as_data_source(data), initial_theta(model), jax.random.key(0))
    monkeypatch.undo()
    assert found.mode.converged
    mode, cov = float64_mode(model, data, np.asarray(found.mode.theta_hat, np.float64))
    sd = np.sqrt(np.diag(cov))
    assert np.max(np.abs(np.asarray(found.mode.theta_hat, np.float64) - mode) / sd) <= 0.25


@pytest.mark.slow  # 11 s: the mode search's compilations
def test_a_trial_whose_sums_overflow_is_a_rejected_step(monkeypatch):
    """A trial point of the subsample climb where the proxy's sums are not finite (as a student-t GLMM's derivatives
    overflow there: ``NonFiniteSums``, simulated here at the climb's first trial) is a failed step whose trust region
    shrinks, and the search still ends within 0.25 Laplace s.d.s of the float64 Newton mode. Before, the error ended
    the warm-up (the student-t case of ``test_auto_sample_matches_nuts``)."""
    from minibatch_mcmc.control_variates.glmm_sums import NonFiniteSums
    from minibatch_mcmc.warmup import glmm_mode as module

    model, data = logistic_groups(2_000, 8)
    calls = []

    def overflowing(*args, **kwargs):
        calls.append(len(calls))
        if len(calls) == 2:  # the first call builds the start's proxy; the second is the climb's first trial
            raise NonFiniteSums("the GLMM proxy's full-data sum 'hxx' at the centre is not finite (simulated)")
        return glmm_proxy(*args, **kwargs)

    monkeypatch.setattr(module, "glmm_proxy", overflowing)
    found = glmm_mode(model, as_data_source(data), initial_theta(model), jax.random.key(0))
    assert len(calls) > 2  # the search went on past the failed trial
    mode, cov = float64_mode(model, data, np.asarray(found.mode.theta_hat, np.float64))
    off = np.abs(np.asarray(found.mode.theta_hat, np.float64) - mode) / np.sqrt(np.diag(cov))
    assert np.max(off) <= 0.25, off


@pytest.mark.parametrize("family", ["bernoulli", "student_t"])
def test_surrogate_hessian_from_arrow_products(family):
    """The surrogate's Hessian, assembled from its ``k + m`` products with the arrow's tangents (``arrow_hessian``), equals
    ``jax.hessian`` of ``log p0 + proxy_sum / T`` (float64) to float32 rounding, on a non-centred GLMM with two crossed
    factors (the second factor's random intercept and slope among the globals), the family's ``phi`` and the per-level
    cubic: catches a block missed, transposed or mixed between levels by the summed tangents."""
    from minibatch_mcmc.models.glmm import dimension
    from minibatch_mcmc.warmup.glmm_climb import fields

    rng = np.random.default_rng(7)
    n = 400
    x1, g, h = rng.normal(size=n), rng.integers(0, 8, n), rng.integers(0, 3, n)
    eta = 0.3 * x1 - 0.2 + 0.3 * rng.normal(size=8)[g]
    y = rng.random(n) < 1 / (1 + np.exp(-eta)) if family == "bernoulli" else eta + rng.standard_t(5, n)
    factors = (
        GroupFactor("g", g, np.ones((n, 1)), tuple(range(8)), ("1",)),
        GroupFactor("h", h, np.c_[np.ones(n), x1], tuple(range(3)), ("1", "x1")),
    )
    design = GLMMDesign(y=np.asarray(y, float), x=np.c_[np.ones(n), x1], fixed=("Intercept", "x1"), factors=factors)
    model, data = glmm_model(design, family, centred=False)
    x = np.random.default_rng(2).normal(0.0, 0.3, dimension(model.glmm.layout))
    proxy = glmm_proxy(model, data, jnp.asarray(x, jnp.float32), cubic_info=0.0)
    _, _, h = surrogate(model, proxy, 2.0)(jnp.asarray(x + 0.1, jnp.float32), fields(proxy))
    with jax.enable_x64(True):
        p64 = jax.tree_util.tree_map(
            lambda a: (
                jnp.asarray(a, jnp.float64) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating) else a
            ),
            proxy,
        )
        want = np.asarray(jax.hessian(lambda t: model.log_prior(t) + p64.proxy_sum(t) / 2.0)(jnp.asarray(x + 0.1)))
    np.testing.assert_allclose(h, want, rtol=2e-4, atol=2e-4 * np.max(np.abs(want)))


def test_the_search_runs_on_one_blas_thread(monkeypatch):
    """The search (its ``eigh`` and Cholesky factorisations) runs inside ``optim.host_blas``'s limit, one BLAS thread at
    a ``d`` below ``THREADED_DIM``, and the caller's count is restored after it: a ``glmm_mode`` that left OpenBLAS at
    its default thread count (the 2-core machine's 2, where a ``d x d`` ``eigh`` then waited on XLA's threads) fails
    where the machine has more than one core."""
    import importlib

    from threadpoolctl import threadpool_info

    gm = importlib.import_module("minibatch_mcmc.warmup.glmm_mode")

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    seen = []
    monkeypatch.setattr(gm, "search", lambda *args: seen.append(blas_threads()))
    before = blas_threads()
    gm.glmm_mode(None, None, jnp.zeros(205), None)
    assert seen == [[1] * len(before)] and blas_threads() == before
