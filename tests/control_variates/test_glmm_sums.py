"""control_variates.glmm_sums: the per-row quadratic the GLMM proxy's residuals subtract, against float64 numpy."""

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.glmm_sums import row_quadratic


def test_row_quadratic_jitted_over_moves():
    """``row_quadratic`` jitted and vmapped over 12 moves of 10^4 rows (a symmetric ``(eta, phi)`` Hessian per row, two
    ``phi``) equals ``a delta + b . dphi + step' H step / 2`` from numpy in float64 to 1e-5 (float32 rounding of O(1)
    terms). Catches jax 0.10.2's CPU miscompile of the earlier form, ``sum(grad * step) + einsum(step, H, step) / 2`` on
    a per-row step ``(delta, dphi broadcast)``: jitted and vmapped over four or more moves it was O(1) off at these
    inputs, while each term alone, the vmapped form unjitted and the jitted form looped were right to rounding (issue
    31: a Student-t GLMM's influence probes along ``phi`` off by a fraction of a nat a row, a capped stratum, a biased
    ``sigma``)."""
    rng = np.random.default_rng(0)
    n, moves = 10_000, 12
    grad = rng.normal(size=(n, 3))
    h = rng.normal(size=(n, 3, 3))
    hess = 0.5 * (h + np.swapaxes(h, 1, 2))
    x = rng.normal(size=n)
    v = 0.1 * rng.normal(size=(moves, 3))
    g32, h32, x32 = (jnp.asarray(a, jnp.float32) for a in (grad, hess, x))
    got = jax.jit(jax.vmap(lambda m: row_quadratic(g32, h32, x32 * m[0], m[1:])))(jnp.asarray(v, jnp.float32))
    v = np.asarray(np.float32(v), np.float64)
    want = []
    for m in v:
        step = np.c_[np.asarray(x32, np.float64) * m[0], np.broadcast_to(m[1:], (n, 2))]
        g, hh = np.asarray(g32, np.float64), np.asarray(h32, np.float64)
        want.append(np.sum(g * step, axis=1) + 0.5 * np.einsum("bi,bij,bj->b", step, hh, step))
    np.testing.assert_allclose(np.asarray(got, np.float64), np.stack(want), rtol=0, atol=1e-5)
