"""The batch sizing's predicted per-step acceptance error against the error measured independently in float64.

The measured figure is what the check after sampling counts (``posterior_error``'s ``disagreement``): at proposals
``theta ~`` the Laplace fit (the posterior's stand-in), ``theta' ~`` the Laplace independence proposal, the probability
that the penalty test on its minibatch (grown while ``s2 >= 1``, the estimated-variance penalty) and the exact Metropolis
test on every row decide differently on the same uniform: ``E |a(Delta* - u_B) - a(Delta)|``, ``a = min(1, e^x)``. Here
it is computed in numpy float64 from the logistic likelihood's closed form, the second-order Taylor proxy's closed form,
the prior and the proposal's densities (``Delta`` exact, not the prediction's ``T / K``), on all ``N`` rows (more than the
``ROWS`` the prediction samples), the minibatch drawn as the test draws it (uniform, or positions of the importance-
weighted population with terms ``r_i / n_i``). Before issue 32's calibration the prediction (``minibatch_shape``'s bound)
was 3-15x these figures; a prediction that used the bound again, ignored the penalty, the growth or the weights, or
scaled the residuals wrongly, would miss the factor 1.5.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers_subtracted import subtracted_residuals

from minibatch_mcmc.acceptance.penalty import SIGMA_MAX
from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.control_variates.importance import importance_sample, probe_weights
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models import GLMSpec, Model, logistic_regression
from minibatch_mcmc.models.logistic import logistic_log_lik
from minibatch_mcmc.warmup.batch_choice import MOVES, choose_batch_size, laplace_pairs, residual_matrix
from minibatch_mcmc.warmup.step_error import DRAWS, orders, step_error

N, PRIOR, GROUPS = 20_000, 5.0, 8
PROPOSALS, MINIBATCHES = 384, 64


def rare_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Logistic regression with a binary feature set in 30 rows."""
    rare = np.zeros(N)
    rare[rng.choice(N, 30, replace=False)] = 1.0
    x = np.column_stack([np.ones(N), rng.standard_normal((N, 2)), rare])
    y = rng.random(N) < 1 / (1 + np.exp(-(x @ np.array([-1.0, 0.5, -0.5, 2.0]))))
    return x, y.astype(np.float64)


def groups_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Logistic regression with 8 group intercepts (groups of 20 to ~10,000 rows) and two covariates."""
    sizes = np.floor(20 * 2.4 ** np.arange(GROUPS)).astype(int)
    sizes[-1] += N - sizes.sum()
    g = rng.permutation(np.repeat(np.arange(GROUPS), sizes))
    x = np.zeros((N, GROUPS + 2))
    x[np.arange(N), g] = 1.0
    x[:, GROUPS:] = rng.standard_normal((N, 2))
    eta = rng.normal(-0.5, 1.0, GROUPS)[g] + x[:, GROUPS:] @ np.array([0.4, -0.3])
    return x, (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(np.float64)


def plain_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Logistic regression, d = 3, no rare rows."""
    x = np.column_stack([np.ones(N), rng.standard_normal((N, 2))])
    return x, (rng.random(N) < 1 / (1 + np.exp(-(x @ np.array([0.3, 1.0, -0.7]))))).astype(np.float64)


