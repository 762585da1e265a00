"""``mm.glmm``'s result (``interop.glmm_fit``): named draws, ``predict`` against the linear predictor computed by hand from
the draws, new levels, the centring default, and (slow) a whole fit against full-data NumPyro NUTS.

Each test fails on the code before issue 31 (no ``interop.glmm_fit``). The fast ones take a ``GLMMResult`` built on
random draws (no sampling): they would catch a draw of one level applied to another level's rows, a slope read off the
wrong column, the offset or the inverse link left out, a new level given a fitted level's effect, new-level effects
not scaled by their draw's s.d. or not shared by the rows of one level, and effects under the wrong names.
"""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

import minibatch_mcmc as mm
from minibatch_mcmc.interop.formula import formula_design
from minibatch_mcmc.interop.glmm_fit import GLMMResult, glmm
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult

CHAINS, DRAWS = 2, 50


def table(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """Rows with a 0/1 response, a slope variable, a 2-level category, factors ``g`` (3 levels) and ``h`` (4)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "y": rng.integers(0, 2, n),
            "w": rng.normal(size=n),
            "x1": rng.normal(size=n),
            "c": np.array(["p", "q"])[np.arange(n) % 2],
            "g": np.array(["a", "b", "c"])[np.arange(n) % 3],
            "h": np.arange(n) % 4,
            "e": rng.uniform(1, 2, n),
        }
    )


def fake_result(formula: str, family: str = "bernoulli", seed: int = 1, draws: int = DRAWS) -> GLMMResult:
    """A ``GLMMResult`` on random constrained draws shaped as ``models.glmm``'s ``constrain`` reports them."""
    fitted = formula_design(formula, table(), family)
    rng = np.random.default_rng(seed)
    lead = (CHAINS, draws)
    positions = {"beta": rng.normal(size=(*lead, len(fitted.design.fixed)))}
    for f in fitted.design.factors:
        k = len(f.terms)
        positions[f"sd_{f.name}"] = rng.uniform(0.5, 2.0, (*lead, k))
        positions[f"u_{f.name}"] = rng.normal(size=(*lead, len(f.levels), k))
    if family == "gaussian":
        positions["sigma"] = rng.uniform(0.5, 1.0, lead)
    records = {name: np.zeros(lead, np.float32) for name in RECORD_FIELDS}
    result = SampleResult(
        positions=positions,
        records=records,
        method="fake",
        n_data=len(fitted.design.y),
        temperature=np.ones(draws),
        wall_time=0.0,
    )
    return GLMMResult(fitted, result, None, False)


def by_hand(res: GLMMResult, new: pd.DataFrame) -> np.ndarray:
    """``eta`` of each new row for each draw, term by term from the named columns (new levels' effects 0)."""
    p = {k: np.reshape(v, (-1, *np.shape(v)[2:])) for k, v in res.result.positions.items()}
    beta = p["beta"]
    eta = (
        beta[:, [0]]
        + beta[:, [1]] * new.x1.to_numpy()
        + beta[:, [2]] * (new.c == "q").to_numpy()
        + np.log(new.e.to_numpy())
    )
    g_level = {"a": 0, "b": 1, "c": 2}
    for i, (g, h, x) in enumerate(zip(new.g, new.h, new.x1)):
        if g in g_level:
            eta[:, i] += p["u_g"][:, g_level[g], 0]
        if h in range(4):
            eta[:, i] += p["u_h"][:, h, 0] + p["u_h"][:, h, 1] * x
    return eta


FORMULA = "y ~ x1 + c + (1 | g) + (x1 | h) + offset(log(e))"
NEW = pd.DataFrame(
    {
        "x1": [0.3, -1.2, 2.0, 0.7, 0.1],
        "c": ["q", "p", "q", "q", "p"],
        "g": ["b", "zz", "c", "zz", "a"],
        "h": [3, 0, 17, 17, 2],
        "e": [1.0, 1.5, 2.0, 2.5, 3.0],
    }
)
"""Rows with fitted levels and new ones (``g = "zz"``, ``h = 17``, each on two rows)."""


def test_predict_equals_eta_by_hand_and_new_levels_zero_is_the_fixed_part():
    """``kind="linear"`` is ``x beta + offset + z u`` per draw (new levels 0); ``"mean"`` its inverse logit."""
    res = fake_result(FORMULA)
    eta = by_hand(res, NEW)
    np.testing.assert_allclose(res.predict(NEW, kind="linear"), eta, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.predict(NEW), 1 / (1 + np.exp(-eta)), rtol=1e-12)
    only_new = pd.DataFrame({"x1": [0.5], "c": ["p"], "g": ["new"], "h": [-5], "e": [1.0]})
    beta = np.reshape(res.result.positions["beta"], (-1, 3))
    np.testing.assert_allclose(res.predict(only_new, kind="linear")[:, 0], beta[:, 0] + 0.5 * beta[:, 1], rtol=1e-12)


def test_new_levels_sample_draws_from_the_sd_of_each_draw():
    """``new_levels="sample"``: a new level's effect is ``N(0, sd^2)`` of its draw, shared by the level's rows.

    The effect divided by its draw's s.d. is standard normal over 2 x 2000 draws: its mean within 5 standard errors
    of 0, its variance within 5 of 1 (the variance's standard error ``sqrt(2 / n)``); a level sampled without the
    s.d. (variances 0.25-4 here) or given a fitted level's effect fails."""
    res = fake_result(FORMULA, draws=2000)
    zero = res.predict(NEW, kind="linear")
    sampled = res.predict(NEW, kind="linear", new_levels="sample", seed=3)
    sd_g = np.reshape(res.result.positions["sd_g"], (-1, 1))[:, 0]
    effect = sampled - zero
    np.testing.assert_allclose(effect[:, [0, 4]], 0.0, atol=1e-12)  # rows 0 and 4: both levels fitted
    z = effect[:, 1] / sd_g  # row 1: g new, h fitted
    n = z.size
    assert abs(z.mean()) < 5 / np.sqrt(n) and abs(z.var() - 1) < 5 * np.sqrt(2 / n), (z.mean(), z.var())
    # rows 2 and 3 share the new h level 17 (intercept and slope), row 3 also the new g level of row 1
    sd_h = np.reshape(res.result.positions["sd_h"], (-1, 2))
    u17 = np.linalg.solve(np.array([[1.0, 2.0], [1.0, 0.7]]), np.stack([effect[:, 2], effect[:, 3] - effect[:, 1]]))
    for j in range(2):
        zj = u17[j] / sd_h[:, j]
        assert abs(zj.mean()) < 5 / np.sqrt(n) and abs(zj.var() - 1) < 5 * np.sqrt(2 / n), (j, zj.mean(), zj.var())


@pytest.mark.parametrize("family, mean", [("poisson", np.exp), ("gaussian", lambda eta: eta)])
def test_predict_mean_is_the_family_inverse_link(family, mean):
    """Poisson: ``exp(eta)`` with the offset inside (a rate times exposure); gaussian: ``eta`` itself, ``sigma`` named."""
    formula = FORMULA.replace("y ~", "w ~") if family == "gaussian" else FORMULA
    res = fake_result(formula, family)
    np.testing.assert_allclose(res.predict(NEW), mean(by_hand(res, NEW)), rtol=1e-12)
    assert ("sigma" in res.to_inference_data().posterior) == (family == "gaussian")


def test_inference_data_names_every_effect():
    """Fixed effects by column, ``1|g`` and ``x1|h`` over the levels (``az.summary`` rows ``1|g[a]``), ``sd(...)``."""
    res = fake_result(FORMULA)
    posterior = res.to_inference_data().posterior
    assert sorted(posterior.data_vars) == sorted(
        ["Intercept", "x1", "c[q]", "1|g", "1|h", "x1|h", "sd(1|g)", "sd(1|h)", "sd(x1|h)"]
    )
    assert list(posterior["1|g"].coords["g__factor_dim"].values) == ["a", "b", "c"]
    np.testing.assert_array_equal(posterior["x1|h"].values, res.result.positions["u_h"][..., 1])
    np.testing.assert_array_equal(posterior["c[q]"].values, res.result.positions["beta"][..., 2])
    rows = res.summary()["posterior"].index
    assert {"Intercept", "1|g[a]", "x1|h[3]", "sd(x1|h)"} <= set(rows)


def test_centring_default_and_entry_point():
    """``mm.glmm`` is the function and chooses the parameterisation per level by default (``centred="auto"``: the
    pilot of ``models.glmm_centring``, tested in tests/models/test_glmm_centring.py), sampling as written only on request."""
    assert mm.glmm is glmm
    params = inspect.signature(glmm).parameters
    assert params["centred"].default == "auto" and params["sample_as_written"].default is False


def simulated_rows(n: int = 4000, seed: int = 5) -> pd.DataFrame:
    """A logistic GLMM's rows: 8 levels of ``g`` (intercepts of s.d. 0.5), 5 of ``h`` (intercepts 0.4, slopes 0.3)."""
    rng = np.random.default_rng(seed)
    g, h = rng.integers(0, 8, n), rng.integers(0, 5, n)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    u_g, u_h = rng.normal(0, 0.5, 8), rng.normal(0, [0.4, 0.3], (5, 2))
    eta = -0.4 + 0.8 * x1 - 0.5 * x2 + u_g[g] + u_h[h, 0] + u_h[h, 1] * x1
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(np.int64)
    return pd.DataFrame({"y": y, "x1": x1, "x2": x2, "g": [f"s{k}" for k in g], "h": [f"t{k}" for k in h]})


def nuts_draws(df: pd.DataFrame, seed: int = 0) -> dict:
    """Full-data NumPyro NUTS on the same GLMM written out from the columns, with ``models.glmm``'s default priors."""
    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    g = pd.Categorical(df.g).codes
    h = pd.Categorical(df.h).codes
    x1, x2, y = (df[c].to_numpy(np.float32) for c in ("x1", "x2", "y"))
    half_t = dist.FoldedDistribution(dist.StudentT(3.0, 0.0, 2.5))

    def model():
        b0 = numpyro.sample("Intercept", dist.Normal(0.0, 10.0))
        b1 = numpyro.sample("x1", dist.Normal(0.0, 2.5 / float(np.std(x1))))
        b2 = numpyro.sample("x2", dist.Normal(0.0, 2.5 / float(np.std(x2))))
        sd_g = numpyro.sample("sd(1|g)", half_t)
        sd_h0 = numpyro.sample("sd(1|h)", half_t)
        sd_h1 = numpyro.sample("sd(x1|h)", half_t)
        u_g = numpyro.sample("u_g", dist.Normal(0.0, sd_g).expand([8]).to_event(1))
        u_h0 = numpyro.sample("u_h0", dist.Normal(0.0, sd_h0).expand([5]).to_event(1))
        u_h1 = numpyro.sample("u_h1", dist.Normal(0.0, sd_h1).expand([5]).to_event(1))
        eta = b0 + b1 * x1 + b2 * x2 + u_g[g] + u_h0[h] + u_h1[h] * x1
        with numpyro.plate("rows", len(y)):
            numpyro.sample("y", dist.Bernoulli(logits=eta), obs=y)

    mcmc = MCMC(
        NUTS(model, target_accept_prob=0.9),
        num_warmup=1000,
        num_samples=1500,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed))
    return {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}


