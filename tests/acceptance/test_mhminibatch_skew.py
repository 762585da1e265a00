"""Skew-corrected MHminibatch (supplement E): the tables C_{sigma,kappa}, their sampler, the acceptance probability.

Every reference here is computed in the test, in float64, independently of the code under test: the
Edgeworth kernel's CDF from scipy.stats, the convolution of the tabulated atoms with it, the exact Barker
probability ``1 / (1 + exp(-Delta))``, and the exact finite-population moments of a minibatch mean.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_correction import implied_alias_probs
from helpers_ratio import acceptance_draws
from scipy import stats

from minibatch_mcmc.acceptance import Statistics, mh_minibatch, mh_minibatch_skew
from minibatch_mcmc.acceptance.correction import SKEW_PATH, load_correction, load_skew_correction
from minibatch_mcmc.acceptance.correction_lp import solve_correction
from minibatch_mcmc.acceptance.correction_skew_lp import edgeworth_kernel, kappa_grid
from minibatch_mcmc.acceptance.mhminibatch import minibatch_stats, random_inputs, read_minibatch
from minibatch_mcmc.acceptance.mhminibatch_skew import make_skew_sampler, skew_correction_from_uniforms, skew_kappa
from minibatch_mcmc.data.indexing import chunk_indices

X = np.arange(-45.0, 45.0, 0.0037) + 0.0011  # offset from, and finer than, the builder's grid


def kernel_cdf(x: np.ndarray, kappa: float) -> np.ndarray:
    """CDF of the density ``phi - kappa phi'''`` (sigma = 1): ``Phi(x) - kappa (x^2 - 1) phi(x)``."""
    return stats.norm.cdf(x) - kappa * (x * x - 1.0) * stats.norm.pdf(x)


def convolved_error(support: np.ndarray, probs: np.ndarray, kappa: float) -> float:
    """Sup over ``X`` of ``|sum_j p_j K_kappa(x - y_j) - logistic CDF(x)|``."""
    keep = probs > 0
    y, p = support[keep], probs[keep]
    cdf = np.concatenate([kernel_cdf(xx[:, None] - y[None, :], kappa) @ p for xx in np.array_split(X, 8)])
    return float(np.max(np.abs(cdf - stats.logistic.cdf(X))))


def mixture(table, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """The masses and atoms the runtime draws for ``kappa``: linear mix of the two rows around ``|kappa|``, mirrored if < 0."""
    step = table.kappas[1] - table.kappas[0]
    low = min(int(np.floor(abs(kappa) / step)), table.kappas.size - 2)
    w = abs(kappa) / step - low
    probs = (1 - w) * table.probs[low] + w * table.probs[low + 1]
    return (np.sign(kappa) or 1.0) * table.support, probs


@pytest.mark.parametrize("kappa", [0.0, 0.002, 0.05, 0.1, 0.0013, 0.0437, -0.0437, -0.0999])
def test_rows_and_their_mixtures_convolve_to_the_logistic(kappa):
    """C_kappa convolved with the skewed kernel matches the logistic CDF to the table's stated error (rows, mixtures, mirror).

    Power: the table's stated error is below 1e-6; the kappa = 0.1 row convolved with the wrong kernel
    (kappa = 0: the plain Gaussian) misses by over 1e-3, so a row built for a wrong or mis-signed kappa fails.
    """
    table = load_skew_correction(1.0)
    assert table.max_cdf_error < 1e-6
    support, probs = mixture(table, kappa)
    assert convolved_error(support, probs, kappa) <= table.max_cdf_error * (1 + 1e-3) + 1e-12
    if abs(kappa) > 0.04:
        assert convolved_error(support, probs, 0.0) > 1000 * table.max_cdf_error
        assert convolved_error(support, probs, -kappa) > 1000 * table.max_cdf_error


def test_kappa_zero_row_is_the_plain_table_and_alias_arrays_are_exact():
    table, plain = load_skew_correction(1.0), load_correction(1.0)
    np.testing.assert_array_equal(table.support, plain.support)
    np.testing.assert_array_equal(table.probs[0], plain.probs)
    np.testing.assert_allclose(table.kappas, kappa_grid(), rtol=0, atol=1e-15)
    for row in range(table.kappas.size):
        np.testing.assert_allclose(
            implied_alias_probs(table.alias_prob[row], table.alias_index[row], table.support.size),
            table.probs[row],
            rtol=0,
            atol=1e-12,
        )
    assert SKEW_PATH.stat().st_size < 2 * 2**20


@pytest.mark.parametrize("kappa", [0.0437, -0.0437, 0.3])
def test_runtime_draws_follow_the_two_row_mixture(kappa):
    """2^20 draws from three uniforms: P(X <= t) at five points and E X^3 within 5 s.e. of the exact mixture.

    Power: E X^3 of C_kappa is about -6 kappa (its third cumulant cancels the kernel's 6 kappa), 0.26 here,
    against a s.e. near 0.012: a missing mirror (sign flip) or the plain row (E X^3 = 0) fails by > 20 s.e.
    A kappa beyond the table (0.3) draws from the last row.
    """
    table = load_skew_correction(1.0)
    sampler = make_skew_sampler(table)
    u = jax.random.uniform(jax.random.key(5), (3, 2**20), jnp.float32)
    x = np.asarray(
        jax.jit(
            lambda u: skew_correction_from_uniforms(jnp.float32(np.clip(kappa, -0.1, 0.1)), u[0], u[1], u[2], sampler)
        )(u),
        np.float64,
    )
    support, probs = mixture(table, float(np.clip(kappa, -0.1, 0.1)))
    m3 = probs @ support**3
    se3 = np.sqrt((probs @ support**6 - m3**2) / x.size)
    assert abs(np.mean(x**3) - m3) < 5 * se3, (np.mean(x**3), m3, se3)
    assert abs(m3 + 6 * np.clip(kappa, -0.1, 0.1)) < 0.02  # the third cumulant of the kernel is 6 kappa
    for t in (-3.0, -1.05, 0.0, 1.05, 3.0):
        p = probs[support <= t].sum()
        assert abs(np.mean(x <= t) - p) < 5 * np.sqrt(p * (1 - p) / x.size) + 1e-12, t


def exponential_population(n: int, b: int, s: float, seed: int) -> tuple[np.ndarray, dict]:
    """Per-datum ratios ``r`` (``Lambda = n r``) of an exponential shape, with ``sd(delta_star) = s`` at ``b``; exact moments."""
    z = np.random.default_rng(seed).exponential(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    r = (z * s * np.sqrt(b / (1 - b / n)) / n).astype(np.float32)
    lam = r.astype(np.float64) * n
    c, f = lam - lam.mean(), b / n
    k2, k3 = np.sum(c**2) / (n - 1), n * np.sum(c**3) / ((n - 1) * (n - 2))
    return r, {"mu": lam.mean(), "var": k2 * (1 - f) / b, "m3": k3 * (1 - f) * (1 - 2 * f) / b**2}


def minibatch_draws(r: np.ndarray, b: int, sigma: float, keys: jax.Array) -> tuple[np.ndarray, ...]:
    """Per key: the minibatch mean and variance of ``delta_star``, its ``kappa`` and ``N`` times the first chunk's mean
    (the plain and the skew-corrected test with the same ``b`` and ``sigma`` read the same minibatch of each key)."""
    n = r.size

    @jax.jit
    def run(data, keys):
        def batch(key):
            st_in = Statistics(lambda x: x, data, n, jnp.float32(0.0), jnp.float32(1.0))
            mom_k = read_minibatch(key, st_in, b, sigma, None)
            st = minibatch_stats(mom_k, n)
            idx, _ = chunk_indices(key, jnp.zeros((), jnp.int32), b, n, random_inputs(key)[0])
            return st.mean, st.s2, skew_kappa(mom_k, n, st.s2), jnp.mean(data[idx]) * n

        return jax.vmap(batch)(keys)

    return tuple(np.asarray(a, np.float64) for a in run(jnp.asarray(r), keys))


def barker_error_rao_blackwell(test, mom: dict, draws: tuple[np.ndarray, ...]) -> tuple[float, float]:
    """``P(accept) - 1/2`` at ``Delta = 0`` and its s.e.: exact given each minibatch (``minibatch_draws``), first-chunk
    powers as control variates."""
    mean, s2, kappa, first = draws
    if hasattr(test.correction, "kappa_step"):
        table = load_skew_correction(test.sigma)
        rows = [mixture(table, float(np.clip(k, -0.1, 0.1))) for k in kappa]
        atoms, masses = np.stack([y for y, _ in rows]), np.stack([q for _, q in rows])
    else:
        plain = load_correction(test.sigma)
        atoms, masses = plain.support[None, :], plain.probs[None, :]
    w = np.sqrt(1.0 - s2)
    d = mean - mom["mu"]
    p = np.sum(masses * stats.norm.cdf((d[:, None] + atoms) / w[:, None]), axis=1)  # zero masses add exactly 0
    u = first - mom["mu"]
    x = np.column_stack([np.ones_like(u), u, u**2 - mom["var"], u**3 - mom["m3"]])
    beta, *_ = np.linalg.lstsq(x, p, rcond=None)
    se = np.std(p - x @ beta, ddof=4) / np.sqrt(p.size)
    return float(beta[0] - 0.5), float(se)


def test_skew_correction_removes_most_of_the_error_on_an_exponential_population():
    """At b = 50, s = 0.6, Delta = 0 the plain test errs by about s^3 / (12 sqrt(b)) = 2.5e-3 (theory: -kappa/8).

    The probability of acceptance given each minibatch is computed exactly (the tables' masses convolved
    with N(0, 1 - s2)), so the only Monte Carlo error is over minibatches; with 6000 of them and control
    variates the s.e. is near 1.5e-4. Checks: the plain error is above 10 s.e.; the corrected error is
    below a third of the plain one. Power: a correction of the wrong sign doubles the error, a missing
    one leaves it unchanged: both fail by over 10 s.e. ``decide`` draws through these same functions
    (test_runtime_draws_follow_the_two_row_mixture; the slow test below checks ``decide`` end to end).
    """
    n, b, s = 20_000, 50, 0.6
    r, mom = exponential_population(n, b, s, seed=3)
    keys = jax.random.split(jax.random.key(9), 6000)
    plain, skew = mh_minibatch(b), mh_minibatch_skew(b)
    assert (plain.batch_size, plain.sigma) == (skew.batch_size, skew.sigma)
    draws = minibatch_draws(r, b, plain.sigma, keys)  # the same minibatches for both tests
    e_plain, se_plain = barker_error_rao_blackwell(plain, mom, draws)
    e_skew, se_skew = barker_error_rao_blackwell(skew, mom, draws)
    assert se_plain < 3e-4 and se_skew < 3e-4
    assert e_plain > 10 * se_plain and abs(e_plain - s**3 / (12 * np.sqrt(b))) < 0.25 * e_plain + 3 * se_plain
    assert abs(e_skew) < e_plain / 3, (e_plain, e_skew, se_plain, se_skew)


@pytest.mark.slow
def test_decide_end_to_end_on_an_exponential_population():
    """``decide`` itself over 1.5e6 keys: the corrected test's P(accept) at Delta = 0 is within 4 s.e. (4e-4) of 1/2,
    the plain test's is above 1/2 by more than 4 s.e. (its error 2.5e-3 is about 6 s.e.)."""
    n, b, s = 20_000, 50, 0.6
    r, mom = exponential_population(n, b, s, seed=3)
    psi = float(-mom["mu"])
    draws = 1_500_000
    se = 0.5 / np.sqrt(draws)
    plain = acceptance_draws(mh_minibatch(b), r, psi, draws, seed=4)[0].mean()
    skew = acceptance_draws(mh_minibatch_skew(b), r, psi, draws, seed=4)[0].mean()
    assert plain - 0.5 > 4 * se, plain
    assert abs(skew - 0.5) < 4 * se, skew


def test_same_rows_as_the_plain_test():
    """Both tests read the same minibatch for the same key (equal data): same batch size and delta_star."""
    r, mom = exponential_population(5_000, 50, 1.2, seed=1)  # s > 1: the minibatch grows
    a = acceptance_draws(mh_minibatch(50), r, 0.0, 300, seed=2)
    c = acceptance_draws(mh_minibatch_skew(50), r, 0.0, 300, seed=2)
    np.testing.assert_array_equal(a[1], c[1])
    np.testing.assert_array_equal(a[2], c[2])
    assert a[1].max() > 50


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 2}, "batch_size m=2"),
        ({"sigma": 0.7}, "sigma=0.7"),
        ({"sigma": 2.0}, "sigma=2.0"),
        ({"delta": 1.5}, "delta=1.5"),
    ],
)
def test_bad_settings_raise_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mh_minibatch_skew(**kwargs)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: edgeworth_kernel(1.0, 2.0), "kappa=2.0"),
        (lambda: kappa_grid(0.1, 0.03), "kappa_max=0.1"),
        (lambda: kappa_grid(0.0, 0.01), "kappa_max=0.0"),
    ],
)
def test_bad_builder_settings_raise_naming_the_value(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_the_generalised_builder_solves_a_skewed_kernel():
    """The LP with an asymmetric kernel (coarse grid, fast): its stated error is what an independent convolution measures."""
    t = solve_correction(1.0, grid_step=0.25, half_width=10.0, kernel=edgeworth_kernel(1.0, 0.05))
    assert t.max_cdf_error < 1e-4 and abs(t.probs.sum() - 1) < 1e-12 and np.all(t.probs >= 0)
    assert abs(convolved_error(t.support, t.probs, 0.05) - t.max_cdf_error) <= 0.02 * t.max_cdf_error
    assert t.probs @ t.support**3 < -0.2  # skewed against the kernel


def test_kappa_estimate_is_unbiased_over_every_minibatch_without_replacement():
    """Averaged over all C(9, 4) = 126 minibatches of a 9-point population, the estimated kappa equals
    ``-K3 (1-f)(2-f) / (6 b^2)`` (``K3`` the population's third k-statistic) to rounding.

    This is the sum of the mean's skew term (weight 1/6, third cumulant of the mean without replacement)
    and the covariance of the mean with ``s2`` (weight -1/2); both are checked here by enumeration too,
    so a wrong finite-population factor (e.g. ``(1 - f)`` for ``(1 - f)(2 - f)``: 1.56 vs 0.69 here) fails.
    """
    import itertools

    from minibatch_mcmc.acceptance.streaming import add_rows, init_sums

    lam = np.array([0.0, 0.1, 0.3, 0.35, 0.9, 1.4, 2.2, 4.0, 7.5])
    n, b = lam.size, 4
    f, c = b / n, lam - lam.mean()
    k3_pop = n * np.sum(c**3) / ((n - 1) * (n - 2))
    subsets = [np.array(s) for s in itertools.combinations(range(n), b)]
    means = np.array([lam[s].mean() for s in subsets])
    s2 = np.array([lam[s].var(ddof=1) * (1 - f) / b for s in subsets])
    assert np.isclose(np.mean((means - lam.mean()) ** 3), k3_pop * (1 - f) * (1 - 2 * f) / b**2, rtol=1e-10)
    assert np.isclose(np.mean((means - lam.mean()) * (s2 - s2.mean())), k3_pop * (1 - f) ** 2 / b**2, rtol=1e-10)

    @jax.jit
    def kappa_of(rows):
        mom = add_rows(init_sums(jnp.float64), rows, jnp.ones(b, bool), normalise=True, higher=True)
        return skew_kappa(mom, n, minibatch_stats(mom, n).s2)

    with jax.enable_x64(True):
        kappas = np.array([float(kappa_of(jnp.asarray(lam[s], jnp.float64))) for s in subsets])
    assert np.isclose(kappas.mean(), -k3_pop * (1 - f) * (2 - f) / (6 * b**2), rtol=1e-9), kappas.mean()