def log_lik(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Per-row Bernoulli-logit log-likelihood (float64)."""
    eta = x @ theta
    return y * eta - np.logaddexp(0.0, eta)


def laplace(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mode and covariance of the posterior under ``N(0, PRIOR^2)`` priors, by Newton's method in float64."""
    theta = np.zeros(x.shape[1])
    for _ in range(30):
        p = 1 / (1 + np.exp(-(x @ theta)))
        grad = x.T @ (y - p) - theta / PRIOR**2
        hess = -(x * (p * (1 - p))[:, None]).T @ x - np.eye(theta.size) / PRIOR**2
        theta = theta - np.linalg.solve(hess, grad)
    return theta, np.linalg.inv(-hess)


def measured_error(
    x: np.ndarray,
    y: np.ndarray,
    centre: np.ndarray,
    cov: np.ndarray,
    copies: np.ndarray,
    m: int,
    rng: np.random.Generator,
) -> float:
    """Mean over independence proposals from the Laplace fit of ``P(penalty test's decision != exact test's)``."""
    chol = np.linalg.cholesky(cov)
    prec = np.linalg.inv(cov)
    eta_c = x @ centre
    p_c = 1 / (1 + np.exp(-eta_c))
    pos = np.repeat(np.arange(N), copies)  # the population the test draws from: row i repeated n_i times
    size = pos.size
    reach = min(size, 64 * m)  # growth beyond 64 chunks: read as the 64th (never reached here at s2 < 1)
    order = np.stack([rng.choice(size, reach, replace=False) for _ in range(MINIBATCHES)])
    errors = []
    for _ in range(PROPOSALS):
        th, th2 = centre + chol @ rng.standard_normal(centre.size), centre + chol @ rng.standard_normal(centre.size)

        def quad(t: np.ndarray) -> np.ndarray:  # the Taylor proxy's per-row quadratic about the centre
            u = x @ (t - centre)
            return (y - p_c) * u - 0.5 * p_c * (1 - p_c) * u * u

        r = (log_lik(x, y, th2) - log_lik(x, y, th)) - (quad(th2) - quad(th))
        log_post = lambda t: np.sum(log_lik(x, y, t)) - 0.5 * np.sum(t**2) / PRIOR**2  # noqa: E731
        log_q = lambda t: -0.5 * (t - centre) @ prec @ (t - centre)  # noqa: E731
        delta = log_post(th2) - log_post(th) + log_q(th) - log_q(th2)
        terms = (r / copies)[pos][order]  # the minibatches' terms r_i / n_i, in the order the test reads them
        s1, s2 = np.cumsum(terms, axis=1), np.cumsum(terms * terms, axis=1)
        ends = np.arange(m, reach + 1, m)
        b = ends.astype(np.float64)
        mean = s1[:, ends - 1] / b
        var = np.maximum(s2[:, ends - 1] / b - mean**2, 0.0) * b / (b - 1)
        est_var = size**2 * var / b * (size - b) / size
        first = np.argmax(est_var < 1.0, axis=1)
        first = np.where(np.any(est_var < 1.0, axis=1), first, ends.size - 1)
        k = np.arange(MINIBATCHES)
        v, c = est_var[k, first], b[first]
        u_b = v / 2 + v * v / (4 * (c + 1)) + v**3 / (3 * (c + 1) * (c + 3))
        est = delta - np.sum(r) + size * mean[k, first]
        errors.append(np.mean(np.abs(np.exp(np.minimum(est - u_b, 0)) - np.exp(min(delta, 0.0)))))
    return float(np.mean(errors))


def predicted_and_measured(make, weighted: bool) -> tuple[float, float]:
    """The prediction at m = 50 (``choose_batch_size``'s ``initial_error``) and the independently measured error."""
    x, y = make(np.random.default_rng(0))
    centre, cov = laplace(x, y)
    data = {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.int32)}
    model = Model(logistic_regression(PRIOR).log_prior, logistic_log_lik, "logistic", glm=GLMSpec("logistic"))
    est = proxy = taylor_proxy(model, data, jnp.asarray(centre, jnp.float32))
    copies = np.ones(N, np.int64)
    factor = np.linalg.cholesky(cov)
    if weighted:
        est = importance_sample(
            est, data, probe_weights(model, est, data, proxy.centre, factor, jax.random.key(1)).weights
        )
        copies = np.diff(np.concatenate([[0], np.asarray(est.ends)]))
    predicted = choose_batch_size(
        model, as_data_source(data), est, proxy.centre, factor, 50, jax.random.key(2)
    ).initial_error
    return predicted, measured_error(x, y, centre, cov, copies, 50, np.random.default_rng(4))