@pytest.mark.slow  # 3 min on the loaded 2-core machine (1 min CPU: both fits and their compilations)
def test_bernoulli_glmm_agrees_with_full_data_nuts():
    """``mm.glmm("y ~ x1 + x2 + (1 | g) + (x1 | h)")`` on 4,000 simulated rows: the fixed effects' and the group s.d.s'
    posterior means and s.d.s agree with full-data NumPyro NUTS on the same model written out by hand (its own codes
    and columns, the default priors) within 4 combined Monte Carlo standard errors (ArviZ's ``mcse`` of the mean and
    of the s.d., each run's own). A design with a column, level or prior wrong, or a sampler off by more than its MC
    error, fails."""
    import arviz as az

    pytest.importorskip("numpyro")
    df = simulated_rows()
    res = mm.glmm("y ~ x1 + x2 + (1 | g) + (x1 | h)", df, "bernoulli", seed=1, num_samples=1500, progress=False)
    ours = res.to_inference_data().posterior
    ref = az.convert_to_dataset(nuts_draws(df))
    for name in ("Intercept", "x1", "x2", "sd(1|g)", "sd(1|h)", "sd(x1|h)"):
        a, b = ours[name].values.astype(np.float64), ref[name].values.astype(np.float64)
        for stat, f, method in (("mean", np.mean, "mean"), ("sd", np.std, "sd")):
            se = np.hypot(float(az.mcse(a, method=method)), float(az.mcse(b, method=method)))
            z = (f(a) - f(b)) / se
            print(f"{name} {stat}: ours {f(a):.4f}, NUTS {f(b):.4f}, z = {z:+.2f}")
            assert abs(z) < 4, f"{stat} of {name}: ours {f(a):.4f}, NUTS {f(b):.4f}, z = {z:+.2f}"
