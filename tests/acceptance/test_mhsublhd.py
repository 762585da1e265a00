import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_ratio import acceptance_draws, exact_delta, population

from minibatch_mcmc import random_walk, sample
from minibatch_mcmc.acceptance import MHSubLhd, mh_sublhd
from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.acceptance.mhsublhd import stage_sizes, threshold_uniform
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean

N = 2000
M = 50
DRAWS = 20_000
SEED = 5
STAGES = [50, 75, 113, 170, 255, 383, 575, 863, 1295, 1943, 2000]  # b_{k+1} = min(N, ceil(1.5 b_k))


@functools.lru_cache(maxsize=None)
def _log_u(seed: int, draws: int) -> np.ndarray:
    """The ``log u`` each of ``acceptance_draws(..., draws, seed)``'s decisions compares with."""
    keys = jax.random.split(jax.random.key(seed), draws)
    return np.log(np.asarray(jax.vmap(threshold_uniform)(keys)), dtype=np.float64)


@functools.partial(jax.jit, static_argnums=0)
def _outcomes(test: MHSubLhd, data: jax.Array, psi: jax.Array, keys: jax.Array):
    """Full ``TestOutcome`` records of one decision per key (data and psi traced: one compile per test)."""

    def one(k):
        return test.decide(k, Statistics(lambda b: b, data, data.shape[0], psi, jnp.float32(1.0)))

    return jax.vmap(one)(keys)


def outcomes(test, r, psi, draws=500, seed=3):
    keys = jax.random.split(jax.random.key(seed), draws)
    return jax.device_get(_outcomes(test, jnp.asarray(r), jnp.float32(psi), keys)), _log_u(seed, draws)


def test_stage_schedule():
    assert stage_sizes(M, 1.5, N) == STAGES
    assert stage_sizes(50, 2.0, 420) == [50, 100, 200, 400, 420]
    assert stage_sizes(2, 1.01, 5) == [2, 3, 4, 5]  # ceil(gamma b) > b always: at least one more point


# (Delta, s.d. of Lambda_i = N l_i, skewed population, delta, finite-population bound). The spreads
# are small enough that many decisions stop before N (the range term 6 C log(3/delta_k)/t dominates).
CASES = [
    (-1.0, 0.5, False, 0.01, False),
    (-1.5, 2.0, True, 0.01, False),
    (-0.5, 5.0, False, 0.01, False),
    (0.5, 2.0, False, 0.01, False),
    (-1.0, 0.5, False, 0.3, False),
    (-1.0, 0.5, False, 0.01, True),
]


@pytest.mark.parametrize("delta_true, spread, skew, delta, fpc", CASES)
def test_acceptance_probability_within_delta(delta_true, spread, skew, delta, fpc):
    test = mh_sublhd(M, gamma=1.5, p=2.0, delta=delta, finite_population=fpc)
    r, psi = population(N, delta_true, spread, seed=4, skew=skew)
    d = exact_delta(r, psi)
    p = min(1.0, float(np.exp(d)))
    acc, bs, ds = acceptance_draws(test, r, psi, DRAWS, seed=SEED, optimise=True)
    se = np.sqrt(max(p * (1 - p), 1e-4) / DRAWS)
    # the stated guarantee: |P(accept) - min(1, e^Delta)| <= delta
    assert abs(acc.mean() - p) <= delta + 3 * se, (acc.mean(), p, bs.mean())
    # stronger, per decision: with the same u, the decision differs from the exact one w.p. <= delta
    mismatch = np.mean(acc != (_log_u(SEED, DRAWS) < d))
    assert mismatch <= delta + 3 * np.sqrt(delta * (1 - delta) / DRAWS), mismatch
    # looks only at the geometric stage sizes; a real fraction of decisions stop early
    assert set(np.unique(bs).tolist()) <= set(STAGES)
    assert np.mean(bs < N) > 0.15, bs.mean()
    # delta_star = N * (minibatch mean) + psi is exact when the minibatch is all of the data
    np.testing.assert_allclose(ds[bs == N], d, atol=2e-3)


def test_a_huge_spread_uses_all_data_and_is_exact_metropolis():
    r, psi = population(N, -0.7, 1e4, seed=3)
    d = exact_delta(r, psi)
    acc, bs, ds = acceptance_draws(mh_sublhd(M), r, psi, DRAWS, seed=SEED, optimise=True)
    assert np.all(bs == N)
    np.testing.assert_allclose(ds, d, atol=2e-3)
    p = float(np.exp(d))
    assert abs(acc.mean() - p) < 3 * np.sqrt(p * (1 - p) / DRAWS)
    assert np.mean(acc != (_log_u(SEED, DRAWS) < d)) < 1e-3  # only float32 ties could differ


