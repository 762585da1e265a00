"""A NumPyro model's results in its own terms: constrained values and deterministic sites under the site names on
every output path (draws, ``summary()``, ArviZ, checkpoints, ``auto_sample``), the pointwise log-likelihood group,
the data plate found by its size among nested plates, and pandas arguments."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

numpyro = pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402

import minibatch_mcmc as mm  # noqa: E402
from minibatch_mcmc.interop import constrained_result, from_numpyro, log_likelihood, to_inference_data  # noqa: E402

N = 120


def scale_and_simplex(x, y):
    """A HalfNormal scale, a Dirichlet simplex, a deterministic site outside the plate and one inside it."""
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(3)))
    numpyro.deterministic("twice_s", 2.0 * s)
    with numpyro.plate("data", x.shape[0]):
        mu = numpyro.deterministic("mu", p[0] * x)
        numpyro.sample("y", dist.Normal(mu, s), obs=y)


def stick_breaking(u: np.ndarray) -> np.ndarray:
    """The unconstrained-to-simplex map written out in float64 (offset logistic stick-breaking, as NumPyro's)."""
    k = u.shape[-1]
    z = 1.0 / (1.0 + np.exp(-(u - np.log(k - np.arange(k)))))
    rest = np.cumprod(1.0 - z, axis=-1)
    return np.concatenate([z[..., :1], z[..., 1:] * rest[..., :-1], rest[..., -1:]], axis=-1)


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=N).astype(np.float32)
    return x, (0.4 * x + 0.7 * rng.normal(size=N)).astype(np.float32)


@pytest.fixture(scope="module")
def converted(small_data):
    return from_numpyro(scale_and_simplex, *small_data)


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoint")


@pytest.fixture(scope="module")
def first(converted, checkpointed):
    return run(converted, 80, checkpoint_dir=checkpointed)


def run(conv, num_samples, **kwargs):
    """A short exact-MH run on the converted model (cheap: N is small)."""
    return mm.sample(
        conv.model,
        conv.data,
        conv.init,
        proposal=mm.random_walk(0.1),
        test=mm.MetropolisTest(),
        num_samples=num_samples,
        num_chains=2,
        key=3,
        progress=False,
        block_size=40,
        **kwargs,
    )


def check_constrained(positions: dict, unconstrained: dict) -> None:
    """``s`` is exp of its unconstrained value, ``p`` the stick-breaking simplex of its, ``twice_s`` is 2 s."""
    assert set(positions) == {"p", "s", "twice_s"}
    np.testing.assert_allclose(positions["s"], np.exp(np.asarray(unconstrained["s"], np.float64)), rtol=2e-6)
    np.testing.assert_allclose(positions["p"], stick_breaking(np.asarray(unconstrained["p"], np.float64)), atol=2e-6)
    np.testing.assert_allclose(positions["twice_s"], 2.0 * positions["s"], rtol=1e-6)


def test_layout_records_deterministic_sites_outside_the_plate(converted):
    assert converted.layout.deterministic == ("twice_s",)


def test_every_output_path_reports_constrained_values(converted, first, checkpointed):
    """Would catch any path (draws, summary, ArviZ, a resumed checkpoint, the interop helpers) showing the log of
    ``s`` or the unconstrained 2-vector of ``p`` under the site names, or dropping the deterministic site."""
    assert first.positions["p"].shape == (2, 80, 3) and first.unconstrained["p"].shape == (2, 80, 2)
    check_constrained(first.positions, first.unconstrained)
    assert first.kernel_positions is first.unconstrained

    table = first.summary()["posterior"]
    assert {"ess_bulk", "ess_tail", "r_hat", "mcse_mean", "mcse_sd"} <= set(table.columns)
    assert table.loc["s", "mean"] == pytest.approx(float(first.positions["s"].mean()), abs=1.5e-3)
    assert table.loc["p[2]", "mean"] == pytest.approx(float(first.positions["p"][..., 2].mean()), abs=1.5e-3)

    idata = first.to_inference_data()
    np.testing.assert_array_equal(idata.posterior["s"].values, first.positions["s"])
    np.testing.assert_array_equal(idata.posterior["p"].values, first.positions["p"])
    raw = first.to_inference_data(unconstrained=True)
    np.testing.assert_array_equal(raw.posterior["s"].values, first.unconstrained["s"])
    assert to_inference_data(first, converted).posterior["twice_s"].shape == (2, 80)
    assert constrained_result(first, converted) is first

    resumed = run(converted, 120, checkpoint_dir=checkpointed, resume=True)
    check_constrained(resumed.positions, resumed.unconstrained)
    np.testing.assert_array_equal(resumed.positions["p"][:, :80], first.positions["p"])


