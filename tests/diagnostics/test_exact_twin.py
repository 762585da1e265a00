"""The exact twin's streamed pass (``diagnostics.exact_twin.residual_pass``): one pass of equal chunks, the last one
overlapping the one before it and masked, gives every start's full-data log-likelihood difference."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.control_variates import plain, taylor_proxy
from minibatch_mcmc.diagnostics.exact_twin import residual_pass
from minibatch_mcmc.models import logistic_regression


def _float64_difference(x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_i l_i(b_k) - l_i(a_k)`` per start ``k`` of a logistic regression, in float64."""

    def total(t: np.ndarray) -> np.ndarray:
        eta = x @ t.T
        return np.sum(y[:, None] * eta - np.logaddexp(0.0, eta), axis=0)

    return total(b) - total(a)


@pytest.mark.parametrize("proxy", [False, True])
def test_pass_sums_every_row_once(proxy):
    """1,000 rows in chunks of 96 (the last overlapping its predecessor by 56 rows), 3 starts at once: the pass's sum,
    plus the proxy's known sum with a Taylor proxy, equals the float64 full-data difference to float32 summation error
    (1e-4 relative). Counting the overlap twice, or dropping the last rows, moves it by about 5% (56 or 40 of 1,000
    rows); a start's pair mixed with another's moves it by far more."""
    rng = np.random.default_rng(0)
    d, n = 4, 1_000
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (rng.random(n) < 1 / (1 + np.exp(-x @ np.array([1.0, -0.5, 0.3, 0.0])))).astype(np.float32)
    data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
    model = logistic_regression()
    centre = jnp.asarray([1.0, -0.5, 0.3, 0.0], jnp.float32)
    a = np.asarray(centre) + 0.1 * rng.standard_normal((3, d))
    b = a + 0.1 * rng.standard_normal((3, d))
    estimator = taylor_proxy(model, data, centre) if proxy else plain()
    lam, bad = residual_pass(model, estimator, n, centre if proxy else None, 96)(
        data, jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    )
    if proxy:
        lam = lam + np.array(
            [estimator.known_sum(jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32)) for p, q in zip(a, b)]
        )
    want = _float64_difference(x.astype(np.float64), y.astype(np.float64), a, b)
    assert not np.any(np.asarray(bad))
    np.testing.assert_allclose(np.asarray(lam, np.float64), want, rtol=1e-4, atol=1e-2)
