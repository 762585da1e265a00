"""No mode: separable logistic data with a weak or flat prior stop the warm-up with an error naming the
diverging coefficient and the cause; a hierarchical funnel with one naming the funnel, its scale parameter and the
group effects; an end point within a fraction of a Laplace s.d. of the mode only warns."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.optim.mode import ModeResult
from minibatch_mcmc.warmup import warmup
from minibatch_mcmc.warmup.no_mode import NoModeError, check_mode, flat_names


def separable(n=1000, seed=0):
    """``y = 1[z > 0]`` with ``x = (1, z, w)``: the classes are separated by the second coefficient."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    x = np.column_stack([np.ones(n), z, rng.standard_normal(n)]).astype(np.float32)
    return {"x": x, "y": (z > 0).astype(np.int32)}


@pytest.mark.parametrize(
    "prior_scale, cause", [(1000.0, "of the curvature"), (10_000.0, "of the curvature"), (None, "improper posterior")]
)
def test_separable_data_stop_the_warmup(prior_scale, cause):
    """Before: a finite 'posterior' came back silently. Now: NoModeError naming theta[1], its value (in the hundreds or
    thousands: the trust-region search follows it until the curvature vanishes, then finds the log-likelihood still rising
    along it) and the cause, with the prior's share of the curvature there (none under the flat prior: improper)."""
    with pytest.raises(NoModeError, match=r"Diverging parameters: theta\[1\] = [1-9]\d{2,3}\b") as err:
        warmup(logistic_regression(prior_scale=prior_scale), separable(), jnp.zeros(3), key=0)
    assert "separable" in str(err.value) and cause in str(err.value)
    assert "theta[0]" not in str(err.value) and "theta[2]" not in str(err.value)


def fake_mode(grad, hessian):
    return ModeResult(
        theta_hat=jnp.zeros(2),
        log_posterior=-1.0,
        grad_norm=float(np.linalg.norm(grad)),
        hessian=np.asarray(hessian),
        data_used=0,
        seconds=0.0,
        newton_steps_taken=0,
        converged=False,
        gradient=np.asarray(grad),
    )


