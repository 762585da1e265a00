"""Every shipped model checks its parameter's and the data's shapes, naming expected and given (issue 13)."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import BarkerTest, random_walk, sample
from minibatch_mcmc.models import (
    bayesian_mlp,
    gaussian_mean,
    gaussian_mixture,
    ica,
    init_mlp,
    l1_regression,
    logistic_regression,
    make_mixture_data,
    tied_mixture,
    variable_selection,
)

REG = {"x": np.zeros((6, 3), np.float32), "y": np.zeros(6, np.float32)}
MLP_DATA = {"x": np.zeros((6, 4), np.float32), "y": np.zeros(6, np.int32)}

CASE_NAMES = (
    "bayesian_mlp",
    "gaussian_mean",
    "gaussian_mixture",
    "ica",
    "l1_regression",
    "logistic_regression",
    "tied_mixture",
    "variable_selection",
)


@functools.cache
def cases() -> dict[str, tuple]:
    """Each model with good and bad inputs, built on first use (not in every worker's collection)."""
    return {
        # name: (model, good theta, good batch, bad theta + message, bad batch + message)
        "gaussian_mean": (
            gaussian_mean(),
            np.zeros(3),
            np.zeros((6, 3)),
            (np.zeros((3, 1)), "theta has shape (3, 1); expected (d,)"),
            (np.zeros((6, 2)), "batch has shape (6, 2); expected (b, 3) (from d=3)"),
        ),
        "gaussian_mixture": (
            gaussian_mixture(),
            np.zeros(2),
            np.zeros(6),
            (np.zeros(1), "theta has shape (1,); expected (2,)"),
            (np.zeros((6, 1)), "batch has shape (6, 1); expected (b,)"),
        ),
        "logistic_regression": (
            logistic_regression(),
            np.zeros(3),
            REG,
            (np.zeros((3, 2)), "theta has shape (3, 2); expected (d,)"),
            ({"x": REG["x"], "y": np.zeros(5)}, "batch['y'] has shape (5,); expected (6,)"),
        ),
        "l1_regression": (
            l1_regression(),
            np.zeros(3),
            REG,
            (np.float32(0.0), "theta has shape (); expected (d,)"),
            ({"x": REG["x"]}, "batch has structure"),
        ),
        "tied_mixture": (
            tied_mixture(5),
            np.zeros(5),
            np.zeros(6),
            (np.zeros(4), "theta has shape (4,); expected (5,)"),
            (np.zeros((6, 5)), "batch has shape (6, 5); expected (b,)"),
        ),
        "ica": (
            ica(),
            np.eye(3),
            {"x": np.zeros((6, 3))},
            (np.eye(3)[:2], "theta has shape (2, 3); expected (D, D)"),
            ({"x": np.zeros((6, 4))}, "batch['x'] has shape (6, 4); expected (b, 3)"),
        ),
        "variable_selection": (
            variable_selection(3, lam=1.0),
            {"beta": np.zeros(3), "gamma": np.ones(3)},
            REG,
            ({"beta": np.zeros(2), "gamma": np.ones(2)}, "theta['beta'] has shape (2,); expected (3,)"),
            ({"x": np.zeros((6, 4)), "y": np.zeros(6)}, "batch['x'] has shape (6, 4); expected (b, 3)"),
        ),
        "bayesian_mlp": (
            bayesian_mlp((4, 5, 3)),
            init_mlp(jax.random.key(0), (4, 5, 3)),
            MLP_DATA,
            (init_mlp(jax.random.key(0), (4, 6, 3)), "theta[0]['b'] has shape (6,); expected (5,)"),
            ({"x": np.zeros((6, 5)), "y": MLP_DATA["y"]}, "batch['x'] has shape (6, 5); expected (b, 4)"),
        ),
    }


def test_the_case_names_are_the_cases():
    assert CASE_NAMES == tuple(sorted(cases()))  # a case missing from CASE_NAMES would never run


@pytest.mark.parametrize("name", CASE_NAMES)
def test_shipped_model_checks_parameter_and_data_shapes(name):
    model, theta, batch, (bad_theta, theta_msg), (bad_batch, batch_msg) = cases()[name]
    assert model.check_shapes is not None
    model.check_shapes(theta, batch)
    with pytest.raises(ValueError, match=re.escape(f"{name}: the parameter {theta_msg}")):
        model.check_shapes(bad_theta, batch)
    with pytest.raises(ValueError, match=re.escape(f"{name}: the data {batch_msg}")):
        model.check_shapes(theta, bad_batch)


def test_non_numeric_parameter_is_named():
    with pytest.raises(
        ValueError, match="gaussian_mixture: the parameter theta must be an array of real numbers; got 'ab'"
    ):
        gaussian_mixture().check_shapes("ab", np.zeros(4))


@pytest.fixture(scope="module")
def mixture_data():
    return make_mixture_data(jax.random.key(0), 500)


@pytest.mark.parametrize("start, shape", [(jnp.zeros(1), "(1,)"), (jnp.zeros(3), "(3,)"), (jnp.float32(0.0), "()")])
def test_sample_refuses_a_start_of_another_shape(mixture_data, start, shape):
    # before: a 1-element start sampled another model (JAX clamps theta[1]), a 3-element start random-walked
    # its extra coordinate, a scalar start failed inside JAX
    with pytest.raises(
        ValueError, match=re.escape(f"gaussian_mixture: the parameter theta has shape {shape}; expected (2,)")
    ):
        sample(
            gaussian_mixture(),
            mixture_data,
            start,
            proposal=random_walk(scale=0.1),
            test=BarkerTest(),
            num_samples=3,
            progress=False,
        )


def test_sample_refuses_a_string_key(mixture_data):
    with pytest.raises(ValueError, match=re.escape("key='abc' must be an int seed or a jax PRNG key")):
        sample(
            gaussian_mixture(),
            mixture_data,
            jnp.zeros(2),
            proposal=random_walk(scale=0.1),
            test=BarkerTest(),
            num_samples=3,
            key="abc",
            progress=False,
        )
