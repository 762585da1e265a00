"""The mode search on a hierarchical ridge and on a heavy-tailed robust regression (issues 31 and 32).

The ridge: a non-centred hierarchical logistic regression, ``logit = mu + tau a[g] + X beta`` with ``tau ~ HalfNormal(1)``
sampled as ``log tau`` (with its Jacobian), ``a ~ N(0, 1)``, 16 groups of very unequal sizes (30 to ~6,000 rows):
the data pin each ``c_g = mu + tau a_g`` while ``tau`` and the ``a_g`` slide along a curved ridge held by the prior, so
the log posterior is not concave a fraction of an s.d. from its mode. The reference mode is scipy's float64 optimiser
on the same log posterior written in NumPy, independently of the model's JAX code.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax.scipy.special import gammaln as jgammaln
from scipy.special import expit, gammaln

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.warmup.centre import find_centre
from minibatch_mcmc.warmup.no_mode import NoModeError

GROUPS, FIXED = 16, 7


def ridge_data(n, seed=0):
    """Groups of geometrically spread sizes (smallest 30 rows), true group s.d. 0.3, 7 standard-normal covariates."""
    rng = np.random.default_rng(seed)
    w = np.geomspace(1.0, 200.0, GROUPS)
    sizes = np.maximum(30, np.floor(w / w.sum() * n)).astype(int)
    sizes[-1] += n - sizes.sum()
    g = np.repeat(np.arange(GROUPS), sizes).astype(np.int32)
    x = rng.standard_normal((n, FIXED)).astype(np.float32)
    eta = -0.5 + 0.3 * rng.standard_normal(GROUPS)[g] + x @ rng.normal(0.0, 0.5, FIXED)
    return {"x": x, "g": g, "y": (rng.random(n) < expit(eta)).astype(np.float32)}


def ridge_model():
    def log_prior(th):
        tau = jnp.exp(th["log_tau"])
        return (
            -0.5 * tau**2
            + th["log_tau"]
            - 0.5 * jnp.sum(th["a"] ** 2)
            - 0.5 * (th["mu"] / 5.0) ** 2
            - 0.5 * jnp.sum((th["beta"] / 5.0) ** 2)
        )

    def log_lik(th, b):
        eta = th["mu"] + jnp.exp(th["log_tau"]) * th["a"][b["g"]] + b["x"] @ th["beta"]
        return b["y"] * eta - jnp.logaddexp(0.0, eta)

    return Model(log_prior, log_lik, "ridge_logistic")


RIDGE_START = {"a": jnp.zeros(GROUPS), "beta": jnp.zeros(FIXED), "log_tau": jnp.zeros(()), "mu": jnp.zeros(())}


def ridge_reference(data):
    """Float64 log posterior and gradient in NumPy over the flat order (a, beta, log_tau, mu)."""
    x, g, y = (np.asarray(data[k], np.float64) for k in ("x", "g", "y"))
    g = g.astype(int)

    def f(z):
        a, beta, lt, mu = z[:GROUPS], z[GROUPS : GROUPS + FIXED], z[-2], z[-1]
        tau = np.exp(lt)
        eta = mu + tau * a[g] + x @ beta
        r = y - expit(eta)
        value = (
            np.sum(y * eta - np.logaddexp(0.0, eta))
            - 0.5 * tau**2
            + lt
            - 0.5 * a @ a
            - 0.5 * (mu / 5) ** 2
            - 0.5 * beta @ beta / 25
        )
        per_group = np.bincount(g, r, GROUPS)
        grad = np.concatenate(
            [tau * per_group - a, x.T @ r - beta / 25, [tau * per_group @ a - tau**2 + 1.0, r.sum() - mu / 25]]
        )
        return value, grad

    return f


def centre_of(model, data, start, newton_steps=10):
    return find_centre(
        model,
        as_data_source(data),
        start,
        jax.random.PRNGKey(0),
        jax.random.PRNGKey(1),
        temperature=1.0,
        order=2,
        newton_steps=newton_steps,
        num_starts=8,
        stratum=False,
    )


@pytest.mark.slow
def test_ridge_mode_matches_scipy_float64():
    """(~40 s on two loaded cores: the compilations.) The lean search reaches the ridge model's mode: the float64 gradient
    there is below 0.2 Laplace s.d.s (Newton decrement with the search's Hessian), and the float64 log posterior is within
    0.05 nats of scipy's maximum (a point 0.2 s.d.s off loses 0.02), and the mode phase reads at most 20 passes over N
    (before: 112, most of them polishing the dispersed starts' unconverged Adam ends along the ridge). Catches a search
    that stops short on the ridge, one that raises NoModeError blaming separation, and the passes spent polishing."""
    data = ridge_data(20_000, seed=3)
    centre = centre_of(ridge_model(), data, RIDGE_START)
    f = ridge_reference(data)
    ours = np.asarray(jax.flatten_util.ravel_pytree(centre.theta_hat)[0], np.float64)
    value, grad = f(ours)
    best = scipy.optimize.minimize(
        lambda z: tuple(-v for v in f(z)), ours, jac=True, method="BFGS", options={"gtol": 1e-8}
    )
    assert -best.fun - value < 0.05, (value, -best.fun)
    assert float(np.sqrt(grad @ centre.covariance @ grad)) < 0.2
    assert (
        centre.cost["mode"].passes <= 20
    )  # measured 9-16 at 2e4 (issue 31 saw NoModeError, or 549 tuning passes with newton_steps=50)


def robust_data(n, seed=0, k=8):
    """``y = X beta + 10 e``, ``e`` a right-skewed heavy-tailed mixture: 97% lognormal(0, 0.6) - 1, 3% exponential(5)."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.standard_normal((n, k - 1))]).astype(np.float32)
    beta = np.concatenate([[20.0], rng.normal(0.0, 3.0, k - 1)])
    e = np.where(rng.random(n) < 0.03, rng.exponential(5.0, n), rng.lognormal(0.0, 0.6, n) - 1.0)
    return {"x": x, "y": (x @ beta + 10.0 * e).astype(np.float32)}


def robust_model():
    """``StudentT(nu, X beta, sigma)``, ``nu ~ Gamma(2, 0.1)``, ``sigma ~ HalfNormal(50)`` on log scales with Jacobians."""

    def log_prior(th):
        nu, sigma = jnp.exp(th["log_nu"]), jnp.exp(th["log_sigma"])
        return (
            2.0 * th["log_nu"]
            - 0.1 * nu
            - 0.5 * (sigma / 50.0) ** 2
            + th["log_sigma"]
            - 0.5 * jnp.sum((th["beta"] / 100.0) ** 2)
        )

    def log_lik(th, b):
        nu, sigma = jnp.exp(th["log_nu"]), jnp.exp(th["log_sigma"])
        z = (b["y"] - b["x"] @ th["beta"]) / sigma
        return (
            jgammaln((nu + 1) / 2)
            - jgammaln(nu / 2)
            - 0.5 * jnp.log(nu * jnp.pi)
            - th["log_sigma"]
            - 0.5 * (nu + 1) * jnp.log1p(z * z / nu)
        )

    return Model(log_prior, log_lik, "robust_t")


def robust_reference(data):
    """Float64 negative log posterior of the robust regression in NumPy (flat order: beta, log_nu, log_sigma)."""
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"], np.float64)

    def f(z):
        beta, ln, ls = z[:-2], z[-2], z[-1]
        nu, sigma = np.exp(ln), np.exp(ls)
        r = (y - x @ beta) / sigma
        lik = np.sum(
            gammaln((nu + 1) / 2)
            - gammaln(nu / 2)
            - 0.5 * np.log(nu * np.pi)
            - ls
            - 0.5 * (nu + 1) * np.log1p(r * r / nu)
        )
        return -(lik + 2 * ln - 0.1 * nu - 0.5 * (sigma / 50) ** 2 + ls - 0.5 * beta @ beta / 1e4)

    return f


@pytest.mark.slow
def test_robust_regression_mode_within_three_passes():
    """(~40 s: the compilations.) Issue 32's robust regression on right-skewed heavy-tailed data (N = 20,000, ``nu`` and
    ``sigma`` estimated, the intercept 20 far from Adam's reach): the mode phase reads at most 3 passes over N (before:
    42 at N = 1e5, the dispersed starts' unconverged Adam ends each polished by full-data Newton), and its mode's
    float64 log posterior is within 0.05 nats of scipy's maximum."""
    data = robust_data(20_000)
    start = {"beta": jnp.zeros(8), "log_nu": jnp.zeros(()), "log_sigma": jnp.zeros(())}
    centre = centre_of(robust_model(), data, start)
    assert centre.cost["mode"].passes <= 3.0, centre.cost["mode"].describe()
    f = robust_reference(data)
    ours = np.asarray(jax.flatten_util.ravel_pytree(centre.theta_hat)[0], np.float64)
    best = scipy.optimize.minimize(f, ours, method="BFGS", options={"gtol": 1e-6})
    assert f(ours) - best.fun < 0.05, (f(ours), best.fun)


@pytest.mark.slow
def test_separable_flat_prior_still_refused_after_convergence():
    """The trust region follows separable logistic data under a flat prior until float32 curvature vanishes (the
    gradient then passes the tolerance): the log-likelihood still rising along that direction makes it NoModeError
    naming the improper posterior, not a mode."""
    from minibatch_mcmc.models import logistic_regression

    rng = np.random.default_rng(0)
    z = rng.standard_normal(1000)
    data = {
        "x": np.column_stack([np.ones(1000), z, rng.standard_normal(1000)]).astype(np.float32),
        "y": (z > 0).astype(np.int32),
    }
    with pytest.raises(NoModeError, match="keeps rising.*improper posterior"):
        centre_of(logistic_regression(prior_scale=None), data, jnp.zeros(3))


@pytest.mark.slow
def test_numpyro_ridge_reaches_its_mode():
    """(~2 min on two loaded cores: N = 1e5, NumPyro's conversion and the compilations.) Issue 31's route: the ridge model
    written in NumPyro (``tau ~ HalfNormal(1)``, ``a ~ Normal(0, 1)`` in a group plate) through ``from_numpyro``. Before:
    NoModeError after 10 Newton steps blaming separation ("the prior gives 0.02% of the curvature") on this seed (138
    passes on seed 0). Now: a positive definite Laplace covariance within 20 passes (measured 12.5), no error and no
    warning but, at most, the one that the centre is under 0.5 s.d.s from the mode (after the 10 full-data steps)."""
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from minibatch_mcmc.interop import from_numpyro

    def hierarchical(x, g, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfNormal(1.0))
        beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([FIXED]).to_event(1))
        with numpyro.plate("groups", GROUPS):
            a = numpyro.sample("a", dist.Normal(0.0, 1.0))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=mu + tau * a[g] + x @ beta), obs=y)

    data = ridge_data(100_000, seed=1)
    conv = from_numpyro(hierarchical, data["x"], data["g"], data["y"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        centre = centre_of(conv.model, conv.data, conv.init)
    other = [
        str(w.message)
        for w in caught
        if issubclass(w.category, UserWarning) and "Laplace s.d.s from the mode" not in str(w.message)
    ]
    assert not other, (
        other
    )  # only, at most, the note that the centre is under 0.5 s.d.s off the mode (efficiency, not exactness)
    assert np.all(np.linalg.eigvalsh(centre.covariance) > 0)
    assert centre.cost["mode"].passes <= 20
