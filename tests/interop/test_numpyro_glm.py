"""GLM recognition in NumPyro models (``interop.numpyro_glm``) and a GLM's exact default test (``warmup.exact_choice``).

Recognised: the design ``x`` equals the columns written out here in the parameters' ravel order, the log-likelihood
equals NumPyro's own (the conversion without recognition) at random parameters, the family and offset are the ones
the model was written with. Not recognised: a predictor that is not linear, a sampled scale, a Bernoulli offset; group
effects ``u[g]``, centred or not, get a warning naming ``mm.glmm``. The default test: Scalable MH for a GLM whose bounds
predict few rows, the penalty test (and a line saying so) where they predict more; (slow) the posterior of a NumPyro
Poisson GLM sampled with the default against quadrature.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402

from minibatch_mcmc.acceptance.registry import named_test  # noqa: E402
from minibatch_mcmc.control_variates import GLMProxy, taylor_proxy  # noqa: E402
from minibatch_mcmc.interop import from_numpyro  # noqa: E402
from minibatch_mcmc.interop.numpyro import convert  # noqa: E402
from minibatch_mcmc.models import logistic_regression  # noqa: E402
from minibatch_mcmc.models.base import GLMSpec  # noqa: E402
from minibatch_mcmc.warmup.context import WarmupContext  # noqa: E402
from minibatch_mcmc.warmup.exact_choice import estimator_for, exact_or_penalty  # noqa: E402

N = 300


def rows(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, 2)).astype(np.float32)
    expo = rng.uniform(0.5, 2.0, N).astype(np.float32)
    return x, expo, rng


def poisson_offset(x, expo, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(a + x @ b + jnp.log(expo))), obs=y)


def probit(x, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(probs=jax.scipy.stats.norm.cdf(x @ b)), obs=y)


def scaled_logit(x, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=s * (x @ b)), obs=y)


def sampled_sigma(x, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ b, sigma), obs=y)


def logit_offset(x, off, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=x @ b + off), obs=y)


def non_centred(x, g, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("groups", 4):
        a = numpyro.sample("a", dist.Normal(0.0, 1.0))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=mu + tau * a[g] + x[:, 0]), obs=y)


def centred(x, g, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    with numpyro.plate("groups", 4):
        u = numpyro.sample("u", dist.Normal(0.0, tau))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=u[g] + b * x[:, 1]), obs=y)


def same_log_lik(conv, plain, seed=3, floor=-np.inf):
    """The recognised model's log-likelihood on its data equals NumPyro's on the user's, at 3 random parameters (rows
    where NumPyro's is above ``floor``: its float32 ``1 - probs`` loses digits, then saturates, where ``log_ndtr`` does not)."""
    flat = np.asarray(conv.init)
    for k in range(3):
        theta = jnp.asarray(flat + np.random.default_rng(seed + k).standard_normal(flat.size), jnp.float32)
        ours = np.asarray(conv.model.log_lik(theta, conv.data))
        theirs = np.asarray(plain.model.log_lik(theta, plain.data))
        assert np.mean(theirs > floor) > 0.5
        ours, theirs = ours[theirs > floor], theirs[theirs > floor]
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5 * np.abs(theirs).max())


def test_poisson_with_offset_recognised(capsys):
    """Fails if the design's columns, their order, the offset or the family were read wrong (eta = a + x b + log e)."""
    x, expo, rng = rows()
    y = rng.poisson(np.exp(0.2 + x @ [0.3, -0.2]) * expo)
    conv = from_numpyro(poisson_offset, x, expo, y)
    assert conv.model.glm == GLMSpec("poisson", offset=True, exact_default=True)
    np.testing.assert_allclose(conv.data["x"], np.column_stack([np.ones(N), x]), atol=1e-6)  # ravel order: a, then b
    np.testing.assert_allclose(conv.data["offset"], np.log(expo), atol=1e-5)
    np.testing.assert_array_equal(conv.data["y"], y)
    assert "recognised a poisson GLM" in capsys.readouterr().out
    same_log_lik(conv, convert(poisson_offset, (x, expo, y), {}, recognise=False))
    assert set(conv.postprocess(conv.init)) == {"a", "b"} and conv.cost.passes == 2.0


def test_probit_through_probs_recognised():
    x, _, rng = rows(1)
    y = (rng.uniform(size=N) < 0.5).astype(np.int32)
    conv = from_numpyro(probit, x, y)
    assert conv.model.glm == GLMSpec("probit", exact_default=True)
    same_log_lik(conv, convert(probit, (x, y), {}, recognise=False), floor=-7.0)


@pytest.mark.parametrize("model", [scaled_logit, sampled_sigma, logit_offset])
def test_not_a_glm_stays_as_it_is(model):
    """A bilinear predictor, a sampled Gaussian scale and a Bernoulli offset have no bounds: the model stays general."""
    x, _, rng = rows(2)
    y = x[:, 0] if model is sampled_sigma else (rng.uniform(size=N) < 0.5).astype(np.int32)
    args = (x, x[:, 1], y) if model is logit_offset else (x, y)
    conv = from_numpyro(model, *args)
    assert conv.model.glm is None and isinstance(conv.init, dict)
    assert set(conv.data) == ({"x", "off", "y"} if model is logit_offset else {"x", "y"})


