"""Variable selection in logistic regression (Korattikara et al., Section 4.2.3; Chen et al. 2011).

The state is a fixed-shape pytree ``{"beta": (D,), "gamma": (D,)}``: ``gamma`` is a float 0/1
inclusion mask and excluded coefficients are held at exactly 0, so the reversible-jump moves of
:mod:`minibatch_mcmc.proposals.reversible_jump` run under every acceptance test unchanged.

Prior (the ``log_prior`` of the model):

* ``beta_j | gamma_j = 1, psi ~ Laplace(0, psi)``, density ``exp(-|beta_j| / psi) / (2 psi)``;
* shrinkage ``psi ~ InverseGamma(a, b)``; ``a = b = 0`` is the paper's improper ``p(psi) ∝ 1/psi``.
  Integrating ``psi`` out gives ``2^-k Gamma(k + a) (||beta||_1 + b)^-(k + a) b^a / Gamma(a)``;
* model size ``k = sum(gamma)``: right-truncated Poisson on ``1..D`` spread evenly over the
  ``C(D, k)`` models of each size, ``p(gamma | lam) ∝ lam^k / (C(D, k) k!)`` (Equation 15).

With ``a = b = 0`` the product is Equation 17 up to the factor ``2^-k`` that the paper leaves out, so
the paper's ``lambda`` is this module's ``lam / 2`` (see ``docs/parts/rj-ica.md``). The paper's
improper ``1/psi`` makes the posterior improper near ``beta = 0`` (``||beta||_1^-k`` in ``k``
dimensions is not integrable at 0); it is harmless for large ``N`` but the exact-posterior checks use
``b > 0``.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special as sps

from minibatch_mcmc.checks import check_int, check_positive, check_real
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.logistic import logistic_log_lik
from minibatch_mcmc.models.shapes import REGRESSION_DATA, Dims, shape_check


class SelectionPrior(NamedTuple):
    """Hyperparameters of the sparse prior: size-prior rate ``lam`` and shrinkage hyperprior ``InvGamma(a, b)``."""

    n_features: int
    """``D``: number of covariates, the intercept column included."""
    lam: float
    """Rate of the right-truncated Poisson prior on the model size ``k`` (the paper's knob is ``lam / 2``)."""
    psi_shape: float = 0.0
    """``a`` of the inverse-gamma hyperprior on the Laplace scale ``psi`` (0 with ``psi_scale=0``: ``1/psi``)."""
    psi_scale: float = 0.0
    """``b`` of the inverse-gamma hyperprior (``b > 0`` makes the prior proper near ``beta = 0``)."""


def check_prior(prior: SelectionPrior) -> SelectionPrior:
    """Validate the hyperparameters, raising ``ValueError`` naming the bad one."""
    d = check_int(prior.n_features, "n_features", low=1, why="the number of covariates D")
    lam = check_positive(prior.lam, "lam", why="the Poisson rate of the model size")
    a = check_real(prior.psi_shape, "psi_shape", 0.0, why="the inverse-gamma shape")
    b = check_real(prior.psi_scale, "psi_scale", 0.0, why="the inverse-gamma scale")
    if (a > 0) != (b > 0):
        raise ValueError(
            f"psi_shape={a!r}, psi_scale={b!r}: give both > 0 (proper inverse-gamma) or both 0 (the paper's 1/psi)"
        )
    return SelectionPrior(d, lam, a, b)


def size_log_prior(k: jax.Array, prior: SelectionPrior) -> jax.Array:
    """``log p(gamma | lam)`` of one model of size ``k`` up to a constant: ``k log lam - log C(D, k) - log k!``."""
    d = prior.n_features
    kf = jnp.asarray(k, jnp.float32)
    gammaln = jax.scipy.special.gammaln
    log_choose = gammaln(d + 1.0) - gammaln(kf + 1.0) - gammaln(d - kf + 1.0)
    return kf * jnp.log(prior.lam) - log_choose - jax.scipy.special.gammaln(kf + 1.0)


def coefficient_log_prior(l1: jax.Array, k: jax.Array, prior: SelectionPrior) -> jax.Array:
    """``log p(beta_gamma | gamma)`` with ``psi`` integrated out, from ``||beta||_1`` and ``k``."""
    kf = jnp.asarray(k, jnp.float32)
    a, b = prior.psi_shape, prior.psi_scale
    const = a * math.log(b) - math.lgamma(a) if a > 0 else 0.0
    return jax.scipy.special.gammaln(kf + a) - (kf + a) * jnp.log(l1 + b) - kf * jnp.log(2.0) + const


def selection_log_prior(theta: dict, prior: SelectionPrior) -> jax.Array:
    """``log p(beta, gamma)``: Laplace with ``psi`` integrated out times the truncated Poisson size prior.

    ``-inf`` outside the support: ``gamma`` not 0/1, ``k`` outside ``1..D``, or an excluded
    coefficient that is not exactly 0.
    """
    beta, gamma = theta["beta"], theta["gamma"]
    k = jnp.sum(gamma)
    l1 = jnp.sum(jnp.abs(beta) * gamma)
    lp = size_log_prior(k, prior) + coefficient_log_prior(l1, k, prior)
    valid = (
        jnp.all((gamma == 0) | (gamma == 1))
        & (k >= 1)
        & (k <= prior.n_features)
        & jnp.all((gamma == 1) | (beta == 0))
        & (l1 + prior.psi_scale > 0)
    )
    return jnp.where(valid, lp, -jnp.inf).astype(jnp.result_type(beta, jnp.float32))


def selection_log_lik(theta: dict, batch: dict) -> jax.Array:
    """Per-datum logistic log-likelihood (Equation 16) using only the included coefficients."""
    return logistic_log_lik(theta["beta"] * theta["gamma"], batch)


def variable_selection(n_features: int, lam: float, psi_shape: float = 0.0, psi_scale: float = 0.0) -> Model:
    """Logistic regression with reversible-jump variable selection (Equation 17's posterior)."""
    prior = check_prior(SelectionPrior(n_features, lam, psi_shape, psi_scale))

    def log_prior(theta: dict) -> jax.Array:
        return selection_log_prior(theta, prior)

    return Model(
        log_prior=log_prior,
        log_lik=selection_log_lik,
        name="variable_selection",
        check_shapes=shape_check(
            "variable_selection", {"beta": Dims("d"), "gamma": Dims("d")}, REGRESSION_DATA, {"d": prior.n_features}
        ),
    )


def selection_state(beta: np.ndarray, gamma: np.ndarray, dtype=jnp.float32) -> dict:
    """A valid state ``{"beta", "gamma"}``: coefficients of excluded features are set to 0."""
    g = np.asarray(gamma)
    b = np.asarray(beta, np.float64)
    if g.ndim != 1 or b.shape != g.shape:
        raise ValueError(f"beta and gamma must be 1-D of the same length; got shapes {b.shape} and {g.shape}")
    if not np.all((g == 0) | (g == 1)):
        raise ValueError(f"gamma must be a 0/1 inclusion mask; got values {np.unique(g)}")
    if g.sum() < 1:
        raise ValueError("gamma must include at least one feature (the model size k ranges over 1..D)")
    return {"beta": jnp.asarray(np.where(g == 1, b, 0.0), dtype), "gamma": jnp.asarray(g, dtype)}


def make_selection_data(
    seed: int,
    n: int = 130_065,
    d: int = 50,
    n_active: int = 8,
    positive_rate: float = 0.28,
    correlation: float = 0.3,
    dtype=np.float32,
) -> tuple[dict, np.ndarray]:
    """MiniBooNE-shaped synthetic data: ``n`` rows of ``d`` correlated features plus an intercept column.

    Features are standard normal with AR(1) correlation ``correlation``; the true ``beta`` (length
    ``d + 1``, intercept first) has ``n_active`` non-zero feature coefficients of size 0.5-1.5 and an
    intercept set so that about ``positive_rate`` of the labels are 1 (MiniBooNE has 28% signal).
    Returns ``({"x": (n, d+1), "y": (n,)}, beta_true)``.
    """
    if not (1 <= n_active <= d):
        raise ValueError(f"n_active={n_active} must be in 1..d={d}")
    if not (0 < positive_rate < 1):
        raise ValueError(f"positive_rate={positive_rate} must be in (0, 1)")
    if not (-1 < correlation < 1):
        raise ValueError(f"correlation={correlation} must be in (-1, 1)")
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, d))
    x = np.empty((n, d))
    x[:, 0] = z[:, 0]
    s = math.sqrt(1 - correlation**2)
    for j in range(1, d):
        x[:, j] = correlation * x[:, j - 1] + s * z[:, j]
    beta = np.zeros(d + 1)
    active = np.sort(rng.choice(d, n_active, replace=False))
    beta[1 + active] = rng.choice([-1.0, 1.0], n_active) * rng.uniform(0.5, 1.5, n_active)
    eta = x @ beta[1:]
    lo, hi = -20.0, 20.0
    for _ in range(60):  # intercept by bisection on the mean predicted probability
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sps.expit(eta + mid).mean() < positive_rate else (lo, mid)
    beta[0] = 0.5 * (lo + hi)
    y = (rng.uniform(size=n) < sps.expit(eta + beta[0])).astype(np.int32)
    xs = np.concatenate([np.ones((n, 1)), x], axis=1).astype(dtype)
    return {"x": xs, "y": y}, beta


