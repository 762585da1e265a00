"""Bayesian multilayer perceptron (Li and Wong Section 4.3.2): ReLU hidden layers, softmax output.

``P(y | x, Theta) = softmax(ReLU(x W_1 + b_1) W_2 + b_2)`` (more hidden layers when ``sizes`` has
more entries). The parameter ``Theta`` is a tuple of ``{"w": (d_in, d_out), "b": (d_out,)}`` dicts,
one per layer; the default ``sizes=(784, 200, 10)`` gives the paper's 159,010 parameters. Data
batches are ``{"x": float (b, sizes[0]), "y": int (b,) in [0, sizes[-1])}``.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.models.base import Model, flat_prior, gaussian_prior
from minibatch_mcmc.models.shapes import Dims, shape_check

PyTree = Any
MLPParams = tuple
"""A tuple of per-layer ``{"w": (d_in, d_out), "b": (d_out,)}`` dicts."""

PAPER_SIZES = (784, 200, 10)
"""Layer widths of the paper's network: 28 x 28 inputs, 200 ReLU units, 10 classes."""


def check_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """Layer widths as a tuple: at least an input and an output width, every width a positive integer."""
    try:
        widths = tuple(sizes)
    except TypeError:
        raise ValueError(f"sizes={sizes!r} must be a sequence of layer widths such as (784, 200, 10)") from None
    if len(widths) < 2:
        raise ValueError(f"sizes={widths!r} needs at least an input and an output width, e.g. (784, 200, 10)")
    for w in widths:
        check_int(w, "layer width", low=1, why=f"every entry of sizes={widths!r}")
    if widths[-1] < 2:
        raise ValueError(f"sizes={widths!r}: the softmax output needs at least 2 classes; got {widths[-1]}")
    return tuple(int(w) for w in widths)


def init_mlp(key: jax.Array, sizes: Sequence[int] = PAPER_SIZES, dtype=jnp.float32) -> MLPParams:
    """He-normal weights (s.d. ``sqrt(2 / d_in)``) and zero biases for each layer."""
    widths = check_sizes(sizes)
    keys = jax.random.split(key, len(widths) - 1)
    return tuple(
        {"w": jax.random.normal(k, (a, b), dtype) * jnp.sqrt(2.0 / a).astype(dtype), "b": jnp.zeros((b,), dtype)}
        for k, a, b in zip(keys, widths[:-1], widths[1:])
    )


def mlp_logits(params: MLPParams, x: jax.Array) -> jax.Array:
    """Unnormalised class scores ``ReLU(... ReLU(x W_1 + b_1) ...) W_L + b_L`` for each row of ``x``."""
    h = x
    for layer in params[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    return h @ params[-1]["w"] + params[-1]["b"]


def predict_proba(params: MLPParams, x: jax.Array) -> jax.Array:
    """Predictive class probabilities ``softmax(logits)``, shape ``(b, n_classes)``."""
    return jax.nn.softmax(mlp_logits(params, x), axis=-1)


def mlp_log_lik(params: MLPParams, batch: dict) -> jax.Array:
    """Per-datum categorical log-likelihood ``log P(y_i | x_i, Theta)``, shape ``(b,)``."""
    logp = jax.nn.log_softmax(mlp_logits(params, batch["x"]), axis=-1)
    y = batch["y"].astype(jnp.int32)
    return jnp.take_along_axis(logp, y[:, None], axis=-1)[:, 0]


def error_rate(probs: jax.Array | np.ndarray, y: jax.Array | np.ndarray) -> float:
    """Fraction of rows whose most probable class differs from the label ``y``."""
    return float(np.mean(np.argmax(np.asarray(probs), axis=-1) != np.asarray(y)))


def check_classification_data(data: dict, sizes: Sequence[int] = PAPER_SIZES) -> int:
    """Check ``{"x": (n, sizes[0]), "y": (n,)}`` with integer labels in ``[0, sizes[-1])``; return ``n``."""
    widths = check_sizes(sizes)
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise ValueError(f"data must be a dict with keys 'x' and 'y'; got {type(data).__name__}")
    x, y = np.asarray(data["x"]), np.asarray(data["y"])
    if x.ndim != 2 or x.shape[1] != widths[0]:
        raise ValueError(f"data['x'] has shape {x.shape}; expected (n, {widths[0]}) for input width {widths[0]}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"data['y'] has shape {y.shape}; expected ({x.shape[0]},), one label per row of x")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"data['y'] has dtype {y.dtype}; expected integer class labels")
    if y.size and (y.min() < 0 or y.max() >= widths[-1]):
        raise ValueError(f"labels must lie in [0, {widths[-1]}); found values in [{y.min()}, {y.max()}]")
    return int(x.shape[0])


def bayesian_mlp(sizes: Sequence[int] = PAPER_SIZES, prior_scale: float | None = 1.0) -> Model:
    """Bayesian MLP with an independent ``N(0, prior_scale^2)`` prior on every weight and bias.

    ``prior_scale=None`` is the improper uniform prior the paper uses for MINT. A Gaussian prior
    of scale ``s`` is an L2 penalty ``||Theta||^2 / (2 s^2)`` on the summed log-likelihood.
    """
    widths = check_sizes(sizes)
    layers = tuple({"w": Dims(a, b), "b": Dims(b)} for a, b in zip(widths[:-1], widths[1:]))
    if prior_scale is not None:
        prior_scale = check_positive(prior_scale, "prior_scale", why="or None for the uniform prior")
    prior = flat_prior() if prior_scale is None else gaussian_prior(0.0, prior_scale)
    return Model(
        log_prior=prior,
        log_lik=mlp_log_lik,
        name="bayesian_mlp",
        check_shapes=shape_check("bayesian_mlp", layers, {"x": Dims("b", widths[0]), "y": Dims("b")}),
    )
