"""``warmup.full_data``: the rule for a GLMM whose groups are small (issue 31's many small groups), and the routed fit.

The fast test would catch the rule reading the wrong factor or counting rows per level wrongly, or a large-group GLMM
or a plain model routed (``tests/warmup/test_gibbs_route.py`` checks where ``auto_sample`` sends them: the
level-by-level Gibbs sampler). The slow one checks the routed fit's posterior against NUTS on the model written by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import minibatch_mcmc as mm
from minibatch_mcmc.models.glmm import glmm_model
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor
from minibatch_mcmc.models.logistic import logistic_regression
from minibatch_mcmc.warmup.full_data import SMALL_GROUP_ROWS, small_groups


def design(sizes: list[int], second: int | None = None, seed: int = 0) -> GLMMDesign:
    """A bernoulli random-intercept design with the given rows per level (and a second factor of ``second`` equal levels)."""
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    n = codes.size
    x = np.c_[np.ones(n), rng.normal(size=n)]
    eta = -0.3 + 0.5 * x[:, 1] + rng.normal(0.0, 0.5, len(sizes))[codes]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float64)
    factors = [GroupFactor("g", codes, np.ones((n, 1)), tuple(f"s{k}" for k in range(len(sizes))), ("1",))]
    if second is not None:
        h = (np.arange(n) % second).astype(np.int32)
        factors.append(GroupFactor("h", h, np.ones((n, 1)), tuple(str(k) for k in range(second)), ("1",)))
    return GLMMDesign(y=y, x=x, fixed=("Intercept", "x1"), factors=tuple(factors))


def test_rule_names_the_factor_and_its_median_rows():
    """Median rows per level below ``SMALL_GROUP_ROWS`` routes, naming the factor, and so do many levels of more rows
    (``G^2 / n`` above ``JOINT_MOVE_ROWS``); a long tail with a large median, a few levels of enough rows, a factor of
    large levels, and a model without groups do not. Would catch the rule reading the mean, not the median, or only
    the rows per level (600 levels of 110 rows, the shape that sampled wrongly at ``G = 1000``, would pass)."""
    small = [SMALL_GROUP_ROWS - 40] * 9 + [2000]  # one big level: the mean is large, the median is not
    model, data = glmm_model(design(small))
    why = small_groups(model, data)
    assert why is not None and "'g'" in why and f"median of {SMALL_GROUP_ROWS - 40} rows" in why
    model, data = glmm_model(design([3, 4] + [SMALL_GROUP_ROWS + 10] * 5))  # tiny levels, but the median is large
    assert small_groups(model, data) is None
    model, data = glmm_model(design([SMALL_GROUP_ROWS + 10] * 600))  # G^2 / n = 3273: a joint move's test needs more
    why = small_groups(model, data)
    assert why is not None and "600 levels" in why and f"{600**2 / (SMALL_GROUP_ROWS + 10):.0f} rows per" in why
    model, data = glmm_model(design([SMALL_GROUP_ROWS + 10] * 150))  # G^2 / n = 205: the minibatch sampler's
    assert small_groups(model, data) is None
    model, data = glmm_model(design([300] * 4, second=100))  # the second factor: 12 rows per level
    assert "'h'" in small_groups(model, data)
    assert small_groups(logistic_regression(), {"x": np.zeros((10, 2)), "y": np.zeros(10)}) is None


def hand_written_nuts(d: GLMMDesign, draws: int, seed: int) -> dict:
    """NumPyro NUTS on the design's non-centred GLMM written out by hand with ``models.glmm``'s default priors."""
    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    codes, x1, y = d.factors[0].codes, np.float32(d.x[:, 1]), np.float32(d.y)
    levels = len(d.factors[0].levels)

    def model():
        b0 = numpyro.sample("Intercept", dist.Normal(0.0, 10.0))
        b1 = numpyro.sample("x1", dist.Normal(0.0, 2.5 / float(np.std(d.x[:, 1]))))
        sd = numpyro.sample("sd", dist.FoldedDistribution(dist.StudentT(3.0, 0.0, 2.5)))
        a = numpyro.sample("a", dist.Normal(0.0, 1.0).expand([levels]).to_event(1))
        numpyro.deterministic("u", sd * a)
        with numpyro.plate("rows", y.size):
            numpyro.sample("y", dist.Bernoulli(logits=b0 + b1 * x1 + sd * a[codes]), obs=y)

    mcmc = MCMC(
        NUTS(model), num_warmup=1000, num_samples=draws, num_chains=4, chain_method="vectorized", progress_bar=False
    )
    mcmc.run(jax.random.PRNGKey(seed))
    return {k: np.asarray(v, np.float64) for k, v in mcmc.get_samples(group_by_chain=True).items()}


@pytest.mark.slow  # 8 min on the 2-core machine at load 25 (two NUTS compilations and 2 x 20,000 draws)
def test_routed_glmm_agrees_with_hand_written_nuts():
    """``mm.glmm`` on 30 levels of 50 rows (routed: a warning names the rule) against NUTS on the model written by hand:
    the fixed effects', the group s.d.'s and three group effects' posterior means and s.d.s within 4 combined Monte Carlo
    standard errors (ArviZ's ``mcse`` of each run). With at least 6,400 effective draws per run the s.d.'s combined
    standard error is at most ``sqrt(2 / (2 * 6400)) = 1.25%``, so a 5% s.d. error fails; each run's ESS is asserted. A prior, a
    level or the non-centred scaling wrong in the routed model would fail."""
    import arviz as az
    import pandas as pd

    pytest.importorskip("numpyro")
    d = design([50] * 30, seed=3)
    df = pd.DataFrame({"y": d.y, "x1": d.x[:, 1], "g": np.asarray(d.factors[0].levels)[d.factors[0].codes]})
    with pytest.warns(UserWarning, match="level-by-level Gibbs"):
        res = mm.glmm("y ~ x1 + (1 | g)", df, "bernoulli", seed=1, num_samples=20_000, progress=False)
    assert (
        res.warmup.kind == "group_gibbs" and res.centred == "auto"
    )  # the default: each level in its own centring weight
    ours = res.to_inference_data().posterior
    ref = hand_written_nuts(d, 5000, seed=2)
    pairs = {"Intercept": ref["Intercept"], "x1": ref["x1"], "sd(1|g)": ref["sd"]}
    levels = list(ours["1|g"].coords["g__factor_dim"].values)
    for k in (0, 7, 19):  # the hand-written model's level k is the design's level s{k}
        pairs[f"1|g[s{k}]"] = ref["u"][..., k]
    for name, b in pairs.items():
        a = (
            ours["1|g"].values[..., levels.index(name[4:-1])] if name.startswith("1|g[") else ours[name].values
        ).astype(np.float64)
        assert min(float(az.ess(a)), float(az.ess(b))) >= 6400, name
        for stat, f in (("mean", np.mean), ("sd", np.std)):
            se = np.hypot(float(az.mcse(a, method=stat)), float(az.mcse(b, method=stat)))
            z = (f(a) - f(b)) / se
            print(
                f"{name} {stat}: ours {f(a):.4f}, NUTS {f(b):.4f}, z = {z:+.2f}, ESS {az.ess(a):.0f} / {az.ess(b):.0f}"
            )
            assert abs(z) < 4, f"{stat} of {name}: ours {f(a):.4f}, NUTS {f(b):.4f}, z = {z:+.2f}"
