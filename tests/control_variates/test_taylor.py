"""The Taylor-proxy control variate: its split of the log-likelihood difference is exact, its minibatch
estimate is unbiased (by enumeration of every minibatch), its residuals shrink with N as the theory says,
and bad centres or settings are refused with the culprit named."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.control_variates import MAX_DENSE_DIM, plain, taylor_proxy
from minibatch_mcmc.models import Model, gaussian_mean, logistic_regression


def _logistic_data(n: int, d: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    theta = np.linspace(-1.0, 1.0, d)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-x @ theta))).astype(np.float64)
    return {"x": x, "y": y}


def _mode_and_hessian(data: dict, prior_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method in float64 numpy on the logistic log posterior (independent of the library)."""
    x, y = data["x"], data["y"]
    th = np.zeros(x.shape[1])
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-x @ th))
        g = x.T @ (y - p) - th / prior_scale**2
        h = -(x.T * (p * (1 - p))) @ x - np.eye(x.shape[1]) / prior_scale**2
        th = th - np.linalg.solve(h, g)
    return th, h


def _analytic_q(data: dict, centre: np.ndarray, a: np.ndarray, b: np.ndarray, order: int) -> np.ndarray:
    """``q_i = g_i . u + u' H_i (v/2)`` from the closed-form logistic gradient and Hessian per datum."""
    x, y = data["x"], data["y"]
    p = 1.0 / (1.0 + np.exp(-x @ centre))
    u, half_v = b - a, 0.5 * ((b - centre) + (a - centre))
    q = (y - p) * (x @ u)
    if order == 2:
        q = q - p * (1 - p) * (x @ u) * (x @ half_v)
    return q


