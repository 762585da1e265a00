"""``auto_sample`` on so few rows that a minibatch cannot pay off: full-data NUTS (``warmup.full_data.small_data``)."""

import warnings

import jax
import numpy as np
import pytest

from minibatch_mcmc.warmup.full_data import SMALL_DATA_ROWS, small_data


def test_small_data_names_the_rows_and_the_way_out():
    """At most ``SMALL_DATA_ROWS`` rows the reason names ``N`` and how to keep the minibatch sampler; above, None."""
    why = small_data({"y": np.zeros(100)})
    assert "N = 100 rows" in why and "name a test or a proposal" in why
    assert small_data({"y": np.zeros(SMALL_DATA_ROWS + 1)}) is None


def funnel_data(seed=0):
    """5 groups x 20 rows, ``y ~ N(mu + u_g, 1)``, group means 0.05 apart (s.d.): the data barely hold ``tau`` off 0."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(5), 20).astype(np.int32)
    return group, (1.0 + 0.05 * rng.standard_normal(5)[group] + rng.standard_normal(100)).astype(np.float32)


def tau_by_quadrature(group, y):
    """``tau``'s posterior mean and quartiles (float64): the group means are ``N(0, (tau^2 + 1/20) I + 25 J)`` once ``a``
    and ``mu ~ N(0, 5^2)`` are integrated out, times the ``HalfNormal(5)`` prior, on a fine grid of ``tau``."""
    ybar = np.bincount(group, np.asarray(y, np.float64)) / np.bincount(group)
    grid = np.linspace(1e-5, 10.0, 100001)
    logs = []
    for tau in grid:
        cov = (tau**2 + 1.0 / 20.0) * np.eye(5) + 25.0
        logs.append(-0.5 * ybar @ np.linalg.solve(cov, ybar) - 0.5 * np.linalg.slogdet(cov)[1] - 0.5 * (tau / 5.0) ** 2)
    w = np.exp(np.array(logs) - max(logs))
    w /= w.sum()
    cdf = np.cumsum(w)
    return float(w @ grid), float(np.sqrt(w @ grid**2 - (w @ grid) ** 2)), np.interp([0.25, 0.5, 0.75], cdf, grid)


@pytest.mark.slow
def test_numpyro_noncentred_funnel_matches_quadrature():
    """(~40 s: NumPyro's conversion and NUTS.) Issue 31's funnel, 5 groups x 20 rows written non-centred in NumPyro, through
    ``from_numpyro`` and ``auto_sample`` with no option: one warning names the route, and ``tau``'s posterior mean and s.d.
    and the share of draws below each of its quartiles agree with quadrature within 5 Monte Carlo s.e. (from the bulk ESS).
    Before, the minibatch sampler gave 1.78 +- 1.47 (R-hat 1.29) against 0.16 +- 0.19: tens of s.e. off."""
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    import minibatch_mcmc as mm
    from minibatch_mcmc.interop import from_numpyro

    def noncentred(group, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfNormal(5.0))
        with numpyro.plate("groups", 5):
            a = numpyro.sample("a", dist.Normal(0.0, 1.0))
        with numpyro.plate("rows", group.shape[0]):
            numpyro.sample("y", dist.Normal(mu + tau * a[group], 1.0), obs=y)

    group, y = funnel_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # from_numpyro's note that 'a' are group effects
        conv = from_numpyro(noncentred, group, y)
    with pytest.warns(UserWarning, match=r"full-data NUTS, not the minibatch sampler: N = 100 rows") as caught:
        result, warm = mm.auto_sample(
            conv.model, conv.data, conv.init, num_samples=1000, num_chains=4, key=jax.random.key(3), progress=False
        )
    assert warm.kind == "full_data_nuts" and len(caught) == 1
    want_mean, want_sd, quartiles = tau_by_quadrature(group, y)
    tau = np.asarray(result.positions["tau"], np.float64).ravel()
    ess = float(result.summary()["posterior"].loc["tau", "ess_bulk"])
    assert ess > 150  # NUTS on the non-centred funnel: about 250 of 4,000 draws
    assert abs(tau.mean() - want_mean) <= 5.0 * want_sd / np.sqrt(ess), (tau.mean(), want_mean, ess)
    for p, q in zip((0.25, 0.5, 0.75), quartiles):  # the quartiles, not the s.d.: tau's tail decays as tau^-4
        assert abs(np.mean(tau <= q) - p) <= 5.0 * np.sqrt(p * (1.0 - p) / ess), (p, q, np.mean(tau <= q), ess)
