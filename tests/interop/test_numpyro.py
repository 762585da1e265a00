"""NumPyro models in: ``from_numpyro`` against NumPyro's own densities and NUTS, and its errors."""

from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

numpyro = pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer.util import log_likelihood, potential_energy  # noqa: E402

from minibatch_mcmc.interop import constrained_result, from_numpyro, to_inference_data  # noqa: E402

N = 5000


def linreg(x, y=None):
    """Linear regression with an unknown noise scale (a constrained parameter)."""
    w = numpyro.sample("w", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w + b, sigma), obs=y)


def linreg_subsampled(x, y, n, batch=100):
    """The same model written for NumPyro's subsampling: plate indices, ``numpyro.subsample``, a fixed ``N``."""
    w = numpyro.sample("w", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("data", n, subsample_size=batch) as idx:
        obs = numpyro.subsample(y, event_dim=0)
        numpyro.sample("y", dist.Normal(x[idx] @ w + b, sigma), obs=obs)


def two_sites(x, y, c):
    """Two observed sites in the plate (a Normal and a Bernoulli) and a positive site with a Gamma prior."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    tau = numpyro.sample("tau", dist.Gamma(2.0, 2.0))
    with numpyro.plate("rows", len(y)):
        numpyro.sample("y", dist.Normal(x @ w, 1.0 / tau), obs=y)
        numpyro.sample("c", dist.Bernoulli(logits=x @ w), obs=c)


@pytest.fixture(scope="module")
def regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + 0.3 + 0.8 * rng.normal(size=N)).astype(np.float32)
    return x, y


@pytest.fixture(scope="module")
def converted(regression_data):
    return from_numpyro(linreg, *regression_data)


def test_reads_plate_sites_and_data_arguments(converted, regression_data):
    layout = converted.layout
    assert (layout.plates, layout.n, layout.observed) == (("data",), N, ("y",))
    assert layout.latent == ("b", "sigma", "w") and set(converted.init) == {"b", "sigma", "w"}
    assert set(converted.data) == {"x", "y"}
    np.testing.assert_array_equal(converted.data["x"], regression_data[0])
    assert converted.model.log_lik(converted.init, {k: v[:7] for k, v in converted.data.items()}).shape == (7,)


def test_densities_equal_numpyro_per_site():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = (x @ np.array([0.5, -1.0, 0.2]) + rng.normal(size=300)).astype(np.float32)
    c = (rng.uniform(size=300) < 0.5).astype(np.float32)
    conv = from_numpyro(two_sites, x, y, c)
    flat, unravel = ravel_pytree(conv.init)
    thetas = jax.vmap(unravel)(flat + 0.3 * jnp.asarray(rng.normal(size=(3, flat.size)), flat.dtype))
    named = conv.postprocess(thetas)
    np.testing.assert_allclose(named["tau"], np.exp(thetas["tau"]), rtol=1e-6)

    @jax.jit
    def densities(thetas, named):  # NumPyro's and ours, one program (not op by op, nor one compilation each)
        theirs = log_likelihood(two_sites, named, x, y, c)
        ours = jax.vmap(conv.site_log_lik, (0, None))(thetas, conv.data)
        total = jax.vmap(conv.model.log_lik, (0, None))(thetas, conv.data)
        joint = jax.vmap(conv.model.log_prior)(thetas) + total.sum(axis=1)
        energy = jax.vmap(lambda t: potential_energy(two_sites, (x, y, c), {}, t))(thetas)
        return theirs, ours, total, joint, energy

    theirs, ours, total, joint, energy = densities(thetas, named)
    for site in ("y", "c"):
        np.testing.assert_allclose(ours[site], theirs[site], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, ours["y"] + ours["c"], rtol=1e-6)
    np.testing.assert_allclose(joint, -energy, rtol=1e-5)


def test_subsampling_idioms_read_the_same_rows(converted, regression_data):
    x, y = regression_data
    sub = from_numpyro(linreg_subsampled, x, y, N)
    assert sub.layout.data_names == ("x", "y") and sub.layout.n == N
    theta = converted.init
    batch = {"x": x[10:60], "y": y[10:60]}
    np.testing.assert_allclose(sub.model.log_lik(theta, batch), converted.model.log_lik(theta, batch), rtol=1e-6)
    assert float(sub.model.log_prior(theta)) == pytest.approx(float(converted.model.log_prior(theta)), rel=1e-6)


def test_postprocess_reads_flat_and_dict_draws(converted):
    flat, _ = ravel_pytree(converted.init)
    draws = np.asarray(flat) + 0.1 * np.random.default_rng(2).normal(size=(3, 4, flat.size)).astype(np.float32)
    from_flat = converted.postprocess(draws)
    as_dict = jax.vmap(jax.vmap(ravel_pytree(converted.init)[1]))(jnp.asarray(draws))
    from_dict = converted.postprocess(as_dict)
    assert from_flat["w"].shape == (3, 4, 2) and from_flat["sigma"].shape == (3, 4)
    for name in ("b", "sigma", "w"):
        np.testing.assert_allclose(from_flat[name], from_dict[name], rtol=1e-6)
    np.testing.assert_allclose(from_flat["sigma"], np.exp(np.asarray(as_dict["sigma"])), rtol=1e-6)


def mcse(idata, method: str) -> dict:
    """ArviZ's ESS-based Monte Carlo standard error of each variable's mean or s.d."""
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: np.asarray(v) for k, v in az.mcse(idata, method=method).data_vars.items()}


def moments(idata) -> tuple[dict, dict]:
    """Posterior mean and s.d. of each variable over chains and draws."""
    post = idata.posterior
    return (
        {k: np.asarray(v.mean(("chain", "draw"))) for k, v in post.data_vars.items()},
        {k: np.asarray(v.std(("chain", "draw"))) for k, v in post.data_vars.items()},
    )


@pytest.mark.slow  # 24-52 s on the loaded 2-core machine: `make test-slow` (the fast suite's 10-minute budget)
def test_mhminibatch_with_taylor_proxy_agrees_with_numpyro_nuts(converted, regression_data):
    """Means and s.d.s of every named variable (``sigma`` constrained) agree within Monte Carlo error."""
    import arviz as az
    from numpyro.infer import MCMC, NUTS

    from minibatch_mcmc import mh_minibatch, sample
    from minibatch_mcmc.control_variates import proxy_langevin, taylor_proxy
    from minibatch_mcmc.optim.mode import find_mode, laplace_covariance

    model, data = converted.model, converted.data
    mode = find_mode(model, data, converted.init, key=0, adam_steps=200)
    proxy = taylor_proxy(model, data, mode.theta_hat)
    proposal = proxy_langevin(proxy, model.log_prior, 2.0, cov=laplace_covariance(mode.hessian))
    result = sample(
        model,
        data,
        mode.theta_hat,
        proposal=proposal,
        test=mh_minibatch(50),
        estimator=proxy,
        num_samples=400,
        num_chains=4,
        key=1,
        progress=False,
        block_size=400,
    )
    ours = to_inference_data(result, converted)
    assert set(ours.posterior.data_vars) == {"b", "sigma", "w"}
    assert constrained_result(result, converted).summary()["mean_batch_size"] < N / 10

    mcmc = MCMC(NUTS(linreg), num_warmup=150, num_samples=500, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *regression_data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = az.from_numpyro(mcmc)
    (m1, s1), (m2, s2) = moments(ours), moments(theirs)
    for stat, (a, b), method in (("mean", (m1, m2), "mean"), ("sd", (s1, s2), "sd")):
        e1, e2 = mcse(ours, method), mcse(theirs, method)
        for name in ("b", "sigma", "w"):
            z = (a[name] - b[name]) / np.sqrt(e1[name] ** 2 + e2[name] ** 2)
            assert np.all(np.abs(z) < 4), f"{stat} of {name}: ours {a[name]}, NUTS {b[name]}, z = {z}"


def no_plate(x, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def no_observation(x, y):
    numpyro.sample("mu", dist.Normal(0.0, 1.0))


def discrete_latent(x, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    with numpyro.plate("data", len(y)):
        numpyro.sample("y", dist.Normal(mu + k, 1.0), obs=y)


def two_plates(x, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", len(y)):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
    with numpyro.plate("groups", x.shape[1]):
        numpyro.sample("g", dist.Normal(mu, 1.0), obs=x[0])


def local_latent(x, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", len(y)):
        z = numpyro.sample("z", dist.Normal(mu, 1.0))
        numpyro.sample("y", dist.Normal(z, 1.0), obs=y)


def prior_reads_data(x, y):
    mu = numpyro.sample("mu", dist.Normal(jnp.mean(y), 1.0))
    with numpyro.plate("data", len(y)):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


@pytest.mark.parametrize(
    "model_fn, culprits",
    [
        (no_plate, ["['y']", "outside every plate"]),
        (no_observation, ["no observed site"]),
        (discrete_latent, ["'k' (Bernoulli", "discrete"]),
        (two_plates, ["'g' in plate 'groups' (size 3)", "'y' in plate 'data' (size 40)", "different sizes"]),
        (local_latent, ["['z']", "'data'"]),
        (prior_reads_data, ["['mu']", "one row"]),
    ],
)
def test_unsupported_models_name_the_culprit(model_fn, culprits):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(40, 3)).astype(np.float32), rng.normal(size=40).astype(np.float32)
    with pytest.raises(ValueError) as err:
        from_numpyro(model_fn, x, y)
    for text in culprits:
        assert text in str(err.value)


def test_observations_from_a_closure_are_refused():
    y = np.zeros(30, np.float32)

    def closure(n):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", n):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with pytest.raises(ValueError, match="no argument of the model has leading axis N=30"):
        from_numpyro(closure, 30)


def test_missing_numpyro_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpyro", None)
    with pytest.raises(ImportError, match=r"pip install minibatch-mcmc\[numpyro\]"):
        from_numpyro(linreg, np.zeros((3, 1)), np.zeros(3))


def test_a_count_outside_the_support_names_the_site_and_row():
    """Before: 'no start with a finite log density' naming only the latent site. Now: the site 'obs', row 77, y=-1."""

    def counts(y):
        rate = numpyro.sample("rate", dist.LogNormal(0.0, 1.0))
        with numpyro.plate("N", y.shape[0]):
            numpyro.sample("obs", dist.Poisson(rate), obs=y)

    y = np.random.default_rng(0).poisson(3.0, 500).astype(np.int32)
    y[77] = -1
    with pytest.raises(
        ValueError, match=r"observed site 'obs' has a non-finite log-likelihood at row 77 \(data \{'y': -1\}\)"
    ):
        from_numpyro(counts, y)


def rows_as_arguments(run):
    """``run()`` with a lowering that captures more than 100 kB of constants made an error (JAX warns past
    ``jax_captured_constants_warn_bytes``), and its value."""
    before = jax.config.jax_captured_constants_warn_bytes
    jax.config.update("jax_captured_constants_warn_bytes", 100_000)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="A large amount of constants were captured")
            return run()
    finally:
        jax.config.update("jax_captured_constants_warn_bytes", before)


def wide_rows(n: int = 40_000):
    """``n`` rows of the regression (480 kB at 40,000: well over the 100 kB limit of ``rows_as_arguments``)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    return x, (x @ np.array([1.0, -0.5]) + 0.3 + 0.8 * rng.normal(size=n)).astype(np.float32)


def test_conversion_and_mode_search_take_the_rows_as_arguments():
    """``from_numpyro`` (NumPyro's start on all rows, the data-free prior check) and the mode search's minibatch Adam
    compile with the rows as an argument, not as constants captured in the program.

    A jitted closure over the data embeds all ``N`` rows in the program, so compiling grows with ``N``: it cost ~9 s in
    ``from_numpyro`` and ~15 s in the mode search at ``N = 10^6``. Either closure, put back, fails this test."""
    from minibatch_mcmc.warmup.multistart import adam_ends

    def run():
        conv = from_numpyro(linreg, *wide_rows())
        flat, unravel = ravel_pytree(conv.init)
        return adam_ends(
            conv.model, conv.data, conv.layout.n, flat[None], unravel, jax.random.key(0), 1.0, 20, 50, 0.05
        )[:2]

    ends, ok = rows_as_arguments(run)
    assert ok.all() and np.all(np.isfinite(ends))


@pytest.mark.slow
def test_the_whole_fit_takes_the_rows_as_arguments():
    """The same for the whole of ``auto_sample`` (warm-up passes, influence, sampling, the check after it)."""
    from minibatch_mcmc.warmup import auto_sample

    def run():
        conv = from_numpyro(linreg, *wide_rows())
        return auto_sample(
            conv.model,
            conv.data,
            conv.init,
            num_samples=20,
            num_chains=2,
            proposal="proxy_hmc",
            progress=False,
            num_starts=2,
            check_draws=5,
        )[0]

    assert np.all(np.isfinite(np.asarray(rows_as_arguments(run).positions["sigma"])))


def per_row_deterministic(x, y):
    """A regression with a per-row deterministic site (``mu``, inside the plate) and a global one (``scale2``)."""
    w = numpyro.sample("w", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    numpyro.deterministic("scale2", sigma**2)
    with numpyro.plate("data", x.shape[0]):
        mu = numpyro.deterministic("mu", x @ w)
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def test_a_per_row_deterministic_site_is_named_when_dropped(regression_data):
    """Would catch the per-row ``numpyro.deterministic`` site dropped without a word (before: no warning): one warning
    names ``mu`` and says how to compute it (Predictive on the draws); the global ``scale2`` is still recorded, and
    Predictive on a draw gives ``mu`` = x @ w as the message says."""
    from numpyro.infer import Predictive

    x, y = (a[:500] for a in regression_data)
    with pytest.warns(UserWarning, match=r"deterministic sites \['mu'\] sit inside the data plate") as caught:
        conv = from_numpyro(per_row_deterministic, x, y)
    assert sum("inside the data plate" in str(r.message) for r in caught) == 1 and "Predictive" in str(
        caught[0].message
    )
    assert conv.layout.deterministic == ("scale2",) and "mu" not in conv.model.constrain(conv.init)
    draws = {k: v[None] for k, v in conv.postprocess(conv.init).items()}
    mu = Predictive(per_row_deterministic, posterior_samples=draws, return_sites=["mu"])(jax.random.key(0), x, y)["mu"]
    np.testing.assert_allclose(mu[0], x @ np.asarray(draws["w"][0]), rtol=1e-5, atol=1e-5)
