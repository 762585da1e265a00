"""models.glmm: each family's log-likelihood and the priors against independent scipy.stats implementations, the
parameter layout and ``constrain``, and the checks of a bad design."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from minibatch_mcmc.models.glmm import GLMMPrior, dimension, glmm_model, initial_theta
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor

FAMILIES = ("bernoulli", "binomial", "poisson", "negative_binomial", "gaussian", "student_t")


def design(family: str, n: int = 40, seed: int = 0) -> GLMMDesign:
    """Two fixed effects, a random intercept ``g`` (5 levels) and a random intercept and slope ``h`` (3 levels)."""
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(n), rng.normal(size=n)]
    y = {
        "bernoulli": rng.integers(0, 2, n),
        "binomial": rng.binomial(6, 0.4, n),
        "poisson": rng.poisson(3.0, n),
        "negative_binomial": rng.poisson(3.0, n),
    }.get(family, rng.normal(1.0, 2.0, n)).astype(np.float64)
    g = GroupFactor("g", rng.integers(0, 5, n), np.ones((n, 1)), tuple("abcde"), ("1",))
    h = GroupFactor("h", rng.integers(0, 3, n), np.c_[np.ones(n), x[:, 1]], ("p", "q", "r"), ("1", "x1"))
    return GLMMDesign(
        y=y,
        x=x,
        fixed=("Intercept", "x1"),
        factors=(g, h),
        offset=rng.normal(0.0, 0.2, n) if family == "poisson" else None,
        trials=np.full(n, 6.0) if family == "binomial" else None,
    )


def scipy_log_lik(family: str, eta: np.ndarray, d: GLMMDesign, extras: dict) -> np.ndarray:
    """Each row's log-density from scipy.stats at the linear predictor ``eta`` (float64)."""
    y = d.y
    if family == "bernoulli":
        return stats.bernoulli.logpmf(y, special.expit(eta))
    if family == "binomial":
        return stats.binom.logpmf(y, d.trials, special.expit(eta))
    if family == "poisson":
        return stats.poisson.logpmf(y, np.exp(eta))
    if family == "negative_binomial":
        alpha, mu = extras["alpha"], np.exp(eta)
        return stats.nbinom.logpmf(y, alpha, alpha / (alpha + mu))
    if family == "gaussian":
        return stats.norm.logpdf(y, eta, extras["sigma"])
    return stats.t.logpdf(y, extras["nu"], eta, extras["sigma"])


@pytest.mark.parametrize("centred", [True, False])
@pytest.mark.parametrize("family", FAMILIES)
def test_log_lik_matches_scipy(family, centred):
    """At a random parameter, every row's log-likelihood equals scipy.stats's density at ``eta`` computed here in numpy
    from ``constrain``'s beta and effects (to 1e-10, float64): a wrong link, a missing normalising constant, a swapped
    negative-binomial parameterisation, ``u = sd * a`` applied twice or an effect taken from the wrong level would differ by
    far more."""
    with jax.enable_x64(True):
        d = design(family)
        model, data = glmm_model(d, family, centred=centred, sample_as_written=True)
        theta = jnp.asarray(np.random.default_rng(1).normal(0.0, 0.5, dimension(model.glmm.layout)))
        values = {k: np.asarray(v, np.float64) for k, v in model.constrain(theta).items()}
        arr = {k: np.asarray(v, np.float64) for k, v in data.items()}  # the float32 columns the model reads
        eta = arr["x"] @ values["beta"] + values["u_g"][d.factors[0].codes, 0]
        eta = eta + np.sum(arr["z_1"] * values["u_h"][d.factors[1].codes], axis=1) + arr.get("offset", 0.0)
        d = d._replace(y=arr["y"])
        jdata = {k: jnp.asarray(v, jnp.float64 if v.dtype == np.float32 else v.dtype) for k, v in data.items()}
        np.testing.assert_allclose(
            np.asarray(model.log_lik(theta, jdata)), scipy_log_lik(family, eta, d, values), rtol=1e-10, atol=1e-10
        )