@pytest.mark.slow
@pytest.mark.parametrize(
    "make, weighted",
    [(rare_data, False), (groups_data, False), (groups_data, True), (plain_data, False)],
    ids=["rare-uniform", "groups-uniform", "groups-weighted", "plain"],
)
def test_predicted_step_error_within_a_factor_1_5_of_the_measured(make, weighted):
    """At m = 50 the prediction (128 Laplace pairs on 16,384 of 20,000 rows, or of the 80,000 weighted positions) is within
    a factor 1.5 of the disagreement measured at 384 proposals x 64 minibatches on all rows, on a rare feature, small
    groups (uniform and importance-weighted rows) and a plain logistic regression. Measured (seeds as written): 0.060,
    0.093, 0.030, 0.0021; predicted 1.10, 0.85, 0.92, 1.16 times that; ``minibatch_shape``'s bound, the prediction
    before, 4.4, 3.4, 1.5, 2.8 times. Both figures vary by 20-30% with their moves' draws (a few proposals carry much of
    the error): 96 proposals gave 0.057 and 0.039 for the first case on two streams. ~15-30 s each."""
    predicted, measured = predicted_and_measured(make, weighted)
    assert measured > 1e-3, measured  # a figure the test can resolve
    assert measured / 1.5 <= predicted <= 1.5 * measured, (predicted, measured)


def test_normal_residuals_against_quadrature():
    """Normal residuals (8,192 sampled rows standing for 10^6, s.d. giving the 50-row estimate s.d. ``s = 0.3``, no growth)
    at moves with ``Delta`` in {-1, -0.3, 0, 0.5}: ``step_error`` equals ``E |a(Delta + s Z - u_B(V)) - a(Delta)|`` with
    ``V ~ s^2 chi2_49 / 49`` independent of ``Z``, by quadrature, within 8% or 0.002 (its simulation's s.e. about 2%, 8% at Delta = 0.5, where only the 7% of draws that cross 0 count). Forgetting
    the penalty, its estimated variance or the ``n / sqrt(m)`` scale of the noise moves it by 15% or more."""
    from scipy import stats

    n_pop, rows, m, s = 10**6, 1 << 13, 50, 0.3
    rng = np.random.default_rng(0)
    tau = s * np.sqrt(m) / n_pop
    z = rng.standard_normal((128, rows))
    z = (z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True)
    nodes = np.linspace(-8.0, 8.0, 4001)  # the integrand has a kink: a fine grid, not Gauss-Hermite
    weights = stats.norm.pdf(nodes) * (nodes[1] - nodes[0])
    v = stats.chi2.ppf((np.arange(400) + 0.5) / 400, m - 1) * s * s / (m - 1)
    for delta in (-1.0, -0.3, 0.0, 0.5):
        d = delta / n_pop + tau * z
        got = step_error(d, orders(rows, rng), n_pop, m, 1.0).error
        x = delta + s * nodes[:, None] - (v / 2 + v * v / (4 * (m + 1)) + v**3 / (3 * (m + 1) * (m + 3)))[None, :]
        want = float(np.sum(weights[:, None] * np.abs(np.exp(np.minimum(x, 0)) - np.exp(min(delta, 0.0)))) / 400)
        assert got == pytest.approx(want, rel=0.08, abs=2e-3), (delta, got, want)
    assert DRAWS * 128 >= 4096  # the simulated minibatches per Delta behind the s.e.


def rounding_measured(y: np.ndarray, terms: np.ndarray, delta: np.ndarray, m: int, rng: np.random.Generator) -> float:
    """``E |a(Delta* - u_B) - a(Delta)|`` over the moves: ``Delta`` exact (float64), ``Delta* = Delta + N mean(minibatch of
    the float32 terms)`` (the exact terms are 0: the proxy of a Gaussian likelihood is exact), the minibatch grown while
    ``s2 >= 1`` as the test grows it."""
    n = y.size
    order = np.stack([rng.choice(n, 64 * m, replace=False) for _ in range(MINIBATCHES)])
    ends = np.arange(m, 64 * m + 1, m)
    b = ends.astype(np.float64)
    errors = []
    for r, dl in zip(terms, delta):
        t = r[order]
        s1, s2 = np.cumsum(t, axis=1), np.cumsum(t * t, axis=1)
        mean = s1[:, ends - 1] / b
        v = n * n * np.maximum(s2[:, ends - 1] / b - mean**2, 0.0) / (b - 1) * (n - b) / n
        first = np.where(np.any(v < 1.0, axis=1), np.argmax(v < 1.0, axis=1), ends.size - 1)
        k = np.arange(MINIBATCHES)
        v, c = v[k, first], b[first]
        u_b = v / 2 + v * v / (4 * (c + 1)) + v**3 / (3 * (c + 1) * (c + 3))
        est = dl + n * mean[k, first]
        errors.append(np.mean(np.abs(np.exp(np.minimum(est - u_b, 0.0)) - np.exp(min(dl, 0.0)))))
    return float(np.mean(errors))