@pytest.mark.parametrize("order", [1, 2])
def test_split_is_exact_against_closed_form(order):
    """Per-datum proxy differences and their data-free sum equal the closed-form logistic Taylor terms to 1e-9
    (float64), and residuals + known sum reproduce the full log-likelihood difference: a wrong sign, a missing
    factor 1/2 or a Hessian taken at the wrong point would be off by far more than that."""
    with jax.enable_x64(True):
        data = _logistic_data(200, 3, 0)
        centre, h = _mode_and_hessian(data, 10.0)
        model = logistic_regression(prior_scale=10.0)
        cov = np.linalg.inv(-h)
        rng = np.random.default_rng(1)
        a = centre + rng.multivariate_normal(np.zeros(3), cov)
        b = a + 0.5 * rng.multivariate_normal(np.zeros(3), cov)
        jdata = jax.tree_util.tree_map(jnp.asarray, data)
        proxy = taylor_proxy(model, jdata, jnp.asarray(centre), order=order, chunk=64)
        resid = np.asarray(proxy.log_ratio(model, jnp.asarray(a), jnp.asarray(b))(jdata))
        raw = np.asarray(plain().log_ratio(model, jnp.asarray(a), jnp.asarray(b))(jdata))
        q = _analytic_q(data, centre, a, b, order)
        np.testing.assert_allclose(raw - resid, q, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(float(proxy.known_sum(jnp.asarray(a), jnp.asarray(b))), q.sum(), rtol=1e-9)
        np.testing.assert_allclose(
            resid.sum() + float(proxy.known_sum(jnp.asarray(a), jnp.asarray(b))), raw.sum(), rtol=1e-9
        )


def test_minibatch_estimate_unbiased_by_enumeration():
    """Averaged over every one of the C(10, 4) = 210 minibatches drawn without replacement, the control-variate
    estimate ``N mean(residuals) + known_sum`` equals the full-data difference to 1e-10: an estimator that
    scaled the residuals by b instead of N, or dropped the known sum, is off by O(1) here."""
    with jax.enable_x64(True):
        data = _logistic_data(10, 2, 3)
        centre, _ = _mode_and_hessian(data, 2.0)
        model = logistic_regression(prior_scale=2.0)
        jdata = jax.tree_util.tree_map(jnp.asarray, data)
        proxy = taylor_proxy(model, jdata, jnp.asarray(centre), order=2)
        a, b = jnp.asarray(centre + [0.3, -0.2]), jnp.asarray(centre + [-0.1, 0.4])
        resid = np.asarray(proxy.log_ratio(model, a, b)(jdata))
        known = float(proxy.known_sum(a, b))
        exact = float(jnp.sum(plain().log_ratio(model, a, b)(jdata)))
        estimates = [10 * resid[list(s)].mean() + known for s in itertools.combinations(range(10), 4)]
        assert len(estimates) == 210
        assert abs(np.mean(estimates) - exact) < 1e-10
        assert np.std(estimates) > 1e-6  # the minibatches really differ


def _residual_sd(n: int, order: int | None, pairs: int = 6) -> float:
    """Mean over posterior-scaled pairs of the s.d. over the data of the per-datum terms (float64)."""
    data = _logistic_data(n, 2, 11)
    centre, h = _mode_and_hessian(data, 10.0)
    cov = np.linalg.inv(-h)
    model = logistic_regression(prior_scale=10.0)
    jdata = jax.tree_util.tree_map(jnp.asarray, data)
    est = plain() if order is None else taylor_proxy(model, jdata, jnp.asarray(centre), order=order)
    spread = jax.jit(lambda a, b, rows: jnp.std(est.log_ratio(model, a, b)(rows)))  # one program, not op by op
    rng = np.random.default_rng(5)
    sds = []
    for _ in range(pairs):
        a = centre + rng.multivariate_normal(np.zeros(2), cov)
        b = a + rng.multivariate_normal(np.zeros(2), cov)
        sds.append(float(spread(jnp.asarray(a), jnp.asarray(b), jdata)))
    return float(np.mean(sds))


@pytest.mark.parametrize("order, slope", [(None, -0.5), (1, -1.0), (2, -1.5)])
def test_residual_spread_scales_with_n(order, slope):
    """At temperature 1 with moves scaled to the posterior (|d| ~ N^-1/2) the per-datum spread falls like
    N^-1/2 without a proxy, N^-1 at first order and N^-3/2 at second order: the slope fitted on N = 2e3, 2e4,
    2e5 must be within 0.15 of the theory (a proxy one order weaker would be 0.5 away)."""
    with jax.enable_x64(True):
        sizes = np.array([2_000, 20_000, 200_000])
        sd = np.array([_residual_sd(int(n), order) for n in sizes])
    fitted = np.polyfit(np.log(sizes), np.log(sd), 1)[0]
    assert abs(fitted - slope) < 0.15, (fitted, sd)


def test_bad_settings_and_centres_are_refused():
    """Orders other than 1 and 2, a too-large dense Hessian, a non-finite centre and a centre where the
    log-likelihood overflows each raise a ValueError that names the problem."""
    model = gaussian_mean()
    x = np.zeros((20, 2), np.float32)
    with pytest.raises(ValueError, match="order=3 must be one of 1, 2"):
        taylor_proxy(model, x, jnp.zeros(2), order=3)
    with pytest.raises(ValueError, match=f"d <= {MAX_DENSE_DIM}"):
        taylor_proxy(model, np.zeros((4, MAX_DENSE_DIM + 1), np.float32), jnp.zeros(MAX_DENSE_DIM + 1), order=2)
    with pytest.raises(ValueError, match="centre has NaN or inf"):
        taylor_proxy(model, x, jnp.asarray([0.0, np.nan]))
    log_model = Model(log_prior=lambda t: 0.0, log_lik=lambda t, b: jnp.log(t[0]) + 0.0 * b[:, 0], name="log")
    with pytest.raises(ValueError, match="sum at the centre is not finite"):
        taylor_proxy(log_model, x, jnp.asarray([-1.0, 0.0]))


@pytest.mark.slow  # 24-52 s on the loaded 2-core machine: `make test-slow` (the fast suite's 10-minute budget)
def test_sgld_cv_gradient_unbiased_and_smaller_by_enumeration():
    """The control-variate minibatch gradient (SGLD-CV) averaged over all C(12, 3) minibatches equals the
    full-data gradient to 1e-9 (float64), and its spread over minibatches is far below the plain estimate's
    near the centre: a missing proxy-gradient term or an N/b factor applied to it would break either."""
    with jax.enable_x64(True):
        data = _logistic_data(12, 2, 4)
        centre, _ = _mode_and_hessian(data, 3.0)
        model = logistic_regression(prior_scale=3.0)
        jdata = jax.tree_util.tree_map(jnp.asarray, data)
        proxy = taylor_proxy(model, jdata, jnp.asarray(centre), order=2)
        theta = jnp.asarray(centre + [0.05, -0.04])
        exact = np.asarray(jax.grad(lambda t: jnp.sum(model.log_lik(t, jdata)))(theta))
        cv, raw = [], []
        for subset in itertools.combinations(range(12), 3):
            rows = jax.tree_util.tree_map(lambda a: a[np.asarray(subset)], jdata)
            cv.append(np.asarray(jax.grad(proxy.minibatch_estimate(model, rows, 12, 3))(theta)))
            raw.append(np.asarray(4.0 * jax.grad(lambda t: jnp.sum(model.log_lik(t, rows)))(theta)))
        np.testing.assert_allclose(np.mean(cv, axis=0), exact, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.mean(raw, axis=0), exact, rtol=1e-9, atol=1e-9)
        assert np.max(np.std(cv, axis=0)) < 0.05 * np.max(np.std(raw, axis=0))


def test_proxy_sums_stream_out_of_core_sources(tmp_path):
    """The proxy's one pass reads an out-of-core source chunk by chunk and gives the in-memory sums (to float32
    rounding): memory-mapped .npy columns, with a chunk that does not divide N."""
    from minibatch_mcmc.data import open_npy

    data = {k: np.asarray(v, np.float32 if k == "x" else np.int32) for k, v in _logistic_data(1000, 3, 9).items()}
    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
    model = logistic_regression(prior_scale=10.0)
    centre = jnp.asarray([0.1, -0.2, 0.3])
    in_memory = taylor_proxy(model, data, centre, chunk=300)
    mapped = taylor_proxy(model, open_npy({k: tmp_path / f"{k}.npy" for k in data}), centre, chunk=300)
    np.testing.assert_allclose(np.asarray(mapped.grad_sum), np.asarray(in_memory.grad_sum), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(mapped.hess_sum), np.asarray(in_memory.hess_sum), rtol=1e-5)
    assert mapped.setup_data == 1000