def test_near_mode_warns_far_or_not_concave_raises():
    """Newton decrement 0.1 (< 0.5 s.d.): a warning quoting it; 3 s.d.s away, or a saddle: NoModeError."""
    model = logistic_regression(prior_scale=1.0)
    with pytest.warns(UserWarning, match="0.1 Laplace s.d.s from the mode"):
        check_mode(model, fake_mode([0.1, 0.0], -np.eye(2)), 10, 10)
    with pytest.raises(NoModeError, match=r"3 Laplace s.d.s further on .* theta\[0\] = 0 \(Newton step \+3\)"):
        check_mode(model, fake_mode([3.0, 0.0], -np.eye(2)), 10, 10)
    with pytest.raises(NoModeError, match="not concave"):
        check_mode(model, fake_mode([0.01, 0.0], np.diag([1.0, -1.0])), 10, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_mode(model, fake_mode([3.0, 0.0], -np.eye(2))._replace(converged=True), 10, 10)


def test_flat_names_follow_ravel_order():
    assert flat_names({"b": jnp.zeros(()), "w": jnp.zeros((2, 2))}) == [
        "theta['b']",
        "theta['w'][0, 0]",
        "theta['w'][0, 1]",
        "theta['w'][1, 0]",
        "theta['w'][1, 1]",
    ]


def funnel_data(seed=0):
    """5 groups x 20 rows, ``y ~ N(eta_g, 1)`` with group means 0.05 apart (s.d.): the data cannot hold the scale away from 0."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(5), 20).astype(np.int32)
    return group, (1.0 + 0.05 * rng.standard_normal(5)[group] + rng.standard_normal(100)).astype(np.float32)


def centred_funnel():
    """``mu ~ N(0, 5)``, ``tau ~ HalfNormal(5)`` (sampled as ``log_tau``), ``eta_j ~ N(mu, tau)``, ``y_i ~ N(eta_g(i), 1)``."""
    from minibatch_mcmc.models.base import Model

    def log_prior(th):
        tau = jnp.exp(th["log_tau"])
        lp = -0.5 * (th["mu"] / 5.0) ** 2 - 0.5 * (tau / 5.0) ** 2 + th["log_tau"]
        return lp + jnp.sum(-0.5 * ((th["eta"] - th["mu"]) / tau) ** 2 - th["log_tau"])

    return Model(log_prior, lambda th, b: -0.5 * (b["y"] - th["eta"][b["g"]]) ** 2, "centred_funnel")


def test_centred_funnel_is_named_a_funnel_not_separation():
    """Before: 'classes separable by these parameters ... drop the separating feature'. The centred hierarchical model's
    log posterior grows without bound as log tau -> -inf with the effects at a common value: the message names the funnel,
    theta['log_tau'] and the group effects, and says to reparameterise non-centred; nothing about separation."""
    group, y = funnel_data()
    start = {"eta": jnp.zeros(5), "log_tau": jnp.zeros(()), "mu": jnp.zeros(())}
    with pytest.raises(
        NoModeError,
        match=r"the posterior has a funnel \(hierarchical scale parameter theta\['log_tau'\] goes to 0 "
        r"with the group effects theta\['eta'\]\[0\], .*theta\['eta'\]\[4\].*no Gaussian mode\. "
        r"Reparameterise non-centred",
    ) as err:
        warmup(centred_funnel(), {"g": group, "y": y}, start, key=0, num_starts=0)
    assert "separa" not in str(err.value)


@pytest.mark.slow
def test_numpyro_centred_funnel_is_named_a_funnel():
    """(~15 s: NumPyro's conversion and the warm-up compile.) The same model written in NumPyro, via ``from_numpyro``:
    the scale site ``tau`` (its unconstrained log) is named."""
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from minibatch_mcmc.interop import from_numpyro

    def hierarchical(group, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfNormal(5.0))
        with numpyro.plate("groups", 5):
            eta = numpyro.sample("eta", dist.Normal(mu, tau))
        with numpyro.plate("rows", group.shape[0]):
            numpyro.sample("y", dist.Normal(eta[group], 1.0), obs=y)

    conv = from_numpyro(hierarchical, *funnel_data())
    with pytest.raises(
        NoModeError,
        match=r"funnel \(hierarchical scale parameter theta\['tau'\] goes to 0 with the group "
        r"effects theta\['eta'\]\[0\]",
    ) as err:
        warmup(conv.model, conv.data, conv.init, key=0, num_starts=0)
    assert "separa" not in str(err.value)


def prior_scale_model():
    """Logistic regression with a parameter ``s`` that only the prior sees (a prior scale the likelihood ignores)."""
    from minibatch_mcmc.models.base import Model

    def log_prior(theta):
        return -0.5 * jnp.sum(theta["beta"] ** 2) - 0.5 * (theta["s"] / 10.0) ** 2

    def log_lik(theta, batch):
        eta = batch["x"] @ theta["beta"]
        return batch["y"] * eta - jnp.logaddexp(0.0, eta)

    return Model(log_prior=log_prior, log_lik=log_lik)


def test_a_parameter_only_the_prior_sees_is_not_separation():
    """Before: at a converged mode the least-curved direction was ``s`` (prior curvature 0.01 against the data's
    hundreds), along which the log-likelihood is exactly flat, and flat counted as 'keeps rising': NoModeError blaming
    separable classes (a NumPyro logistic with a HalfCauchy prior scale failed so at N = 1e6). Now a rise must exceed
    rounding, and the warm-up returns the mode."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4000, 3)).astype(np.float32)
    y = (rng.uniform(size=4000) < 1 / (1 + np.exp(-x @ np.array([0.5, -0.3, 0.2])))).astype(np.float32)
    warm = warmup(prior_scale_model(), {"x": x, "y": y}, {"beta": jnp.zeros(3), "s": jnp.asarray(0.0)}, key=0)
    assert abs(float(warm.centre["s"])) < 1e-3
