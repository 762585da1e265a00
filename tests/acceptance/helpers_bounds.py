"""Float64 references for the bound-based exact tests: logistic residuals after a Taylor proxy, and the
acceptance probability of the Poisson-extended MH step (MH-SS, TunaMH) computed from its definition."""

from __future__ import annotations

import jax
import numpy as np

from minibatch_mcmc.models import make_logistic_data


def logistic_setting(n: int, d: int):
    """``(data, centre, t0)``: simulated logistic data, the true coefficients as the proxy's centre, and a point half a
    unit away (several posterior s.d. at ``n = 300``)."""
    data, theta = make_logistic_data(jax.random.key(1), n, d)
    centre = np.asarray(theta, np.float32)
    return data, centre, (centre + 0.5 * np.array([1.0, -0.5])).astype(np.float32)


def logistic_residuals(data, centre, t0, t1, order: int = 2, prior_scale: float = 5.0):
    """``(r, a)`` in float64: per-row residuals ``l_i(t1) - l_i(t0) - q_i`` after the order-``order`` Taylor proxy
    at ``centre``, and ``a`` = the prior's log ratio plus the proxy's sum (the data-free part of ``Delta``)."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    c, a0, a1 = (np.asarray(v, np.float64) for v in (centre, t0, t1))

    def loglik(t):
        eta = x @ t
        return y * eta - np.logaddexp(0.0, eta)

    p = 1.0 / (1.0 + np.exp(-(x @ c)))
    u, v = a1 - a0, (a1 - c) + (a0 - c)
    q = (y - p) * (x @ u)
    if order == 2:
        q = q - 0.5 * p * (1.0 - p) * (x @ u) * (x @ v)
    r = loglik(a1) - loglik(a0) - q
    psi = -0.5 * (a1 @ a1 - a0 @ a0) / prior_scale**2
    return r, psi + q.sum()


def extended_acceptance(r, b, a, gamma: float, chi: float, two_stage: bool, samples: int = 400_000, seed: int = 0):
    """``(P, se)``: the acceptance probability of the Poisson-extended MH step and its Monte Carlo s.e.

    Straight from the definition, independently of the thinning that simulates it: counts ``s_i ~ Poisson(mu_i)``,
    ``mu_i = chi B b_i + phi_i`` (``B = sum b``), each count raising the ratio by ``(mu_i + r_i) / mu_i``; the
    probability is ``min(1, e^a) E[min(1, prod)]`` (two stages) or ``E[min(1, e^a prod)]``. The expectation over the
    counts is a float64 Monte Carlo average over ``samples`` draws of the compound Poisson sum.
    """
    r, b = np.asarray(r, np.float64), np.asarray(b, np.float64)
    phi = gamma * np.maximum(-r, 0.0) + (1.0 - gamma) * (b - np.maximum(r, 0.0))
    mu = chi * b.sum() * b + phi
    with np.errstate(divide="ignore"):
        step = np.where(mu > 0, np.log(np.maximum(mu + r, 0.0)) - np.log(np.where(mu > 0, mu, 1.0)), 0.0)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(mu.sum(), samples)
    rows = rng.choice(mu.size, counts.sum(), p=mu / mu.sum())
    x = np.bincount(np.repeat(np.arange(samples), counts), weights=step[rows], minlength=samples)
    x[np.isnan(x)] = -np.inf
    if two_stage:
        f = min(1.0, np.exp(a)) * np.exp(np.minimum(x, 0.0))
    else:
        f = np.exp(np.minimum(a + x, 0.0))
    return float(f.mean()), float(f.std() / np.sqrt(samples))


def quadrature_posterior_check(test) -> None:
    """Run ``test`` (with a Laplace-whitened second-order ``logistic_proxy`` and a Laplace-shaped random walk) for
    4 x 12,000 draws on N = 10^5 logistic rows at temperature 1 and compare the posterior means and variances with
    quadrature: ESS > 3200 per coordinate, |z| < 4 for each mean and variance, under 5 rows per test on average."""
    from helpers_glm import glm_data, glm_quadrature

    from minibatch_mcmc.control_variates.glm import logistic_proxy
    from minibatch_mcmc.diagnostics import check_moments
    from minibatch_mcmc.models import logistic_regression
    from minibatch_mcmc.proposals.scaled import scaled_random_walk
    from minibatch_mcmc.samplers import sample

    data = glm_data(100_000, (0.3, -0.8), 11)
    mean, var, mode, cov = glm_quadrature(data, 5.0)
    chol = np.linalg.cholesky(cov)
    est = logistic_proxy(data, mode.astype(np.float32), order=2, whiten=chol)
    starts = jax.numpy.asarray(mode + (chol @ np.random.default_rng(0).standard_normal((2, 4))).T, np.float32)
    proposal = scaled_random_walk(jax.numpy.asarray(chol, np.float32), 1.7)
    res = sample(
        logistic_regression(prior_scale=5.0),
        data,
        starts,
        proposal=proposal,
        test=test,
        estimator=est,
        num_samples=12_000,
        num_chains=4,
        key=3,
        batched_init=True,
        progress=False,
        block_size=6000,
    )
    chk = check_moments(np.asarray(res.positions)[:, 500:], mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
    assert res.summary()["data_per_test"] < 5
