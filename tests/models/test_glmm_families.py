"""``models.glmm_families``' row-independent part, declared as a GLMM's ``Model.shared``: the full-data log-likelihood
ratio of a float32 Student-t GLMM at ``N = 2 * 10^5`` against a float64 reference computed independently (numpy and
scipy), on the plain estimator's path and on the GLMM proxy's, and the shared difference itself against scipy.

The shared part (``gammaln((nu + 1) / 2) - gammaln(nu / 2) - log(nu pi) / 2 - log sigma``) is one float32 scalar every
row adds: taken from each row's value, its rounding (a few units of ``u = 2^-24`` relative to its terms and the other
scalars every row reads, ``nu``, ``1 / sigma``) is counted ``N`` times, ``> 0.02`` nats at ``N = 2e5``. Declared, what is
left is each row's own rounding (``sqrt(N) u |l_i| ~ 1e-4``) and the rows' part reading the one rounded ``log nu``: its
rounding (r.m.s. ``ulp(log 4) / sqrt(12) = 3.4e-8``) times ``N`` times the rows' mean slope in ``log nu``
(``(nu + 1) / 2 E[w / (1 + w)] - nu / 2 E[log1p w] = 1/2 - 2 (psi(5/2) - psi(2)) = -0.06`` for ``w = z^2 / nu``, ``z``
Student-t), for both parameters: ``sqrt(2) 2e5 0.06 3.4e-8 = 6e-4``, so the tests allow 0.002. They would catch the
shared part taken from each row's float32 value again (the plain float32 subtraction row by row, what the declared
part and ``shared_term.row_difference`` both replace, is checked to be above 0.02 on the same case), a shared part added
with the wrong sign or twice (O(1) nats a row), and a proxy whose residuals carry it. Undeclared, the plain estimator
integrates each row's difference along the move (``shared_term.row_difference``): within 0.002 too.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.acceptance.base import Statistics, exact_delta
from minibatch_mcmc.control_variates.base import plain
from minibatch_mcmc.control_variates.glmm import glmm_proxy
from minibatch_mcmc.models.glmm import effect_blocks, effect_weights, glmm_model
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor
from minibatch_mcmc.models.glmm_families import FAMILIES, SHARED
from minibatch_mcmc.models.shared_term import shared_difference

N, G = 200_000, 20
SIGMA, NU = 0.5, 4.0


def t_design(n: int = N, seed: int = 0) -> GLMMDesign:
    """``y ~ x1 + (1 | g)``, ``G`` levels, Student-t noise (``nu = 4``, ``sigma = 0.5``)."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, G, n).astype(np.int32)
    x = np.c_[np.ones(n), rng.normal(size=n)]
    y = x @ np.array([1.0, 0.5]) + rng.normal(0.0, 0.7, G)[codes] + SIGMA * rng.standard_t(NU, n)
    factor = GroupFactor("g", codes, np.ones((n, 1)), tuple(f"s{k}" for k in range(G)), ("1",))
    return GLMMDesign(y=y, x=x, fixed=("Intercept", "x1"), factors=(factor,))


def reference(model, theta: np.ndarray, data: dict) -> float:
    """``sum_i log StudentT(y_i | nu, eta_i, sigma)`` in float64 (numpy and scipy) at the float32 ``theta``."""
    layout, theta = model.glmm.layout, np.asarray(theta, np.float64)
    beta, (e,), (log_sd,), phi = unpack(layout, theta)
    u = e * np.exp((1.0 - effect_weights(layout)[0]) * log_sd[None, :])
    eta = np.asarray(data["x"], np.float64) @ beta + u[np.asarray(data["g_0"]), 0]
    y = np.asarray(data["y"], np.float64)
    return float(np.sum(stats.t.logpdf(y, 1.0 + np.exp(phi[1]), eta, np.exp(phi[0]))))


def unpack(layout, theta: np.ndarray) -> tuple:
    """``(beta, (e,), (log sd,), phi)`` in float64 numpy."""
    beta, effects, log_sds, phi = effect_blocks(layout, jnp.asarray(theta))
    f64 = lambda v: np.asarray(v, np.float64)  # noqa: E731
    return f64(beta), tuple(map(f64, effects)), tuple(map(f64, log_sds)), f64(phi)


@pytest.fixture(scope="module")
def case():
    """The model, its data, a centre near the truth and eight pairs of posterior-scale moves around it (float32)."""
    model, data = glmm_model(t_design(), "student_t", centred=True, sample_as_written=True)
    d = model.glmm.layout
    rng = np.random.default_rng(3)
    centre = np.zeros(d.fixed + G + 1 + 2)
    centre[:2], centre[-3:] = [1.0, 0.5], [np.log(0.7), np.log(SIGMA), np.log(NU - 1.0)]
    y, codes = np.asarray(data["y"], np.float64), np.asarray(data["g_0"])
    centre[2 : 2 + G] = np.bincount(codes, y - np.asarray(data["x"], np.float64) @ centre[:2], G) / np.bincount(
        codes, minlength=G
    )
    pairs = [tuple(np.float32(centre + 3e-3 * rng.standard_normal(centre.size)) for _ in range(2)) for _ in range(8)]
    return model, {k: jnp.asarray(v) for k, v in data.items()}, np.float32(centre), pairs


