"""Scalable MH is exact: one step's acceptance probability is the factorised one, computed independently in float64.

The float64 reference uses only numpy: the per-datum log-likelihoods, their second-order Taylor proxy at the
centre and ``min(1, e^a) prod_i min(1, e^(r_i))``. The move is chosen where both factors are well inside (0, 1)
(``candidate``): at order 2 ``min(1, e^a)`` ~ 0.8 and the residual factor ~ 0.4, so the probability is ~ 0.32. 20,000 keys
give a binomial s.e. of about 0.0033, so an error of 0.014 in the acceptance probability (e.g. a thinning rate off by 5%
at this residual factor, or the residual factor dropped: Metropolis's probability is 1 here) fails the 4-s.e. check.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_bounds import logistic_residuals, logistic_setting, quadrature_posterior_check
from helpers_subtracted import subtracted_residuals

from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.acceptance.smh import scalable_mh
from minibatch_mcmc.control_variates import TaylorProxy
from minibatch_mcmc.control_variates.glm import logistic_proxy
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers import sample

N, D, KEYS = 300, 2, 20_000
MODEL = logistic_regression(prior_scale=5.0)


@pytest.fixture(scope="module")
def setting():
    return logistic_setting(N, D)


def moves(t0):
    """Moves on a grid of 24 directions and 16 lengths from ``t0``."""
    for angle in np.linspace(0.0, 2.0 * np.pi, 24, endpoint=False):
        for step in np.geomspace(0.05, 1.0, 16):
            yield (t0 + step * np.array([np.cos(angle), np.sin(angle)])).astype(np.float32)


def candidate(data, centre, t0, order):
    """The move of ``moves`` where ``min(1, e^a)`` is in (0.5, 0.9), the residual factor in (0.2, 0.8), and the factorised
    probability furthest (in its binomial s.e.s) from Metropolis's: both factors matter."""
    best, power = None, -1.0
    for t1 in moves(t0):
        fact, metropolis, a = exact_factorised(data, centre, t0, t1, order)
        first = min(1.0, np.exp(a))
        if (
            0.5 < first < 0.9
            and 0.2 < fact / first < 0.8
            and abs(fact - metropolis) / np.sqrt(fact * (1 - fact)) > power
        ):
            best, power = t1, abs(fact - metropolis) / np.sqrt(fact * (1 - fact))
    assert best is not None, "no move on the grid has both factors in range"
    return best


def exact_factorised(data, centre, t0, t1, order=2):
    """``(P_factorised, P_metropolis, a)`` in float64 from the data alone."""
    r, a = logistic_residuals(data, centre, t0, t1, order)
    return min(1.0, np.exp(a)) * np.exp(np.minimum(r, 0.0).sum()), min(1.0, np.exp(a + r.sum())), a


def acceptance_rate(data, est, t0, t1, test):
    t0, t1 = jnp.asarray(t0), jnp.asarray(t1)
    psi = MODEL.log_prior(t1) - MODEL.log_prior(t0)

    @jax.jit
    def run(keys):
        def one(k):
            stats = Statistics(
                est.log_ratio(MODEL, t0, t1),
                data,
                N,
                psi,
                jnp.float32(1.0),
                est.known_sum(t0, t1),
                est.residual_bounds(MODEL, t0, t1),
            )
            out = test.decide(k, stats)
            return out.accepted, out.batch_size, out.nonfinite

        return jax.vmap(one)(keys)

    acc, rows, bad = run(jax.random.split(jax.random.key(7), KEYS))
    assert not np.any(bad)
    return float(np.mean(acc)), np.asarray(rows)


@pytest.mark.parametrize(
    "order, alias",
    [pytest.param(1, True, marks=pytest.mark.slow), (2, True), pytest.param(2, False, marks=pytest.mark.slow)],
)
def test_one_step_acceptance_is_the_factorised_probability(setting, order, alias):
    """Rows drawn in proportion to their bounds (alias table) or uniformly at the largest bound: both exact."""
    data, centre, t0 = setting
    t1 = candidate(data, centre, t0, order)
    est = logistic_proxy(data, centre, order=order, alias=alias)
    want, metropolis, _ = exact_factorised(data, centre, t0, t1, order)
    got, rows = acceptance_rate(data, est, t0, t1, scalable_mh())
    se = np.sqrt(want * (1.0 - want) / KEYS)
    assert abs(got - want) < 4 * se, (got, want, se)
    assert abs(metropolis - want) > 10 * se  # the residual factor matters here: the check has power
    assert rows.max() < N  # thinned steps: no step read all the data


