import jax.numpy as jnp
import numpy as np
import pytest
from helpers_ratio import acceptance_draws, austere_error_bound, exact_delta, population
from scipy import stats

from minibatch_mcmc.acceptance.austere import (
    austere_mh,
    austere_mh_adaptive,
    student_t_pvalue,
)
from minibatch_mcmc.acceptance.austere_design import design_adaptive, design_conservative, design_table, simulate_design

N = 5000
DRAWS = 20_000


def exact_metropolis(r, psi):
    return min(1.0, float(np.exp(exact_delta(r, psi))))


def test_student_t_pvalue_matches_scipy():
    t = jnp.array([0.0, 0.5, -1.7, 3.2, 10.0])
    for dof in (1.0, 4.0, 49.0, 999.0):
        np.testing.assert_allclose(
            np.asarray(student_t_pvalue(t, jnp.float32(dof))),
            stats.t.sf(np.abs(np.asarray(t)), dof),
            rtol=3e-3,
            atol=1e-7,
        )


@pytest.mark.parametrize("delta, spread", [(-1.0, 5.0), (0.0, 20.0), (1.5, 60.0)])
def test_acceptance_probability_within_the_tests_error(delta, spread):
    """The tolerance is the stage-wise union bound of ``helpers_ratio.austere_error_bound`` (closed form, computed
    here from the population), not the library's ``simulate_design``: 0.012, 0.053 and 0.011 for these cases
    (measured errors -0.0007, -0.019, -0.007). A Barker threshold in place of Metropolis moves P(accept) by ~0.1-0.2
    (sigmoid vs min(1, e^Delta)) and fails it."""
    m, eps = 100, 0.01
    r, psi = population(N, delta, spread, seed=4)
    p = exact_metropolis(r, psi)
    acc, bs, _ = acceptance_draws(austere_mh(m, eps), r, psi, DRAWS, seed=3, optimise=True)
    bound = austere_error_bound(r, psi, m, eps)
    se = np.sqrt(max(p * (1 - p), 1e-4) / DRAWS)
    assert abs(acc.mean() - p) <= bound + 3 * se, (acc.mean(), p, bound)
    assert np.all((bs % m == 0) | (bs == N))


def test_exhausting_the_data_is_the_exact_metropolis_test():
    r, psi = population(600, -0.4, 1e5, seed=2)
    acc, bs, ds = acceptance_draws(austere_mh(50, 1e-6), r, psi, DRAWS, seed=1, optimise=True)
    assert np.mean(bs == 600) > 0.999
    p = exact_metropolis(r, psi)
    assert abs(acc.mean() - p) < 3 * np.sqrt(p * (1 - p) / DRAWS)
    # float32 sums of terms of size ~170 that cancel to ~-0.7: a few 1e-3 of rounding
    np.testing.assert_allclose(ds[bs == 600], exact_delta(r, psi), atol=1e-2)


def test_design_reproduces_the_two_stage_case():
    # N = 2m: the only early stop is at stage 1, with probability 2 eps at mu_std = 0; half of those
    # are wrong, and the data used is m for those and 2m otherwise
    eps = 0.05
    err, frac = simulate_design(400, 200, [eps], [0.0], n_paths=40_000, seed=1)
    se = np.sqrt(eps * (1 - eps) / 40_000)
    assert abs(err[0, 0] - eps) < 4 * se
    assert abs(frac[0, 0] - (1 - eps)) < 4 * se


def test_design_error_falls_with_mu_std_and_data_use_with_epsilon():
    err, frac = simulate_design(N, 100, [0.001, 0.05], [0.0, 1.0, 5.0], n_paths=3000)
    assert err[0, 0] > err[0, 1] > err[0, 2]
    assert np.all(frac[1] < frac[0])


def test_conservative_design_meets_the_bound_and_trades_error_for_data():
    tight = design_conservative(N, 0.02, pilot_mu_std=[0.5, 2.0, 8.0], batch_sizes=(50, 100, 200), n_paths=1500)
    loose = design_conservative(N, 0.2, pilot_mu_std=[0.5, 2.0, 8.0], batch_sizes=(50, 100, 200), n_paths=1500)
    assert tight.worst_error <= 0.02 and loose.worst_error <= 0.2
    assert loose.data_fraction < tight.data_fraction


def test_non_conservative_test_counts_hidden_data_and_meets_its_bound():
    table = design_table(N, np.r_[0.0, np.geomspace(0.1, 30, 10)], batch_sizes=(50, 100, 200), n_paths=1500)
    design = design_adaptive(table, 0.05)
    test = austere_mh_adaptive(design)
    r, psi = population(N, 0.3, 30.0, seed=8)
    p = exact_metropolis(r, psi)
    acc, bs, _ = acceptance_draws(test, r, psi, 5000, seed=2)
    assert abs(acc.mean() - p) <= 0.05 + 3 * np.sqrt(p * (1 - p) / 5000)
    import jax

    from minibatch_mcmc.acceptance.base import Statistics

    out = test.decide(jax.random.key(0), Statistics(lambda b: b, jnp.asarray(r), N, jnp.float32(psi), jnp.float32(1.0)))
    assert int(out.hidden_data) == 2 * N


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": 0.0}, "epsilon=0.0"),
        ({"epsilon": 1.2}, "epsilon=1.2"),
        ({"batch_size": 1}, "m=1"),
        ({"batch_size": 0}, "m=0"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        austere_mh(**kwargs)


def test_bad_design_settings_raise():
    with pytest.raises(ValueError, match="error_bound=0.7"):
        design_conservative(N, 0.7)
    with pytest.raises(ValueError, match="m=9000"):
        simulate_design(N, 9000, [0.01], [0.0])
    with pytest.raises(ValueError, match="m=200 exceeds"):
        austere_mh(200).validate(100)