class ModelPosterior(NamedTuple):
    """Posterior over the ``2^D - 1`` models by quadrature: masks, probabilities and inclusion probabilities."""

    masks: np.ndarray
    """``(M, D)`` 0/1 masks of every model with ``k >= 1``."""
    probabilities: np.ndarray
    """``(M,)`` posterior probability of each model."""
    inclusion: np.ndarray
    """``(D,)`` marginal inclusion probabilities ``p(gamma_j = 1 | data)``."""
    beta_mean: np.ndarray
    """``(D,)`` posterior mean of ``beta * gamma``."""


def _grid_log_lik(nodes: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Full-data logistic log-likelihood at each row of ``nodes`` (float64)."""
    signed = (nodes @ x.T) * (2.0 * y - 1.0)
    return -np.logaddexp(0, -signed).sum(axis=1)


def model_posterior_by_quadrature(
    data: dict, prior: SelectionPrior, half_width: float = 4.0, num_points: int = 121, temperature: float = 1.0
) -> ModelPosterior:
    """Exact model probabilities of a tiny problem (``D <= 3``) by enumerating models and gridding ``beta``.

    Each model's evidence ``∫ p(y | beta) p(beta, gamma) d beta`` is a tensor-product trapezoid rule
    on ``[-half_width, half_width]^k`` (``num_points`` odd so that 0 is a node); ``psi_scale`` must be
    positive so the integrand is bounded at ``beta = 0``.
    """
    prior = check_prior(prior)
    d = prior.n_features
    if d > 3:
        raise ValueError(f"quadrature over beta is for D <= 3 covariates; got D={d}")
    if prior.psi_scale <= 0:
        raise ValueError("model_posterior_by_quadrature needs psi_scale > 0 (the 1/psi prior is not integrable at 0)")
    if num_points % 2 == 0:
        raise ValueError(f"num_points={num_points} must be odd so that beta = 0 is a grid node")
    x = np.asarray(data["x"], np.float64)
    y = np.asarray(data["y"], np.float64)
    grid = np.linspace(-half_width, half_width, num_points)
    w1 = np.full(num_points, grid[1] - grid[0])
    w1[[0, -1]] *= 0.5
    masks, log_ev, means = [], [], []
    for mask in itertools.product([0, 1], repeat=d):
        m = np.array(mask)
        k = int(m.sum())
        if k == 0:
            continue
        cols = np.flatnonzero(m)
        nodes = np.stack(np.meshgrid(*([grid] * k), indexing="ij"), -1).reshape(-1, k)
        weights = np.prod(np.stack(np.meshgrid(*([w1] * k), indexing="ij"), -1).reshape(-1, k), axis=1)
        loglik = np.concatenate(
            [_grid_log_lik(nodes[i : i + 65536], x[:, cols], y) for i in range(0, len(nodes), 65536)]
        )
        loglik /= temperature
        l1 = np.abs(nodes).sum(axis=1)
        a, b = prior.psi_shape, prior.psi_scale
        lp_size = k * math.log(prior.lam) - math.log(math.comb(d, k)) - math.lgamma(k + 1)
        lp_coef = math.lgamma(k + a) - (k + a) * np.log(l1 + b) - k * math.log(2) + a * math.log(b) - math.lgamma(a)
        logf = loglik + lp_size + lp_coef + np.log(weights)
        top = logf.max()
        p = np.exp(logf - top)
        log_ev.append(top + math.log(p.sum()))
        full = np.zeros((nodes.shape[0], d))
        full[:, cols] = nodes
        means.append((p[:, None] * full).sum(0) / p.sum())
        masks.append(m)
    log_ev = np.array(log_ev)
    probs = np.exp(log_ev - log_ev.max())
    probs /= probs.sum()
    masks_a = np.array(masks)
    return ModelPosterior(
        masks=masks_a,
        probabilities=probs,
        inclusion=probs @ masks_a,
        beta_mean=probs @ np.array(means),
    )