@pytest.mark.slow
def test_full_data_fallback_is_metropolis(setting):
    """Above ``max_expected`` the step is the exact Metropolis test on all N rows (a move whose Metropolis probability is
    near 1/2, where the binomial s.e. is 0.0035)."""
    data, centre, t0 = setting
    t1 = min(moves(t0), key=lambda t: abs(exact_factorised(data, centre, t0, t)[1] - 0.5))
    est = logistic_proxy(data, centre)
    _, want, _ = exact_factorised(data, centre, t0, t1)
    got, rows = acceptance_rate(data, est, t0, t1, scalable_mh(max_expected=1.0))
    assert np.all(rows[rows > 0] == N)
    assert abs(got - want) < 4 * np.sqrt(want * (1.0 - want) / KEYS), (got, want)


def test_residuals_survive_float32_cancellation():
    """At N = 10^6 scale moves (``delta eta ~ 1e-3``) the residual is ~1e-10: computed from the remainder it is
    right to 1e-3 relative; the naive ``l(theta') - l(theta) - q`` with the difference a float32 subtraction is
    rounding noise (error > 100%). (The Taylor proxy's own residuals, each row's difference integrated along the move,
    ``models.shared_term.row_difference``, are far better than that but still not within 1e-3 of these ~1e-10.)"""
    data, theta = make_logistic_data(jax.random.key(2), 500, 3)
    centre = np.asarray(theta, np.float32)
    t0 = centre + np.float32(1e-3) * np.array([1.0, -1.0, 0.5], np.float32)
    t1 = t0 + np.float32(1e-3) * np.array([0.5, 0.8, -1.0], np.float32)
    x = np.asarray(data["x"], np.float64)
    c, a0, a1 = (np.asarray(v, np.float64) for v in (centre, t0, t1))
    eta_c, d0, d1 = x @ c, x @ (a0 - c), x @ (a1 - c)
    p = 1.0 / (1.0 + np.exp(-eta_c))
    pq = p * (1 - p)
    d3, d4 = pq * (1 - 2 * p), pq * (1 - 6 * pq)
    rem = lambda d: d3 * d**3 / 6 + d4 * d**4 / 24  # noqa: E731  (next term ~1e-15 relative to these)
    want = rem(d0) - rem(d1)
    est = logistic_proxy(data, centre)
    got = np.asarray(est.log_ratio(MODEL, jnp.asarray(t0), jnp.asarray(t1))(data), np.float64)
    scale = np.max(np.abs(want))
    assert np.max(np.abs(got - want)) < 1e-3 * scale
    naive = subtracted_residuals(est.proxy, MODEL, jnp.asarray(t0), jnp.asarray(t1))(data)
    assert isinstance(est.proxy, TaylorProxy) and np.max(np.abs(np.asarray(naive, np.float64) - want)) > scale


def test_bounds_hold_on_random_pairs(setting):
    """``|r_i| <= b_i`` (float64 residuals) for pairs up to three units from the centre, orders 1 and 2."""
    data, centre, _ = setting
    rng = np.random.default_rng(0)
    for order in (1, 2):
        est = logistic_proxy(data, centre, order=order)
        for _ in range(10):
            t0 = (centre + rng.normal(size=D) * rng.uniform(0.1, 3.0)).astype(np.float32)
            t1 = (t0 + rng.normal(size=D) * rng.uniform(0.01, 2.0)).astype(np.float32)
            b = est.residual_bounds(MODEL, jnp.asarray(t0), jnp.asarray(t1))
            r = np.asarray(est.log_ratio(MODEL, jnp.asarray(t0), jnp.asarray(t1))(data), np.float64)
            assert np.all(np.abs(r) <= np.asarray(b.per_datum(data)) * (1 + 1e-5) + 1e-7)
            assert float(b.largest) >= np.max(np.asarray(b.per_datum(data))) * (1 - 1e-5)