@pytest.mark.slow
def test_auto_sample_reports_constrained_values(converted):
    """The warm-up's re-centring run reads the kernel's draws; the result reports constrained ones."""
    result, _ = mm.auto_sample(
        converted.model,
        converted.data,
        converted.init,
        num_samples=40,
        num_chains=2,
        key=0,
        recentre=True,
        progress=False,
    )
    check_constrained(result.positions, result.unconstrained)


def test_pointwise_log_likelihood_on_chosen_rows_and_draws(converted, first, small_data):
    """Every entry equals scipy's normal log-density at the constrained draw (float64); ``az.loo`` runs on it."""
    import arviz as az

    x, y = small_data
    result = first
    idata = log_likelihood(result, converted, rows=30, draws=slice(None, None, 2), key=5)
    rows = idata.log_likelihood["row"].values
    assert rows.shape == (30,) and len(set(rows)) == 30
    ll = idata.log_likelihood["y"].values
    assert ll.shape == (2, 40, 30) and idata.posterior["s"].shape == (2, 40)
    s = result.positions["s"][:, ::2, None].astype(np.float64)
    p0 = result.positions["p"][:, ::2, None, 0].astype(np.float64)
    np.testing.assert_allclose(ll, stats.norm.logpdf(y[rows], p0 * x[rows], s), rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata)
    assert loo.n_data_points == 30 and np.isfinite(loo.elpd_loo)
    with pytest.raises(ValueError, match=r"rows=500: expected a count in 1..N=120"):
        log_likelihood(result, converted, rows=500)


def out_around_data(x, y):
    """Two outputs in an outer plate at ``dim=-2`` around the data plate (``y`` has rows on axis 0)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("out", 2, dim=-2):
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(mu[:, None] + x, s), obs=y.T)


def data_at_dim_minus_two(x, y):
    """The data plate at ``dim=-2`` with a plate over the two outputs inside it."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0], dim=-2):
        with numpyro.plate("out", 2):
            numpyro.sample("y", dist.Normal(mu + x[:, None], s), obs=y)


@pytest.mark.parametrize("model_fn", [out_around_data, data_at_dim_minus_two])
def test_data_plate_found_by_its_size_among_nested_plates(model_fn):
    """Would catch the outer size-2 plate taken for the data plate, or a row's two outputs not summed."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=40).astype(np.float32), rng.normal(size=(40, 2)).astype(np.float32)
    conv = from_numpyro(model_fn, x, y)
    assert (conv.layout.plates, conv.layout.n) == (("data",), 40)
    theta = {"mu": jnp.asarray([0.3, -0.2]), "s": jnp.asarray(np.log(0.8), jnp.float32)}
    ours = conv.model.log_lik(theta, {"x": x[:7], "y": y[:7]})
    mean = np.array([0.3, -0.2]) + x[:7, None].astype(np.float64)
    np.testing.assert_allclose(ours, stats.norm.logpdf(y[:7], mean, 0.8).sum(axis=1), rtol=1e-5)


def test_pandas_arguments_are_converted():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"a": rng.normal(size=50), "b": rng.normal(size=50), "y": rng.normal(size=50)})

    def regression(features, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with numpyro.plate("data", features.shape[0]):
            numpyro.sample("y", dist.Normal(features @ w, 1.0), obs=y)

    conv = from_numpyro(regression, frame[["a", "b"]], frame["y"])  # a Gaussian GLM: its design is the features
    np.testing.assert_allclose(conv.data["x"], frame[["a", "b"]].to_numpy(), rtol=1e-6)
    w = jnp.asarray([0.5, -1.0])
    expected = stats.norm.logpdf(frame["y"], frame[["a", "b"]].to_numpy() @ np.array([0.5, -1.0]), 1.0)
    np.testing.assert_allclose(conv.model.log_lik({"w": w}, conv.data), expected, rtol=1e-5)
    frame["group"] = ["u", "v"] * 25
    with pytest.raises(ValueError, match=r"pandas columns \['group'\] are not numeric"):
        from_numpyro(regression, frame[["a", "group"]], frame["y"])


def test_deterministic_site_reading_the_data_outside_the_plate_is_dropped_with_a_warning():
    def reads_data(x, y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.deterministic("centred", mu - jnp.mean(y))
        numpyro.deterministic("doubled", 2.0 * mu)
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    rng = np.random.default_rng(4)
    x, y = rng.normal(size=30).astype(np.float32), rng.normal(size=30).astype(np.float32)
    with pytest.warns(UserWarning, match=r"deterministic sites \['centred'\] read the data"):
        conv = from_numpyro(reads_data, x, y)
    assert conv.layout.deterministic == ("doubled",)
    assert set(conv.model.constrain({"mu": jnp.asarray(0.5)})) == {"mu", "doubled"}
