"""Multi-start mode search (the mirror modes of x ~ N(theta^2, 1) are in tests/warmup/test_warmup_modes.py): the label-switched modes of a symmetric
two-component mixture are both found from one start; a unimodal logistic posterior costs the Adam minibatches
alone (no full-data polish, one mode)."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from jax.scipy.special import logsumexp

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.models.base import Model, gaussian_prior
from minibatch_mcmc.models.logistic import make_logistic_data
from minibatch_mcmc.optim.mode import find_mode, laplace_covariance
from minibatch_mcmc.warmup.multistart import LocalMode, adam_ends, modes_from_ends


def first_mode(model, data, theta0):
    m = find_mode(model, data, theta0, key=0)
    return LocalMode(m.theta_hat, m.log_posterior, laplace_covariance(m.hessian))


def search(model, data, first, key, num_starts=8, steps=300, b=256):
    """The warm-up's search: Adam from ``num_starts`` dispersed starts (``adam_ends``), then ``modes_from_ends``."""
    source = as_data_source(data)
    flat, unravel = ravel_pytree(first.theta)
    found = adam_ends(
        model,
        source.arrays(),
        source.n,
        flat[None],
        unravel,
        key,
        1.0,
        steps,
        min(b, source.n),
        0.05,
        shared=True,
        dispersed=num_starts,
    )
    ends = found.ends[1:][found.ok[1:]]
    return ends, modes_from_ends(model, source, first, ends, 1.0, 10, 0, time.perf_counter())


def mixture_model():
    """``x ~ 0.5 N(mu_1, 1) + 0.5 N(mu_2, 1)``, prior ``N(0, 10^2)``: modes at (a, b) and (b, a)."""

    def log_lik(theta, x):
        return logsumexp(jnp.stack([-0.5 * (x - theta[0]) ** 2, -0.5 * (x - theta[1]) ** 2]), axis=0) - jnp.log(2.0)

    return Model(log_prior=gaussian_prior(0.0, 10.0), log_lik=log_lik, name="mixture")


@pytest.mark.slow
def test_label_switched_mixture_modes_are_both_found():
    """Data from N(-2, 1) and N(2, 1): the search from (-1, 1) also finds (2, -2), with the same log density."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(-2, 1, 1000), rng.normal(2, 1, 1000)]).astype(np.float32)
    model = mixture_model()
    _, found = search(model, x, first_mode(model, x, jnp.asarray([-1.0, 1.0])), jax.random.key(0))
    pos = [np.asarray(m.theta) for m in found.modes]
    assert len(pos) == 2, pos
    np.testing.assert_allclose(pos[1], pos[0][::-1], atol=0.02)
    assert abs(found.modes[0].log_posterior - found.modes[1].log_posterior) < 0.05


def test_unimodal_search_reads_no_full_pass():
    """A logistic posterior: eight finite Adam ends, one mode, and no full-data pass or polish after Adam."""
    rng = np.random.default_rng(0)
    data = {
        "x": np.column_stack([np.ones(3000), rng.standard_normal(3000)]).astype(np.float32),
        "y": rng.integers(0, 2, 3000).astype(np.int32),
    }
    model = logistic_regression(prior_scale=5.0)
    ends, found = search(model, data, first_mode(model, data, jnp.zeros(2)), jax.random.key(2))
    assert len(ends) == 8 and len(found.modes) == 1 and found.data_used == 0


def test_far_adam_ends_of_a_unimodal_posterior_cost_a_few_passes_not_one_each():
    """Issue 31: above ``MAX_ENSEMBLE_DIM`` parameters Adam's ends reach ``modes_from_ends`` unfiltered, tens of Laplace
    s.d.s from the mode (minibatch noise); each then cost a Hessian pass and a Newton polish (35 passes over N for 8 ends
    on a 305-parameter GLMM). Here 8 ends ~19 s.d.s from a 40-parameter logistic mode: one mode, at most 3 passes over N
    (the issue's warm-up budget) whatever the number of ends; the original code read at least one pass per end."""
    data, _ = make_logistic_data(jax.random.key(4), 4000, 40)
    model = logistic_regression(prior_scale=5.0)
    first = first_mode(model, data, jnp.zeros(40))
    chol = np.linalg.cholesky(first.covariance)
    z = np.random.default_rng(1).standard_normal((8, 40))
    ends = np.asarray(first.theta, np.float64) + 3.0 * z @ chol.T
    found = modes_from_ends(model, as_data_source(data), first, ends, 1.0, 10, 0, 0.0)
    assert len(found.modes) == 1
    assert found.data_used <= 3 * 4000, found.data_used / 4000


def test_an_end_at_another_mode_is_still_followed():
    """The chord steps towards the first mode do not swallow an end sitting at the mixture's label-switched mode."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(-2, 1, 1000), rng.normal(2, 1, 1000)]).astype(np.float32)
    model = mixture_model()
    first = first_mode(model, x, jnp.asarray([-1.0, 1.0]))
    other = np.asarray(first.theta, np.float64)[::-1] + 0.05
    found = modes_from_ends(model, as_data_source(x), first, other[None], 1.0, 10, 0, 0.0)
    assert len(found.modes) == 2
    np.testing.assert_allclose(np.asarray(found.modes[1].theta), np.asarray(first.theta)[::-1], atol=0.02)
