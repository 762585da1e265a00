"""The model contract, checked before any pass: a ``log_lik`` of the wrong shape or dtype, a non-finite start, or a
``log_lik`` that is not a pure function (``np.random`` at trace time) is one clear ``ValueError`` naming the model, what
it returned and what is allowed, from ``warmup`` (so ``auto_sample``) and from ``sample``.

Before, ``warmup`` failed 8-15 frames deep in the mode search (numpy's AxisError 'axis 1 is out of bounds' for a
scalar, 'all the input arrays must have same number of dimensions' for ``(n, 1)``, JAX's 'Incompatible shapes for
broadcasting' for ``(n, 3)``), and a ``log_lik`` calling ``np.random.normal()`` sampled with acceptance 0, no error."""

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import models
from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample
from minibatch_mcmc.warmup import warmup

GAUSS = models.gaussian_mean()
X = (np.random.default_rng(0).standard_normal((300, 2)) + 1.0).astype(np.float32)
SMALL = dict(key=0, num_windows=2, window_size=20, num_starts=0)

BAD_SHAPES = {
    "a scalar": lambda t, b: jnp.sum(GAUSS.log_lik(t, b)),
    r"shape \(2, 1\)": lambda t, b: GAUSS.log_lik(t, b)[:, None],
    r"shape \(2, 3\)": lambda t, b: jnp.stack([GAUSS.log_lik(t, b)] * 3, axis=1),
    r"shape \(2,\) of dtype int32": lambda t, b: jnp.round(GAUSS.log_lik(t, b)).astype(jnp.int32),
}


@pytest.mark.parametrize("returned", list(BAD_SHAPES))
def test_log_lik_of_the_wrong_shape_or_dtype_is_one_clear_error(returned):
    """A scalar, ``(b, 1)``, ``(b, 3)`` or integer ``log_lik``: 'model 'bad': log_lik(theta, batch) returned <what> for a batch
    of 2 rows; it must return one floating-point value per row, shape (2,)' from ``warmup``, before any pass."""
    model = Model(GAUSS.log_prior, BAD_SHAPES[returned], "bad")
    with pytest.raises(
        ValueError,
        match=rf"^model 'bad': log_lik\(theta, batch\) returned {returned}.* for a batch of 2 rows; "
        r"it must return one floating-point value per row, shape \(2,\)",
    ) as err:
        warmup(model, X, jnp.zeros(2), **SMALL)
    assert "\n" not in str(err.value)


def test_log_lik_with_numpy_random_numbers_is_refused_by_warmup_and_sample():
    """``np.random.normal()`` inside ``log_lik`` is a constant fixed at trace time, different in each trace: both entries
    name the model and say it must be a pure function (before: ``sample`` accepted 0 of 200 steps, silently)."""
    model = Model(GAUSS.log_prior, lambda t, b: GAUSS.log_lik(t, b) + np.random.normal(), "noisy")
    pattern = (
        r"^model 'noisy': log_lik gave different values for the same theta and rows in two traces .* pure function"
    )
    with pytest.raises(ValueError, match=pattern):
        warmup(model, X, jnp.zeros(2), **SMALL)
    with pytest.raises(ValueError, match=pattern):
        sample(
            model,
            X,
            jnp.ones(2),
            proposal=random_walk(scale=0.05),
            test=MetropolisTest(),
            num_samples=10,
            progress=False,
        )


def test_non_finite_start_names_the_rows_and_a_bad_prior_is_named():
    """Row 1 of the two first rows is outside a model's support (-inf at the start): the rows and values are named; a
    vector prior is refused."""
    x = np.abs(X)
    x[1, 0] = -1.0
    positive = Model(GAUSS.log_prior, lambda t, b: GAUSS.log_lik(t, b) + jnp.log(b[:, 0] > 0), "positive")
    with pytest.raises(
        ValueError, match=r"^model 'positive': log_lik is not finite at the start for rows \[1\] \(values \[-inf\]\)"
    ):
        warmup(positive, x, jnp.zeros(2), **SMALL)
    vector_prior = GAUSS._replace(log_prior=lambda t: -0.5 * t**2, name="vprior")
    with pytest.raises(
        ValueError,
        match=r"^model 'vprior': log_prior returned shape \(2,\) of dtype float32; it must return a "
        "floating-point scalar",
    ):
        warmup(vector_prior, X, jnp.zeros(2), **SMALL)