class Subtracted(NamedTuple):
    """A Taylor proxy's residuals with each row's difference a float32 subtraction, as before each row's difference was
    integrated (``models.shared_term.row_difference``): terms that carry a few ``eps |l_i|`` of rounding."""

    proxy: Any

    def log_ratio(self, model: Model, current: Any, candidate: Any) -> Any:
        return subtracted_residuals(self.proxy, model, current, candidate)


def test_float32_rounding_of_the_terms_is_predicted():
    """A Gaussian mean (unit noise) on rows spread 30 units: the Taylor proxy is exact, so every term the penalty test reads
    is float32 rounding of ``l_i`` (about 450 nats a row, resolution 3e-5), which at N = 20,000 and m = 50 moves
    ``delta*`` by about 0.1 nats (``20,000 x 4e-5 / sqrt(50)``). Measured independently: the minibatches of the float32
    terms the proxy gives at 128 Laplace independence moves, grown and penalised as the test does, against the exact
    decision from ``Delta`` in float64. ``step_error`` on the terms as read (``Terms.read``, ``Delta`` from
    ``Terms.exact``: what ``benchmarks/twin_gap.py`` predicts with; the sizing itself reads ``Terms.exact``, the
    ``batch_choice`` docstring says why) must predict it within a factor 1.5; the prediction that counts the terms
    within their row's float32 resolution as 0 predicts 0 here and would fail, as would one that scaled the rounding by
    anything but the test's ``n / m``. The rounding is that of each row's difference taken as a float32 subtraction
    (``Subtracted``); the library's own terms, each row's difference integrated, leave an error under a hundredth of it."""
    from minibatch_mcmc.models import GaussianMeanSettings, gaussian_mean

    n, m = 20_000, 50
    rng = np.random.default_rng(0)
    y = (30.0 * rng.standard_normal(n)).astype(np.float32)
    model = gaussian_mean(GaussianMeanSettings(prior_scale=10.0))
    data = jnp.asarray(y[:, None])
    y64 = y.astype(np.float64)
    prec = n + 1.0 / 100.0
    centre = np.array([y64.sum() / prec])  # the exact posterior N(centre, 1 / prec) is the Laplace fit
    proxy = taylor_proxy(model, data, jnp.asarray(centre, jnp.float32))
    factor = np.array([[1.0 / np.sqrt(prec)]])
    rounded = Subtracted(proxy)
    t = residual_matrix(model, rounded, data, proxy.centre, *laplace_pairs(factor, MOVES, np.random.default_rng(2)))
    predicted = step_error(t.read, orders(n, np.random.default_rng(1)), n, m, SIGMA_MAX, exact=t.exact).error
    at = np.asarray(proxy.centre, np.float64) + factor[0, 0] * np.random.default_rng(3).standard_normal((2, 128))
    a, b = (jnp.asarray(v[:, None], jnp.float32) for v in at)
    terms, integrated = (
        np.asarray(jax.jit(jax.vmap(lambda p, q, e=e: e.log_ratio(model, p, q)(data)))(a, b), np.float64)
        for e in (rounded, proxy)
    )
    th, th2 = (np.asarray(v, np.float64)[:, 0] for v in (a, b))

    def log_post(t: np.ndarray) -> np.ndarray:  # float64, up to a constant
        return -0.5 * np.sum((y64[None, :] - t[:, None]) ** 2, axis=1) - 0.5 * t**2 / 100.0

    def log_q(t: np.ndarray) -> np.ndarray:
        return -0.5 * prec * (t - centre[0]) ** 2

    delta = log_post(th2) - log_post(th) + log_q(th) - log_q(th2)
    measured = rounding_measured(y64, terms, delta, m, np.random.default_rng(4))
    assert measured > 5e-3, measured  # rounding alone makes a resolvable error
    assert measured / 1.5 <= predicted <= 1.5 * measured, (predicted, measured)
    assert step_error(t.exact, orders(n, np.random.default_rng(1)), n, m, SIGMA_MAX).error < measured / 5
    assert rounding_measured(y64, integrated, delta, m, np.random.default_rng(4)) < measured / 100
