"""The lean warm-up's passes over N on a heavy-tailed case (issue 32: <= 3 in all): a rare feature (30 of 50,000 rows
of a logistic regression) whose coefficient the subsample all but misses. The Newton passes stop within half a Laplace
s.d. of the mode (the documented contract, written here as a number, not read from ``lean``); the influence search's
second round reads no pass either (``tests/control_variates/test_influence.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.warmup import lean

PRIOR = 5.0


def rare_case(n: int, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    """Logistic regression, intercept, two covariates and a binary feature set in 30 rows (``benchmarks/heavy_tails.py``'s
    ``rare`` case): the rows (float32) and the start."""
    rare = np.zeros(n)
    rare[rng.choice(n, 30, replace=False)] = 1.0
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 2)), rare])
    y = rng.random(n) < 1 / (1 + np.exp(-(x @ np.array([-1.0, 0.5, -0.5, 2.0]))))
    return {"x": x.astype(np.float32), "y": y.astype(np.int32)}, np.zeros(4)


N, SEED = 50_000, 2
"""A draw of the case whose second Newton pass lands 0.25 s.d. from the mode (measured): the old rule (0.2) took a third."""


@pytest.fixture(scope="module")
def rare():
    """The case, its data and the lean mode search's result."""
    data, theta0 = rare_case(N, np.random.default_rng(SEED))
    found = lean.lean_mode(
        logistic_regression(prior_scale=PRIOR),
        as_data_source(data),
        jnp.asarray(theta0, jnp.float32),
        key=jax.random.key(0),
        probe_key=jax.random.key(1),
    )
    return data, found


def exact_mode(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The logistic posterior's mode and its negative Hessian there, by float64 Newton on all rows (prior N(0, PRIOR^2))."""
    beta = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (y - p) - beta / PRIOR**2
        prec = (x * (p * (1 - p))[:, None]).T @ x + np.eye(x.shape[1]) / PRIOR**2
        beta = beta + np.linalg.solve(prec, grad)
    return beta, prec


@pytest.mark.slow
def test_newton_passes_stop_within_half_an_sd_of_the_mode(rare):
    """Two full-data Newton passes (the first at the subsample's end, 5 s.d. out; the old stop rule took three), and the
    centre they stop at within half a Laplace s.d. of the mode computed independently in float64: a rule
    that stopped farther out (or a mis-scaled decrement) fails the distance, one that asked for more fails the count.
    ~20 s (a mode search over 50,000 rows)."""
    data, found = rare
    mode, prec = exact_mode(np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64))
    gap = np.asarray(found.mode.theta_hat, np.float64) - mode
    assert found.newton_passes == 2, found.newton_passes
    assert found.mode.converged
    assert float(np.sqrt(gap @ prec @ gap)) <= 0.5