@pytest.mark.parametrize("centred", [True, False])
def test_log_prior_matches_scipy(centred):
    """The Student-t family's log prior equals the sum of scipy densities, each scale's with the log-Jacobian of its
    unconstrained coordinate, to 1e-10: a missing Jacobian (``+ log sd``), a centred density used non-centred, or the
    autoscaled ``2.5 / sd(x)`` dropped would each be off by O(1)."""
    with jax.enable_x64(True):
        d = design("student_t")
        prior = GLMMPrior(sd="half_normal", sd_scale=1.5)
        model, _ = glmm_model(d, "student_t", centred=centred, prior=prior, sample_as_written=True)
        theta = jnp.asarray(np.random.default_rng(2).normal(0.0, 0.5, dimension(model.glmm.layout)))
        v = {k: np.asarray(val, np.float64) for k, val in model.constrain(theta).items()}
        y = d.y
        med = np.median(y)
        s_y = 1.4826 * np.median(np.abs(y - med))
        x_sd = d.x[:, 1].std()
        want = stats.norm.logpdf(v["beta"][0], med, 10.0 * s_y) + stats.norm.logpdf(v["beta"][1], 0.0, 2.5 * s_y / x_sd)
        for name in ("g", "h"):
            sd, u = v[f"sd_{name}"], v[f"u_{name}"]
            want += np.sum(stats.halfnorm.logpdf(sd, scale=1.5 * s_y) + np.log(sd))
            # non-centred: the standardised a = u / sd are the parameters, a ~ N(0, 1)
            want += np.sum(stats.norm.logpdf(u, 0.0, sd)) if centred else np.sum(stats.norm.logpdf(u / sd))
        sigma, nu = v["sigma"], v["nu"]
        want += np.log(2.0) + stats.t.logpdf(sigma, 3.0, 0.0, 1.5 * s_y) + np.log(sigma)
        want += stats.gamma.logpdf(nu, 2.0, scale=10.0) + np.log(nu - 1.0)
        np.testing.assert_allclose(float(model.log_prior(theta)), want, rtol=1e-10)


def test_layout_and_constrain():
    """The flat parameter has ``p + sum (G k + k) + e`` entries, ``constrain`` names beta, sd_<f>, u_<f> (levels x columns)
    and the family's extras, and a centred and a non-centred model with the same ``u`` give the same likelihood."""
    d = design("gaussian")
    centred, data = glmm_model(d, "gaussian", centred=True, sample_as_written=True)
    plain, _ = glmm_model(d, "gaussian", centred=False, sample_as_written=True)
    assert dimension(centred.glmm.layout) == 2 + (5 + 1) + (6 + 2) + 1 == initial_theta(centred).shape[0]
    out = centred.constrain(initial_theta(centred) + 0.3)
    assert {k: np.shape(v) for k, v in out.items()} == {
        "beta": (2,),
        "sd_g": (1,),
        "u_g": (5, 1),
        "sd_h": (2,),
        "u_h": (3, 2),
        "sigma": (),
    }
    rng = np.random.default_rng(3)
    theta = jnp.asarray(rng.normal(0.0, 0.4, 17), jnp.float32)
    # the non-centred position with the same u: a = u / sd
    beta, effects, log_sds, phi = (
        theta[:2],
        (theta[2:7].reshape(5, 1), theta[7:13].reshape(3, 2)),
        (theta[13:14], theta[14:16]),
        theta[16:],
    )
    a = [e / jnp.exp(s)[None, :] for e, s in zip(effects, log_sds)]
    other = jnp.concatenate([beta, a[0].ravel(), a[1].ravel(), *log_sds, phi])
    np.testing.assert_allclose(
        np.asarray(plain.log_lik(other, data)), np.asarray(centred.log_lik(theta, data)), rtol=1e-5, atol=1e-5
    )
    centred.check_shapes(theta, data)


@pytest.mark.parametrize(
    "family, y, message",
    [
        ("probit", None, "family='probit'"),
        ("bernoulli", np.full(40, 2.0), "y must be 0 or 1"),
        ("poisson", np.full(40, 1.5), "non-negative integer counts"),
        ("binomial", None, "needs the design's trials"),
    ],
)
def test_bad_input_named(family, y, message):
    """A family the module does not know, a response it cannot have, or a binomial without trials: one ValueError saying so."""
    d = design("bernoulli")
    d = d._replace(y=d.y if y is None else y)
    with pytest.raises(ValueError, match=message):
        glmm_model(d, family)
