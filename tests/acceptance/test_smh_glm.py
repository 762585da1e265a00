"""Scalable MH with the probit, Poisson (log link, offset) and Student-t bounds is exact: one step's acceptance probability over
20,000 keys equals the factorised probability computed independently in float64 (binomial s.e. about 0.0035; a
thinning rate or a bound off by 5% at these residual factors, or the residual factor dropped, fails at 4 s.e.)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_glm import NU_T, SIGMA_T, f64, make_family_data, residual_reference

from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.acceptance.smh import scalable_mh
from minibatch_mcmc.control_variates.glm import model_glm_proxy
from minibatch_mcmc.models import poisson_regression, probit_regression, student_t_regression

KEYS, PRIOR = 20_000, 5.0


def exact_factorised(family, data, centre, t0, t1):
    """``(P_factorised, P_metropolis, a)`` in float64 from the data alone (second-order proxy)."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)
    off = np.asarray(data["offset"], np.float64) if "offset" in data else 0.0
    c, a0, a1 = (np.asarray(v, np.float64) for v in (centre, t0, t1))
    eta_c, e0, e1 = x @ c + off, x @ a0 + off, x @ a1 + off
    _, g, h = f64(family, eta_c, y)
    q = g * (e1 - e0) + 0.5 * h * ((e1 - eta_c) ** 2 - (e0 - eta_c) ** 2)
    r = residual_reference(family, data, centre, t0, t1, 2)
    a = -0.5 * (a1 @ a1 - a0 @ a0) / PRIOR**2 + q.sum()
    return min(1.0, np.exp(a)) * np.exp(np.minimum(r, 0.0).sum()), min(1.0, np.exp(a + r.sum())), a


@pytest.mark.slow
@pytest.mark.parametrize("family", ["probit", "poisson", "student_t"])
def test_one_step_acceptance_is_the_factorised_probability(family):
    data, centre = make_family_data(family, n=300, seed=3)
    model = {
        "probit": probit_regression(PRIOR),
        "poisson": poisson_regression(PRIOR, offset=True),
        "student_t": student_t_regression(NU_T, SIGMA_T, PRIOR),
    }[family]
    t0 = (centre + 0.3 * np.array([1.0, -0.5, 0.2])).astype(np.float32)
    moves = [(t0 + s * np.array([0.55, 0.8, -0.3])).astype(np.float32) for s in np.geomspace(0.002, 1.5, 200)]
    parts = [exact_factorised(family, data, centre, t0, t1) for t1 in moves]
    ok = [i for i, (fact, _, _) in enumerate(parts) if 0.1 < fact < 0.9]
    t1 = moves[max(ok, key=lambda i: abs(parts[i][1] - parts[i][0]))]  # where the residual factor matters most
    want, metropolis, _ = exact_factorised(family, data, centre, t0, t1)
    est = model_glm_proxy(model, data, centre, order=2)
    a0, a1 = jnp.asarray(t0), jnp.asarray(t1)
    psi = model.log_prior(a1) - model.log_prior(a0)
    test = scalable_mh()

    @jax.jit
    def run(keys):
        def one(k):
            stats = Statistics(
                est.log_ratio(model, a0, a1),
                data,
                300,
                psi,
                jnp.float32(1.0),
                est.known_sum(a0, a1),
                est.residual_bounds(model, a0, a1),
            )
            out = test.decide(k, stats)
            return out.accepted, out.bound_exceeded

        return jax.vmap(one)(keys)

    acc, over = run(jax.random.split(jax.random.key(11), KEYS))
    se = np.sqrt(want * (1.0 - want) / KEYS)
    assert not np.any(over)
    assert abs(float(np.mean(acc)) - want) < 4 * se, (float(np.mean(acc)), want, se)
    assert abs(metropolis - want) > 10 * se  # the residual factor matters here: the check has power