def test_group_effects_named_not_made_a_dense_glm():
    """Non-centred mu + tau a[g] and centred u[g] ~ N(0, tau) (eta linear in (b, u): a GLM with a dense design in the
    levels): both stay general models, with a warning naming the group plate and mm.glmm."""
    x, _, rng = rows(3)
    g = rng.integers(0, 4, N)
    y = (rng.uniform(size=N) < 0.5).astype(np.int32)
    for model, site in ((non_centred, "a"), (centred, "u")):
        with pytest.warns(UserWarning, match=rf"'{site}' \(plate 'groups', 4 levels\) are group effects.*mm\.glmm"):
            conv = from_numpyro(model, x, g, y)
        assert conv.model.glm is None and isinstance(conv.init, dict) and set(conv.data) == {"x", "g", "y"}


def test_exact_default_kept_or_penalty_when_bounds_predict_more(capsys):
    """The bounds at the true Laplace scale predict well under 50 rows: Scalable MH kept; at 30 times that scale they
    predict more: the penalty test with the Taylor proxy, and a line saying so."""
    rng = np.random.default_rng(4)
    x = np.column_stack([np.ones(2000), rng.standard_normal(2000)]).astype(np.float32)
    y = (rng.uniform(size=2000) < 1 / (1 + np.exp(-x @ [0.3, -0.8]))).astype(np.int32)
    data, model, centre = {"x": x, "y": y}, logistic_regression(5.0), jnp.asarray([0.3, -0.8])
    proxy = taylor_proxy(model, data, centre, order=2)
    chol = np.linalg.cholesky(np.linalg.inv(-np.asarray(proxy.hess_sum, np.float64)))
    smh, penalty = named_test("smh"), named_test("penalty")
    for scale, kept in ((1.0, True), (30.0, False)):
        ctx = WarmupContext(
            model, data, smh, estimator_for(smh, model, data, proxy, chol * scale, None), 1.0, "metropolis"
        )
        out = exact_or_penalty(ctx, proxy, chol * scale, None, penalty, jax.random.key(0), progress=False)
        assert (out.test is smh) == kept and isinstance(out.estimator, GLMProxy) == kept
        printed = capsys.readouterr().out
        assert ("test penalty (a GLM" in printed) == (not kept), printed


def poisson_ab(z, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("rows", z.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(a + b * z)), obs=y)


def logistic_ab(z, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 5.0))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("rows", z.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=a + b * z), obs=y)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["poisson", "logistic"])
def test_numpyro_glm_default_matches_quadrature(family):
    """(a few minutes) A NumPyro GLM through ``from_numpyro`` + ``auto_sample`` with every default, N = 5000: the warm-up
    keeps Scalable MH, and the posterior means and variances of (a, b) are within |z| < 4 of quadrature at ESS > 3200
    per coordinate (a 5% s.d. error is a 10% variance error, about 4 s.e. there), reading under one row per step."""
    from helpers_glm import glm_data, glm_quadrature, poisson_data

    from minibatch_mcmc.diagnostics import check_moments
    from minibatch_mcmc.warmup import auto_sample

    data = poisson_data(5_000, (0.5, -0.3), 9) if family == "poisson" else glm_data(5_000, (0.3, -0.8), 8)
    mean, var, _, _ = glm_quadrature(data, 5.0, family=family)
    conv = from_numpyro(poisson_ab if family == "poisson" else logistic_ab, data["x"][:, 1], data["y"])
    res, w = auto_sample(
        conv.model, conv.data, conv.init, num_samples=6000, num_chains=4, key=2, progress=False, block_size=3000
    )
    assert w.test.name == "smh" and isinstance(w.estimator, GLMProxy)
    draws = np.stack([res.positions["a"], res.positions["b"]], -1)[:, 200:]
    chk = check_moments(draws, mean, var)
    assert np.all(chk.ess > 3200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
    s = res.summary(posterior=False)
    assert s["data_per_test"] < 1 and s["fallback_steps"] == 0 and s["bound_exceeded_steps"] == 0, s


COMPILES = [0]
"""XLA backend compilations since this module was imported."""


def count_backend_compiles(event: str, duration: float, **_) -> None:
    """Monitoring listener: count XLA backend compilations."""
    if event == "/jax/core/compile/backend_compile_duration":
        COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(count_backend_compiles)


def logistic_abc(z, y=None):
    """A logistic regression with an intercept on three columns."""
    a = numpyro.sample("a", dist.Normal(0.0, 1.0))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
    with numpyro.plate("rows", z.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=a + z @ b), obs=y)


def test_recognition_compiles_whole_checks_not_single_operations():
    """Fails if the GLM checks run operation by operation again (each a compilation: 93 for a logistic model in a fresh
    process before they were compiled as whole functions, ~19 after); 97 rows and 3 columns, shapes no other test here
    uses, so no operation is already compiled."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((97, 3)).astype(np.float32)
    y = (rng.uniform(size=97) < 0.5).astype(np.float32)
    before = COMPILES[0]
    conv = from_numpyro(logistic_abc, z, y)
    assert conv.model.glm == GLMSpec("logistic", exact_default=True)
    assert COMPILES[0] - before <= 35, COMPILES[0] - before