def test_rows_are_drawn_in_proportion_to_their_bounds(setting):
    """The alias draw's row frequencies match ``|x_i|^3 / sum_j |x_j|^3`` within 5 binomial s.e. on every row."""
    data, centre, _ = setting
    est = logistic_proxy(data, centre, order=2)
    draws = 300_000
    counts = np.bincount(np.asarray(jax.jit(est.draw, static_argnums=1)(jax.random.key(5), draws)), minlength=N)
    w = np.linalg.norm(np.asarray(data["x"], np.float64), axis=1) ** 3
    p = w / w.sum()
    assert np.all(np.abs(counts - draws * p) < 5 * np.sqrt(draws * p * (1 - p)) + 1)
    assert abs(est.norm_sum - w.sum()) < 1e-6 * w.sum()  # float32 norms


def test_records_expected_count_fallback_and_a_wrong_bound(setting):
    """The step records its Poisson mean; a fallback step says so; a bound smaller than a residual is flagged."""
    data, centre, t0 = setting
    t1 = jnp.asarray(t0 + np.float32(0.5))
    t0 = jnp.asarray(t0)
    est = logistic_proxy(data, centre)
    bounds = est.residual_bounds(MODEL, t0, t1)
    stats = Statistics(
        est.log_ratio(MODEL, t0, t1), data, N, jnp.float32(0.0), jnp.float32(1.0), jnp.float32(0.0), bounds
    )
    out = scalable_mh().decide(jax.random.key(0), stats)
    assert float(out.expected_batch_size) == pytest.approx(float(bounds.total), rel=1e-6)
    assert not out.fallback and not out.bound_exceeded
    full = scalable_mh(max_expected=1e-3).decide(jax.random.key(0), stats)
    assert full.fallback and int(full.batch_size) == N and float(full.expected_batch_size) == 0.0
    shrunk = bounds._replace(per_datum=lambda rows: 0.1 * bounds.per_datum(rows), largest=0.1 * bounds.largest)
    assert float(bounds.total) > 5  # P(no row read) < e^-5: the shrunken bound meets a residual
    assert bool(scalable_mh().decide(jax.random.key(0), stats._replace(bounds=shrunk)).bound_exceeded)


def test_refuses_an_estimator_without_bounds(setting):
    data = setting[0]
    stats = Statistics(lambda rows: rows["x"][:, 0], data, N, jnp.float32(0.0), jnp.float32(1.0))
    with pytest.raises(ValueError, match="ScalableMH needs per-datum bounds"):
        scalable_mh().decide(jax.random.key(0), stats)


@pytest.mark.slow
def test_posterior_at_temperature_one_matches_quadrature():
    """SMH-2 (Laplace-whitened bounds, Laplace-shaped random walk) at N = 10^5, temperature 1: posterior means and
    variances within |z| < 4 of the quadrature answer at ESS > 3200 per coordinate (a 5% s.d. error is a 10%
    variance error, about 4 s.e. of the variance at that ESS), reading a few rows per step on average."""
    quadrature_posterior_check(scalable_mh())


@pytest.mark.slow  # 24-52 s on the loaded 2-core machine: `make test-slow` (the fast suite's 10-minute budget)
def test_out_of_core_source_gives_the_same_draws(setting, tmp_path):
    """Two chains of SMH-2 on a memory-mapped .npy source draw exactly what they draw in memory (rows read by index)."""
    from minibatch_mcmc.data import open_npy

    data, centre, t0 = setting
    np.save(tmp_path / "x.npy", np.asarray(data["x"]))
    np.save(tmp_path / "y.npy", np.asarray(data["y"]))
    source = open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"})
    kw = dict(
        proposal=scaled_random_walk(jnp.eye(D, dtype=jnp.float32), 0.3),
        test=scalable_mh(),
        num_samples=30,
        num_chains=2,
        key=4,
        progress=False,
    )
    in_memory = sample(MODEL, data, jnp.asarray(t0), estimator=logistic_proxy(data, centre), **kw)
    on_disk = sample(MODEL, source, jnp.asarray(t0), estimator=logistic_proxy(source, centre), **kw)
    np.testing.assert_array_equal(np.asarray(on_disk.positions), np.asarray(in_memory.positions))
    assert in_memory.records["batch_size"].sum() > 0  # some steps read rows