def ratio_rms(case, estimator_for, declared: tuple = (True, False)) -> dict:
    """R.m.s. over the pairs of the exact test's ``Delta`` error against float64, the shared part declared and not."""
    model, data, centre, pairs = case
    errors = {k: [] for k in declared}
    for declared in errors:
        m = model if declared else model._replace(shared=None)
        est = estimator_for(m, data, centre)
        delta = jax.jit(
            lambda a, b, m=m, est=est: exact_delta(
                Statistics(est.log_ratio(m, a, b), data, N, jnp.float32(0), jnp.float32(1), est.known_sum(a, b))
            )[0]
        )
        for a, b in pairs:
            want = reference(model, b, data) - reference(model, a, data)
            errors[declared].append(float(delta(jnp.asarray(a), jnp.asarray(b))) - want)
    return {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in errors.items()}


def subtraction_rms(case) -> float:
    """R.m.s. over the pairs of the float32 sum of each row's subtracted log-likelihoods against float64."""
    model, data, _, pairs = case
    delta = jax.jit(lambda a, b: jnp.sum(model.log_lik(b, data) - model.log_lik(a, data)))
    errors = [
        float(delta(jnp.asarray(a), jnp.asarray(b))) - (reference(model, b, data) - reference(model, a, data))
        for a, b in pairs
    ]
    return float(np.sqrt(np.mean(np.square(errors))))


@pytest.mark.slow
def test_full_data_ratio_of_a_student_t_glmm_is_within_0002_nats_of_float64(case):
    """The plain estimator's ``Delta`` within 0.002 nats r.m.s. of float64 at ``N = 2e5`` (module docstring: ``6e-4``
    expected), the shared part declared (``PlainDifference`` on the declared term) and not (each row's difference
    integrated); the float32 subtraction row by row more than 0.02 off, so the test sees that rounding."""
    rms = ratio_rms(case, lambda m, data, centre: plain())
    assert max(rms.values()) < 0.002 < 0.02 < subtraction_rms(case), rms


@pytest.mark.slow
def test_glmm_proxy_residuals_leave_the_shared_part_out(case):
    """The GLMM proxy's residuals plus its known sum give the same ``Delta`` to 0.002 nats of float64: its rows' remainder
    is taken on the row part, the shared part's remainder once (``glmm_sums.shared_remainder_change``); a proxy whose
    residuals took it from each row's float32 value would be as far off as the plain undeclared path."""
    rms = ratio_rms(case, lambda m, data, centre: glmm_proxy(m, data, jnp.asarray(centre)), (True,))
    assert rms[True] < 0.002, rms


@pytest.mark.parametrize("family", SHARED)
def test_shared_difference_matches_scipy(family):
    """``shared_difference`` of the declared term is ``log p(y = eta | phi')`` less ``log p(y = eta | phi)`` from
    scipy in float64 (the row part is 0 at a zero residual) to 1e-9 at posterior-scale moves of ``phi`` (s.d. 3e-3),
    where the float32 difference of the two values is ~1e-7 off: a term left out of the shared part (``log pi``,
    ``-log sigma``) or a wrong ``nu`` map would be O(1e-3) off."""
    model, _ = glmm_model(t_design(200), family, centred=True, sample_as_written=True)
    rng, layout = np.random.default_rng(1), model.glmm.layout
    difference = jax.jit(lambda a, b: shared_difference(model.shared, a, b))

    def at_zero(theta: np.ndarray) -> float:
        phi = unpack(layout, theta)[3]
        if family == "gaussian":
            return float(stats.norm.logpdf(0.0, 0.0, np.exp(phi[0])))
        return float(stats.t.logpdf(0.0, 1.0 + np.exp(phi[1]), 0.0, np.exp(phi[0])))

    errors = []
    for _ in range(20):
        a = np.float32(0.3 * rng.standard_normal(layout.fixed + G + 1 + len(layout.extras)) - 0.5)
        b = np.float32(a + 3e-3 * rng.standard_normal(a.size))
        want = at_zero(b) - at_zero(a)
        errors.append(float(difference(jnp.asarray(a), jnp.asarray(b))) - want)
    assert np.sqrt(np.mean(np.square(errors))) < 1e-9, errors


def test_only_the_continuous_families_declare_a_shared_part():
    """Gaussian and Student-t declare the part (its ``rows + value`` is ``log_lik``, the contract); the families without
    ``phi`` and the negative binomial (whose ``phi``-only terms cancel within each row) declare none, so their per-row
    ratios are the ones computed before (the same code path)."""
    for family in FAMILIES:
        model, _ = glmm_model(t_design(50) if family in SHARED else count_design(family), family, centred=True)
        assert (model.shared is not None) == (family in SHARED) == (model.glmm.shared_density is not None), family


def count_design(family: str) -> GLMMDesign:
    """``t_design(50)`` with a count or 0/1 response and, for the binomial, 4 trials a row."""
    d, rng = t_design(50), np.random.default_rng(2)
    y = rng.integers(0, 2, 50) if family == "bernoulli" else rng.integers(0, 4, 50)
    return d._replace(y=y.astype(np.float64), trials=np.full(50, 4.0) if family == "binomial" else None)