def test_hidden_data_is_the_range_pass_unless_a_bound_is_given():
    r, psi = population(N, -1.0, 1.0, seed=1)
    c = float(np.max(np.abs(r)))
    emp, log_u = outcomes(mh_sublhd(M), r, psi)
    assert np.all(emp.hidden_data == N) and emp.hidden_data.dtype == np.int32
    # the exact range as an analytic bound: same decisions, same batches, no hidden data
    hook, _ = outcomes(mh_sublhd(M, range_bound=lambda s: jnp.float32(c)), r, psi)
    assert np.all(hook.hidden_data == 0)
    np.testing.assert_array_equal(hook.batch_size, emp.batch_size)
    np.testing.assert_array_equal(hook.accepted, emp.accepted)
    # a looser bound is still valid but needs more data
    loose, _ = outcomes(mh_sublhd(M, range_bound=lambda s: jnp.float32(4 * c)), r, psi)
    assert np.all(loose.hidden_data == 0) and loose.batch_size.mean() > emp.batch_size.mean()
    # half_width = N c_t at the deciding look: the interval Delta* +- half_width excluded log u; 0 at t = N
    early = emp.batch_size < N
    assert early.any() and (~early).any()
    assert np.all(emp.half_width[~early] == 0) and np.all(emp.s2[~early] == 0)
    assert np.all(np.abs(emp.delta_star[early] - log_u[early]) > emp.half_width[early])
    assert np.all(emp.half_width[early] > 0) and np.all(emp.s2[early] > 0)
    assert np.all(emp.epsilon == 0) and np.all(emp.pvalue_threshold == 0)  # one meaning per record column
    assert not emp.nonfinite.any()


def test_nan_ratio_and_zero_prior_reject():
    r, psi = population(N, 1.0, 1.0, seed=1)
    bad = r.copy()
    bad[17] = np.nan
    out, _ = outcomes(mh_sublhd(M), bad, psi, draws=20)
    assert out.nonfinite.all() and not out.accepted.any()  # the range pass sees every datum
    out, _ = outcomes(mh_sublhd(M), r, float("nan"), draws=20)
    assert out.nonfinite.all() and not out.accepted.any() and np.all(out.batch_size == M)
    out, _ = outcomes(mh_sublhd(M), r, -np.inf, draws=20)
    assert not out.accepted.any() and not out.nonfinite.any() and np.all(out.batch_size == M)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gamma": 1.0}, "gamma=1.0 must be a finite number > 1"),
        ({"gamma": 0.5}, "gamma=0.5"),
        ({"gamma": float("inf")}, "gamma=inf"),
        ({"p": 1.0}, "p=1.0 must be a finite number > 1"),
        ({"p": -2}, "p=-2"),
        ({"delta": 0.0}, "delta=0.0 must be a number in the open interval \\(0, 1\\)"),
        ({"delta": 1.0}, "delta=1.0"),
        ({"delta": -0.1}, "delta=-0.1"),
        ({"batch_size": 1}, "batch_size m=1 must be an integer >= 2"),
        ({"batch_size": 50.0}, "batch_size m=50.0"),
        ({"finite_population": 1}, "finite_population=1"),
        ({"range_bound": 3.0}, "range_bound=3.0"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mh_sublhd(**kwargs)


def test_batch_larger_than_data_is_rejected():
    with pytest.raises(ValueError, match="m=60 exceeds the number of data points N=50"):
        mh_sublhd(60).validate(50)
    mh_sublhd(50).validate(50)


# ---- the conjugate Gaussian mean model: the chain targets the exact (tempered) posterior ----

ND, D, K = 5000, 2, 50.0
SETTINGS = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)
RNG = np.random.default_rng(42)
X = RNG.normal([1.0, -0.5], 1.0, size=(ND, D)).astype(np.float32)
# the log ratio is affine in x_i, so its largest |value| over the data's bounding box is at a corner:
# an analytic C from 2^D evaluations instead of N
CORNERS = jnp.asarray(np.array(list(itertools.product(*zip(X.min(0), X.max(0))))), jnp.float32)


def corner_bound(stats: Statistics) -> jax.Array:
    return jnp.max(jnp.abs(stats.log_ratio(CORNERS)))


@pytest.mark.parametrize("range_bound", [None, corner_bound], ids=["empirical-C", "analytic-C"])
def test_sampler_recovers_exact_posterior(range_bound):
    mean, var = exact_posterior(X, K, SETTINGS)
    sd = float(np.sqrt(var))
    res = sample(
        gaussian_mean(SETTINGS),
        X,
        jnp.asarray(mean + 2 * sd, jnp.float32),
        proposal=random_walk(scale=1.2 * sd),
        test=mh_sublhd(batch_size=50, gamma=1.5, p=2.0, delta=0.01, range_bound=range_bound),
        num_samples=3000,
        num_chains=4,
        temperature=K,
        key=123,
        progress=False,
    )
    chk = check_moments(np.asarray(res.positions)[:, 500:], mean, var)
    assert np.all(chk.ess > 400), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    s = res.summary()
    assert 0.1 < s["acceptance_rate"] < 0.9
    assert s["hidden_data_per_test"] == (ND if range_bound is None else 0)
    assert 50 <= s["mean_batch_size"] < ND
