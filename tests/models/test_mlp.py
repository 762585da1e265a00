"""The Bayesian MLP: log-likelihood against numpy, gradient against finite differences, prior, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy import stats

from minibatch_mcmc.models.mlp import (
    bayesian_mlp,
    check_classification_data,
    error_rate,
    init_mlp,
    mlp_log_lik,
    predict_proba,
)


def numpy_log_lik(params, x, y):
    """Direct numpy forward pass: ReLU hidden layers, log-softmax output, picked at the labels."""
    h = np.asarray(x, np.float64)
    for layer in params[:-1]:
        h = np.maximum(h @ np.asarray(layer["w"], np.float64) + np.asarray(layer["b"], np.float64), 0.0)
    z = h @ np.asarray(params[-1]["w"], np.float64) + np.asarray(params[-1]["b"], np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return logp[np.arange(len(y)), y]


def tiny(sizes, seed=0, n=7):
    rng = np.random.default_rng(seed)
    params = tuple(
        {"w": rng.normal(size=(a, b)).astype(np.float32), "b": rng.normal(size=b).astype(np.float32) * 0.5}
        for a, b in zip(sizes[:-1], sizes[1:])
    )
    batch = {
        "x": rng.normal(size=(n, sizes[0])).astype(np.float32),
        "y": rng.integers(0, sizes[-1], n).astype(np.int32),
    }
    return params, batch


@pytest.mark.parametrize("sizes", [(5, 4, 3), (5, 4, 6, 3)], ids=["one-hidden", "two-hidden"])
def test_log_lik_matches_numpy(sizes):
    params, batch = tiny(sizes)
    got = np.asarray(mlp_log_lik(params, batch))
    assert got.shape == (7,)
    np.testing.assert_allclose(got, numpy_log_lik(params, batch["x"], batch["y"]), rtol=1e-5, atol=1e-5)
    probs = np.asarray(predict_proba(params, batch["x"]))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.log(probs[np.arange(7), batch["y"]]), got, rtol=1e-5, atol=1e-5)
    assert error_rate(probs, batch["y"]) == pytest.approx(np.mean(probs.argmax(1) != batch["y"]))


def test_gradient_matches_central_differences():
    params, batch = tiny((4, 3, 3), seed=1, n=5)
    with jax.enable_x64(True):
        p64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)
        b64 = {"x": jnp.asarray(batch["x"], jnp.float64), "y": jnp.asarray(batch["y"])}
        model = bayesian_mlp((4, 3, 3), prior_scale=2.0)

        @jax.jit
        def f(p):
            return model.log_prior(p) + jnp.sum(model.log_lik(p, b64))

        flat, unravel = ravel_pytree(p64)
        grad = np.asarray(ravel_pytree(jax.grad(f)(p64))[0])
        h = 1e-6
        fd = np.array(
            [(f(unravel(flat.at[i].add(h))) - f(unravel(flat.at[i].add(-h)))) / (2 * h) for i in range(flat.size)]
        )
    assert flat.size == 27  # (4 + 1) * 3 + (3 + 1) * 3
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


def test_prior_and_init():
    params, _ = tiny((5, 4, 3))
    flat = np.concatenate([np.ravel(a) for layer in params for a in (layer["w"], layer["b"])])
    lp = float(bayesian_mlp((5, 4, 3), prior_scale=2.0).log_prior(params))
    assert lp == pytest.approx(stats.norm.logpdf(flat, 0.0, 2.0).sum(), rel=1e-5)
    assert float(bayesian_mlp((5, 4, 3), prior_scale=None).log_prior(params)) == 0.0
    init = init_mlp(jax.random.key(0), (400, 30, 10))
    assert [(layer["w"].shape, layer["b"].shape) for layer in init] == [((400, 30), (30,)), ((30, 10), (10,))]
    assert np.std(np.asarray(init[0]["w"])) == pytest.approx(np.sqrt(2 / 400), rel=0.05)  # He initialisation
    assert not np.any(np.asarray(init[1]["b"]))


@pytest.mark.parametrize(
    "sizes, match",
    [
        ((5,), "at least an input"),
        ((5, 0, 3), "positive integer"),
        ((5, 4, 1), "at least 2 classes"),
        ((5, 2.5, 3), "positive integer"),
    ],
)
def test_bad_sizes_raise(sizes, match):
    with pytest.raises(ValueError, match=match):
        bayesian_mlp(sizes)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), True])
def test_bad_prior_scale_raises(scale):
    with pytest.raises(ValueError, match="prior_scale"):
        bayesian_mlp((5, 4, 3), prior_scale=scale)


def test_check_classification_data():
    _, batch = tiny((5, 4, 3))
    assert check_classification_data(batch, (5, 4, 3)) == 7
    with pytest.raises(ValueError, match=r"expected \(n, 6\)"):
        check_classification_data(batch, (6, 4, 3))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        check_classification_data({"x": batch["x"], "y": batch["y"] + 3}, (5, 4, 3))
    with pytest.raises(ValueError, match="integer class labels"):
        check_classification_data({"x": batch["x"], "y": batch["y"].astype(np.float32)}, (5, 4, 3))
    with pytest.raises(ValueError, match="one label per row"):
        check_classification_data({"x": batch["x"], "y": batch["y"][:3]}, (5, 4, 3))
