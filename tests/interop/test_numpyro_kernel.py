"""``MinibatchMH`` under ``numpyro.infer.MCMC``: the native driver's draws, NumPyro's API (``get_samples``,
``print_summary``, ``extra_fields``, ``Predictive``, ``az.from_numpyro``) and agreement with NUTS."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402
from draws_tolerance import mismatches  # noqa: E402
from numpyro.infer import MCMC, NUTS, Predictive  # noqa: E402

import minibatch_mcmc as mm  # noqa: E402
from minibatch_mcmc.interop.numpyro_kernel import MinibatchMH  # noqa: E402


def regression(x, y=None):
    """Slope ``w``, a HalfNormal noise scale ``s`` and a deterministic site."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    numpyro.deterministic("precision", 1.0 / s**2)
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(w * x, s), obs=y)


def rows(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n).astype(np.float32)
    return x, (0.5 * x + 0.7 * rng.normal(size=n)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return rows(2000)


@pytest.fixture(scope="module")
def kernel(data):
    """One kernel, warmed up by its first ``init``, shared by the tests."""
    k = MinibatchMH(regression)
    k.prepare(data, {})
    return k


@pytest.fixture(scope="module")
def quick_kernel(data):
    """A kernel with settings given by hand (a proxy at the start, a random walk): no warm-up to wait for."""
    from minibatch_mcmc.interop import from_numpyro
    from minibatch_mcmc.warmup import Warmup

    conv = from_numpyro(regression, *data)
    proxy = mm.taylor_proxy(conv.model, conv.data, conv.init)
    given = Warmup(
        centre=conv.init,
        covariance=np.eye(2) * 1e-4,
        proxy=proxy,
        proposal=mm.random_walk(0.02),
        scale=0.02,
        acceptance=float("nan"),
        test=mm.mh_minibatch(batch_size=50),
        cost={},
    )
    return MinibatchMH(regression, warmup=given, converted=conv)


@pytest.mark.parametrize("which", ["quick_kernel", pytest.param("kernel", marks=pytest.mark.slow)])
def test_one_chain_draws_what_the_native_driver_draws(which, data, request):
    """Same key, start and frozen settings: decisions and data read identical, draws to float rounding."""
    kernel = request.getfixturevalue(which)
    start = {"w": jnp.asarray(0.45), "s": jnp.asarray(np.log(0.72), jnp.float32)}
    key = jax.random.PRNGKey(3)
    mcmc = MCMC(kernel, num_warmup=0, num_samples=60, progress_bar=False)
    mcmc.run(key, *data, init_params=start, extra_fields=("accepted", "batch_size"))
    w = kernel.warmup
    native = mm.sample(
        kernel.converted.model,
        kernel.converted.data,
        start,
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=60,
        key=key,
        progress=False,
    )
    extra = mcmc.get_extra_fields()
    np.testing.assert_array_equal(extra["accepted"], native.records["accepted"][0])
    np.testing.assert_array_equal(extra["batch_size"], native.records["batch_size"][0])
    assert 0 < extra["accepted"].mean() < 1
    for site in ("w", "s", "precision"):
        np.testing.assert_allclose(mcmc.get_samples()[site], native.positions[site][0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("chain_method", ["vectorized", pytest.param("sequential", marks=pytest.mark.slow)])
def test_chains_draw_what_the_native_driver_draws_from_split_keys(chain_method, quick_kernel, data):
    """MCMC's chain c gets split(key, C)[c]; the native driver given those keys draws the same: decisions exact,
    floats to rounding (draws_tolerance). A wrong key per chain, or a chain's step counter off by one, flips decisions."""
    chains, steps = 3, 40
    start = {"w": jnp.asarray([0.45, 0.5, 0.55]), "s": jnp.log(jnp.asarray([0.72, 0.7, 0.68], jnp.float32))}
    key = jax.random.PRNGKey(3)
    mcmc = MCMC(
        quick_kernel, num_warmup=0, num_samples=steps, num_chains=chains, chain_method=chain_method, progress_bar=False
    )
    mcmc.run(key, *data, init_params=start, extra_fields=("accepted", "batch_size"))
    w = quick_kernel.warmup
    native = mm.sample(
        quick_kernel.converted.model,
        quick_kernel.converted.data,
        start,
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=steps,
        num_chains=chains,
        batched_init=True,
        key=jax.random.split(key, chains),
        progress=False,
    )
    extra = mcmc.get_extra_fields(group_by_chain=True)
    got = {"accepted": np.asarray(extra["accepted"]), "batch_size": np.asarray(extra["batch_size"])}
    got.update({site: np.asarray(v) for site, v in mcmc.get_samples(group_by_chain=True).items()})
    want = {"accepted": native.records["accepted"], "batch_size": native.records["batch_size"]}
    want.update({site: np.asarray(native.positions[site]) for site in ("w", "s", "precision")})
    assert not (bad := mismatches(got, want, steps, len(data[0]))), bad
    assert 0 < got["accepted"].mean() < 1 and got["w"].shape == (chains, steps)
    if chain_method == "vectorized":
        return
    one_key = mm.sample(
        quick_kernel.converted.model,
        quick_kernel.converted.data,
        start,
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=steps,
        num_chains=chains,
        batched_init=True,
        key=key,
        progress=False,
    )
    assert not np.array_equal(one_key.records["accepted"], want["accepted"])  # one base key: other draws


@pytest.mark.slow  # the warm-up (shared) and three MCMC runs: ~30 s on a loaded machine
def test_numpyro_api_works_as_for_nuts(kernel, data, capsys):
    x, y = data
    mcmc = MCMC(kernel, num_warmup=20, num_samples=100, num_chains=2, chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(4), x, y)
    samples = mcmc.get_samples(group_by_chain=True)
    assert set(samples) == {"w", "s", "precision"} and samples["s"].shape == (2, 100)
    assert float(samples["s"].min()) > 0
    np.testing.assert_allclose(samples["precision"], samples["s"] ** -2.0, rtol=1e-5)
    mcmc.print_summary()
    printed = capsys.readouterr().out
    assert "r_hat" in printed and "n_eff" in printed and " s " in printed
    y_rep = Predictive(regression, mcmc.get_samples())(jax.random.PRNGKey(1), x[:10])["y"]
    assert y_rep.shape == (200, 10)
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = az.from_numpyro(mcmc)
    assert idata.posterior["s"].shape == (2, 100) and idata.log_likelihood["y"].shape == (2, 100, 2000)
    vectorized = MCMC(kernel, num_warmup=0, num_samples=30, num_chains=2, chain_method="vectorized", progress_bar=False)
    vectorized.run(jax.random.PRNGKey(5), x, y)
    assert vectorized.get_samples(group_by_chain=True)["w"].shape == (2, 30)


def moments_and_errors(samples: dict) -> dict:
    """Per site: mean, s.d. and ArviZ's MCSE of each, from ``(chain, draw)`` samples."""
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {}
        for site, v in samples.items():
            v = np.asarray(v, np.float64)
            out[site] = (v.mean(), v.std(), float(az.mcse(v, method="mean")), float(az.mcse(v, method="sd")))
    return out


@pytest.mark.slow  # the warm-up and 2 x 2000 steps beside NUTS: ~60 s on a loaded machine
def test_mcmc_with_minibatch_mh_agrees_with_nuts():
    """Every named variable (constrained ``s``, deterministic ``precision``): means and s.d.s within 4 combined MCSEs.

    At N = 5000 the posterior s.d. of ``s`` is ~0.007; with ~1000 effective draws the MCSE of the mean is ~2e-4,
    so a 5% error in the s.d. (3.5e-4 in the scale) or a tempered posterior fails."""
    x, y = rows(5000, seed=1)
    ours = MCMC(
        MinibatchMH(regression, warmup_key=1),
        num_warmup=200,
        num_samples=2000,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    ours.run(jax.random.PRNGKey(0), x, y)
    nuts = MCMC(
        NUTS(regression), num_warmup=300, num_samples=1000, num_chains=2, chain_method="sequential", progress_bar=False
    )
    nuts.run(jax.random.PRNGKey(1), x, y)
    a = moments_and_errors(ours.get_samples(group_by_chain=True))
    b = moments_and_errors(nuts.get_samples(group_by_chain=True))
    for site in ("w", "s", "precision"):
        (m1, s1, e1, f1), (m2, s2, e2, f2) = a[site], b[site]
        assert abs(m1 - m2) < 4 * np.hypot(e1, e2), f"mean of {site}: ours {m1}, NUTS {m2}"
        assert abs(s1 - s2) < 4 * np.hypot(f1, f2), f"sd of {site}: ours {s1}, NUTS {s2}"


def test_num_warmup_calls_take_no_steps(quick_kernel, data):
    """``MCMC``'s ``num_warmup`` calls (the tuning ran in ``init``) pass the state through: with ``num_warmup=30`` the 40
    draws are the native driver's first 40 from the same start and key, decisions exact, and each chain's step counter
    ends at 40. Would catch warm-up calls that still step (before: 30 steps of extra burn-in, counter at 70)."""
    start = {"w": jnp.asarray(0.45), "s": jnp.asarray(np.log(0.72), jnp.float32)}
    key = jax.random.PRNGKey(3)
    mcmc = MCMC(quick_kernel, num_warmup=30, num_samples=40, progress_bar=False)
    mcmc.run(key, *data, init_params=start, extra_fields=("accepted", "batch_size"))
    w = quick_kernel.warmup
    native = mm.sample(
        quick_kernel.converted.model,
        quick_kernel.converted.data,
        start,
        proposal=w.proposal,
        test=w.test,
        estimator=w.estimator,
        num_samples=40,
        key=key,
        progress=False,
    )
    np.testing.assert_array_equal(mcmc.get_extra_fields()["accepted"], native.records["accepted"][0])
    np.testing.assert_allclose(mcmc.get_samples()["w"], native.positions["w"][0], rtol=1e-6, atol=1e-7)
    assert int(mcmc.last_state.step) == 40 and int(mcmc.last_state.warmup_left) == 0


@pytest.mark.parametrize(
    "num_warmup, windows", [(500, (10, 50)), (120, (2, 60)), (130, (3, 43)), (7, (1, 7)), (0, None)]
)
def test_num_warmup_is_the_tuning_length(num_warmup, windows):
    """``num_warmup`` steps of tuning, in windows of about 50 (at most a window count short: 130 -> 3 x 43 = 129)."""
    from minibatch_mcmc.interop.numpyro_kernel import tuning_windows

    assert tuning_windows(num_warmup) == windows


def test_the_warmup_tunes_for_num_warmup_steps_and_says_what_it_chose(quick_kernel, data, monkeypatch, capsys):
    """The first ``init`` asks the warm-up for ``num_warmup`` = 120 tuning steps (2 windows of 60; before: the default
    20 x 50, then 120 burn-in steps) and prints one line naming the proposal, why, the test and its minibatch, the
    tuning steps; with ``progress=False`` the line is only logged."""
    import importlib

    asked = []

    def fake_warmup(model, data, init, settings=None, **options):
        asked.append(settings)
        return quick_kernel.warmup._replace(kind="random_walk", why="named")

    module = importlib.import_module("minibatch_mcmc.interop.numpyro_kernel")
    monkeypatch.setattr(module, "warmup", fake_warmup)
    kernel = MinibatchMH(regression, converted=quick_kernel.converted, proposal="random_walk")
    mcmc = MCMC(kernel, num_warmup=120, num_samples=5, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *data)
    ((settings,),) = [asked]
    assert (settings.num_windows, settings.window_size, kernel.tuning_steps) == (2, 60, 120)
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("MinibatchMH:")]
    assert (
        "proposal random_walk (named)" in line and "mhminibatch" in line and "first minibatch 50 of 2000 rows" in line
    )
    assert "scale tuned for 120 steps" in line and int(mcmc.last_state.step) == 5
    quiet = MinibatchMH(regression, converted=quick_kernel.converted, progress=False)
    MCMC(quiet, num_warmup=0, num_samples=2, progress_bar=False).run(jax.random.PRNGKey(0), *data)
    assert "MinibatchMH:" not in capsys.readouterr().out
