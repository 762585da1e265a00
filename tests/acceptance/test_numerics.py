"""Numerical safety: minibatch tests at N = 10^9 scale factors, integer-safe counts, and non-finite ratios
reported by the driver with the step, chain and datum for every acceptance test."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import random_walk, sample
from minibatch_mcmc.acceptance import (
    BarkerTest,
    MetropolisTest,
    austere_mh,
    austere_mh_adaptive,
    mh_minibatch,
    mh_sublhd,
    naive_minibatch,
)
from minibatch_mcmc.acceptance.austere import AustereDesign
from minibatch_mcmc.acceptance.base import Statistics, uniform_from_bits
from minibatch_mcmc.acceptance.mhsublhd import threshold_uniform
from minibatch_mcmc.models import Model, gaussian_mixture

SCALE = 10**9
"""The scale factor ``N / K`` of the per-datum ratios."""
C = 2.0**-20 * 1.37
"""Common per-datum ratio: ``SCALE * C`` is about 1307, cancelled by ``psi`` to leave a Delta of order 1."""
S = 2.0**-31
"""Spread: ``r_i = C + S ((i mod 5) - 2)``, so ``sum_i r_i = N C`` exactly when N is a multiple of 5."""
KEYS = 32


def _ratio(rows):
    return jnp.float32(C) + jnp.float32(S) * ((rows % 5) - 2).astype(jnp.float32)


def _range_bound(stats):
    return jnp.float32(C + 2 * S)


TESTS = {
    "mhminibatch": mh_minibatch(50, sigma=1.0),
    "austere_c": austere_mh(50, 0.01),
    "mhsublhd": mh_sublhd(50, range_bound=_range_bound),
    "naive": naive_minibatch(100),
}


def _threshold(name, key):
    """``log u`` of the Metropolis-type tests (the exact test accepts iff ``log u < Delta``)."""
    if name == "mhsublhd":
        return float(np.log(threshold_uniform(key)))
    return float(np.log(uniform_from_bits(jax.random.bits(key, (5,), dtype=jnp.uint32)[4], jnp.float32)))


def _check_at_scale(name, out, keys, delta):
    assert not out.nonfinite.any()
    # MHSubLhd's range term 6 C log(3/delta_k) / t is set by max |l_i| (the common part C included),
    # so at N = 20,000 it uses every point; the others stop after a few chunks
    assert np.all((out.batch_size >= 2) & (out.batch_size <= (20_000 if name == "mhsublhd" else 1000)))
    for field in ("s2", "epsilon", "pvalue_threshold", "half_width", "delta_star"):
        assert np.all(np.isfinite(getattr(out, field))), field
    # Lambda_i = SCALE r_i has s.d. SCALE S sqrt(2) = 0.66: the estimate is within a few s.e. of Delta = 0.4
    se = np.sqrt(np.maximum(out.s2, 0)) + 0.66 * np.sqrt(2.0 / out.batch_size)
    assert np.all(np.abs(out.delta_star - delta) < 5 * se + 2e-3), (out.delta_star, delta)
    if name == "mhminibatch":
        assert np.all(out.s2 < 1.0)  # stopped with Var(delta_star) < sigma^2 = 1
        return
    thresholds = np.array([_threshold(name, k) for k in keys])
    clear = np.abs(thresholds - delta) > 1.5  # far from the boundary: the minibatch decision is the exact one
    assert clear.sum() >= 5
    np.testing.assert_array_equal(out.accepted[clear], (thresholds < delta)[clear])


@pytest.mark.parametrize("name", sorted(TESTS))
def test_minibatch_tests_at_a_billion_scale_factor(name):
    """N = 20,000 rows at K = 2e-5: every ratio is multiplied by N / K = 10^9, as for 10^9 points at K = 1."""
    n, temperature = 20_000, np.float32(20_000 / SCALE)
    test = TESTS[name]
    psi = np.float32(-SCALE * C + 0.4)
    delta = n * C / np.float64(temperature) + np.float64(psi)

    @jax.jit
    def decide(keys):
        data = jnp.arange(n, dtype=jnp.int32)
        return jax.vmap(
            lambda k: test.decide(k, Statistics(_ratio, data, n, jnp.float32(psi), jnp.float32(temperature)))
        )(keys)

    keys = jax.random.split(jax.random.key(7), KEYS)
    _check_at_scale(name, jax.device_get(decide(keys)), keys, delta)


def test_naive_at_a_billion_points():
    """A virtual data set of N = 10^9 rows, row i holding i (a gather from an iota is never materialised)."""
    n = 10**9
    test = TESTS["naive"]
    test.validate(n)
    psi = np.float32(-n * C + 0.4)
    delta = n * C + np.float64(psi)

    @jax.jit
    def decide(keys):
        data = jax.lax.iota(jnp.int32, n)
        return jax.vmap(lambda k: test.decide(k, Statistics(_ratio, data, n, jnp.float32(psi), jnp.float32(1.0))))(keys)

    keys = jax.random.split(jax.random.key(7), KEYS)
    _check_at_scale("naive", jax.device_get(decide(keys)), keys, delta)


def test_austere_nc_refuses_n_whose_hidden_count_overflows():
    design = AustereDesign(jnp.asarray([0.0]), jnp.asarray([50]), jnp.asarray([0.01]), 50)
    austere_mh_adaptive(design).validate(10**9)
    with pytest.raises(ValueError, match="2N = 2400000000 hidden evaluations"):
        austere_mh_adaptive(design).validate(1_200_000_000)


BROKEN = {
    "metropolis": MetropolisTest(),
    "barker": BarkerTest(),
    "mhminibatch": mh_minibatch(10),
    "austere_c": austere_mh(10, 0.05),
    "mhsublhd": mh_sublhd(10),
    "naive": naive_minibatch(10),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_nonfinite_log_likelihood_names_step_chain_and_datum(name):
    """NaN for data x > 0.5 once theta_0 > 0.5 (candidates only): every test stops with the datum named."""
    base = gaussian_mixture()

    def log_lik(theta, x):
        return jnp.where((x > 0.5) & (theta[0] > 0.5), jnp.nan, base.log_lik(theta, x))

    x = np.linspace(-1.0, 1.0, 64, dtype=np.float32)  # data 48..63 are > 0.5
    with pytest.raises(
        FloatingPointError, match=r"at step \d+, chain [01]; datum 48 has log-likelihood nan at the proposed candidate"
    ):
        sample(
            Model(base.log_prior, log_lik, "broken"),
            x,
            jnp.array([0.45, 0.0]),
            proposal=random_walk(scale=0.3),
            test=BROKEN[name],
            num_samples=40,
            num_chains=2,
            block_size=40,
            progress=False,
        )
