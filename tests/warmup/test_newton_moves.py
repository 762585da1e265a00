"""``warmup.newton_moves``: the Newton MH step's warm-up climb (issue 31: Gibbs chains started far off in the globals).

A logistic regression's log-likelihood in 2-D, started 40 posterior s.d.s from its mode (where a full Newton step overshoots to a point it cannot leave): 40 climbing
steps must reach the mode that float64 Newton iterations in numpy find (to 1e-3, the s.d.s are ~0.03), never lowering
the target on the way;
and without ``climb`` the step must be the exact MH step it was (the same draws from the same keys as the default),
so the kept sweeps, which never climb, stay exact. Catches: a climb that takes the noisy draw or the step back, accepts
a step that lowers the target, or changes the sampling step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.warmup.newton_moves import autodiff_fit, hessian_by_rows, newton_mh


def logistic_problem(n: int = 2000, seed: int = 0):
    """Rows of a 2-column logistic regression and its float64 log-likelihood's mode by numpy Newton iterations."""
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(n), rng.normal(size=n)]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(x @ np.array([-0.5, 1.0]))))).astype(float)
    beta = np.zeros(2)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        beta = beta + np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x, x.T @ (y - p))
    xs, ys = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)

    def target(b):
        eta = xs @ b
        return jnp.sum(ys * eta - jnp.logaddexp(0.0, eta))

    return target, beta


@pytest.mark.slow  # 110 s for both on the loaded 2-core box (compiles of eigh and cholesky)
def test_climb_reaches_the_mode_and_never_descends():
    target, mode = logistic_problem()
    fit = autodiff_fit(target)
    x = jnp.asarray([1.5, -1.0], jnp.float32)  # ~40 s.d.s off in each coordinate
    climb = jax.jit(lambda key, x: newton_mh(key, x, fit, jnp.float32(0.0), True)[0])
    values = [float(target(x))]
    for k in range(40):
        x = climb(jax.random.key(k), x)
        values.append(float(target(x)))
    assert all(b >= a for a, b in zip(values, values[1:])), values
    np.testing.assert_allclose(np.asarray(x), mode, atol=1e-3)


@pytest.mark.slow
def test_without_climb_the_step_is_the_exact_mh_step():
    target, mode = logistic_problem()
    fit = autodiff_fit(target)
    x = jnp.asarray(mode + 0.05, jnp.float32)
    for k in range(5):
        key, rho = jax.random.key(k), jnp.float32(0.3)
        a, moved_a = newton_mh(key, x, fit, rho)
        b, moved_b = newton_mh(key, x, fit, rho, False)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert float(moved_a) == float(moved_b)
        x = a


def test_hessian_by_rows_is_the_closed_form_hessian():
    """``hessian_by_rows`` of ``f(x) = sum_g log N(a_g e^{x_0}; x_1, 1) + x_0 x_1^2`` over 50 levels is its Hessian in
    closed form (float64 numpy) to float32 rounding, and the one ``jax.hessian`` gives: rows of products in the wrong
    order (the diagonal terms differ by orders of magnitude), a direction left out or a level left out fails it."""
    a = np.random.default_rng(3).normal(size=50)
    x = np.array([0.3, -0.7])

    def f(v):
        u = jnp.asarray(a, v.dtype) * jnp.exp(v[0])
        return -0.5 * jnp.sum((u - v[1]) ** 2) + v[0] * v[1] ** 2

    u = a * np.exp(x[0])
    h00 = -np.sum(u * u) - np.sum((u - x[1]) * u)
    h01 = np.sum(u) + 2 * x[1]
    want = np.array([[h00, h01], [h01, -a.size + 2 * x[0]]])
    got = np.asarray(hessian_by_rows(f, jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got, np.asarray(jax.hessian(f)(jnp.asarray(x, jnp.float32))), rtol=1e-6, atol=1e-5)
