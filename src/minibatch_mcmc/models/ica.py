"""Independent component analysis with an orthonormal unmixing matrix (Korattikara et al., Section 4.2.2).

For prewhitened data the unmixing matrix ``W`` (``D x D``) lies on the Stiefel manifold of
orthonormal matrices, the prior is uniform (Haar) on it, and each datum has the likelihood
``p(x | W) = |det W| prod_j [4 cosh^2(w_j^T x / 2)]^-1``. ``1 / (4 cosh^2(s / 2))`` is the standard
logistic density ``sigmoid(s) sigmoid(-s)``, so it is normalised and its log is
``log_sigmoid(s) + log_sigmoid(-s)``. The quality of ``W`` is its Amari distance to the true
unmixing matrix ``W0``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_real
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.shapes import Dims, shape_check


def logistic_source_log_density(s: jax.Array) -> jax.Array:
    """``log[1 / (4 cosh^2(s / 2))]``, the log density of a standard logistic source."""
    return jax.nn.log_sigmoid(s) + jax.nn.log_sigmoid(-s)


def ica_log_lik(w: jax.Array, batch: dict) -> jax.Array:
    """Per-datum ``log p(x_i | W) = log|det W| + sum_j log[4 cosh^2(w_j^T x_i / 2)]^-1``."""
    s = batch["x"] @ w.T
    _, logdet = jnp.linalg.slogdet(w)
    return logdet + jnp.sum(logistic_source_log_density(s), axis=-1)


def orthonormality_error(w: jax.Array) -> jax.Array:
    """``max |W^T W - I|``: how far ``W`` is from the Stiefel manifold."""
    d = w.shape[-1]
    return jnp.max(jnp.abs(jnp.swapaxes(w, -1, -2) @ w - jnp.eye(d, dtype=w.dtype)), axis=(-2, -1))


def ica(tolerance: float = 1e-4) -> Model:
    """ICA model: uniform prior on orthonormal ``W`` (``-inf`` if ``max|W^T W - I| > tolerance``) and the 4 cosh^2 likelihood."""
    check_real(
        tolerance,
        "tolerance",
        0.0,
        1.0,
        low_open=True,
        high_open=True,
        why="the allowed max |W^T W - I| of a prior-support point",
    )

    def log_prior(w: jax.Array) -> jax.Array:
        dtype = jnp.result_type(w, jnp.float32)
        return jnp.where(orthonormality_error(w) <= tolerance, 0.0, -jnp.inf).astype(dtype)

    return Model(
        log_prior=log_prior,
        log_lik=ica_log_lik,
        name="ica",
        check_shapes=shape_check("ica", Dims("D", "D"), {"x": Dims("b", "D")}),
    )


def amari_distance(w: np.ndarray, w0: np.ndarray) -> np.ndarray:
    """Amari et al. (1996) distance between unmixing matrices, normalised to [0, 1]; 0 iff ``W = P S W0`` (permutation, scaling).

    With ``P = W W0^-1``: ``[sum_i (sum_j |p_ij| / max_k |p_ik| - 1) + sum_j (sum_i |p_ij| / max_k |p_kj| - 1)] / (2 D (D - 1))``.
    Works on a batch ``w`` of shape ``(..., D, D)``.
    """
    w = np.asarray(w, np.float64)
    w0 = np.asarray(w0, np.float64)
    d = w0.shape[-1]
    if w0.shape != (d, d) or w.shape[-2:] != (d, d):
        raise ValueError(f"amari_distance needs square matrices of one size; got W {w.shape} and W0 {w0.shape}")
    if d < 2:
        raise ValueError("amari_distance needs D >= 2")
    p = np.abs(w @ np.linalg.inv(w0))
    rows = (p.sum(-1) / p.max(-1) - 1.0).sum(-1)
    cols = (p.sum(-2) / p.max(-2) - 1.0).sum(-1)
    return (rows + cols) / (2.0 * d * (d - 1))


class ICAData(NamedTuple):
    """Whitened mixtures, the true unmixing matrix for the whitened data, and the sources."""

    data: dict
    """``{"x": (N, D)}`` whitened observations."""
    w_true: np.ndarray
    """``(D, D)`` true unmixing matrix ``W0`` (maps whitened ``x`` to the scaled sources)."""
    sources: np.ndarray
    """``(N, D)`` the standardised sources."""


def make_ica_data(seed: int, n: int, dtype=np.float32) -> ICAData:
    """Four sources mixed at random and whitened, in the spirit of the paper's music + noise + 2 Gaussians.

    The audio recordings are not available, so (a) "music" is a Laplace source, (b) "traffic noise" a
    Student-t(5) source, (c, d) are Gaussian; all standardised, mixed by a random matrix and whitened
    with the sample covariance. ``W0 = (V A)^-1`` with whitening ``V`` and mixing ``A``.
    """
    if n < 10:
        raise ValueError(f"n={n} must be at least 10 data points")
    rng = np.random.default_rng(seed)
    s = np.stack(
        [rng.laplace(size=n), rng.standard_t(5, size=n), rng.standard_normal(n), rng.standard_normal(n)], axis=1
    )
    s = (s - s.mean(0)) / s.std(0)
    a = rng.standard_normal((4, 4))
    x = s @ a.T
    x -= x.mean(0)
    evals, evecs = np.linalg.eigh(np.cov(x, rowvar=False))
    v = evecs @ np.diag(evals**-0.5) @ evecs.T
    xw = x @ v.T
    w0 = np.linalg.inv(v @ a)
    return ICAData(data={"x": xw.astype(dtype)}, w_true=w0, sources=s)
