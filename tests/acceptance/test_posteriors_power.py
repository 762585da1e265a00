"""Posteriors of every acceptance test with the power to see a 5% error in the posterior s.d.

Each run pools several chains to a bulk ESS of at least ``MIN_ESS`` = 3500 (arviz), so the standard error of the
log of the sample s.d. is about ``1 / sqrt(2 ESS) = 0.012`` and a 5% s.d. error gives ``|z| >= 4.2``; the mean is
compared in units of ``sd / sqrt(ESS)`` (a shift of 0.07 posterior s.d. gives ``|z| >= 4``). The exact answers are
computed here in float64: (a) the conjugate Gaussian-mean posterior in closed form, (b) a Student-t (3 dof)
location model, heavy-tailed per-datum terms, by chunked quadrature. Tempered settings (``K`` > 1) are those the
minibatch tests are designed for; temperature 1 is used with a modest ``N``. The naive test is biased by design:
its run asserts the s.d. inflation the comparison can see. AustereMH uses settings with a small worst-case error
(``eps = 0.001``, ``N / m = 20`` stages); ``test_austere_inflation_at_the_issues_settings`` documents the ~23% s.d.
inflation of ``austere_mh(100, 0.005)`` at ``K = 1``, ``N = 10^5`` on the heavy-tailed model.
"""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import BarkerTest, MetropolisTest, mh_minibatch, random_walk, sample
from minibatch_mcmc.acceptance import austere_mh, mh_sublhd, mint, naive_minibatch
from minibatch_mcmc.models.base import Model

MIN_ESS = 3500
NU = 3.0
PRIOR_MEAN, PRIOR_SD = 0.0, 10.0


def _ess(x: np.ndarray) -> float:
    """Bulk ESS (arviz) of draws shaped ``(chain, draw)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

    return float(az.ess(x, method="bulk"))


def _log_prior(theta):
    return -0.5 * jnp.sum(((theta - PRIOR_MEAN) / PRIOR_SD) ** 2)


def gaussian_model() -> Model:
    """``x_i ~ N(theta, 1)``, ``theta ~ N(0, 10^2)`` (1-D)."""
    return Model(_log_prior, lambda theta, x: -0.5 * (x[:, 0] - theta[0]) ** 2, "gaussian_mean_1d")


def student_model() -> Model:
    """``x_i ~ t_3(theta, 1)``, ``theta ~ N(0, 10^2)``: per-datum ratios with heavy tails."""
    return Model(
        _log_prior, lambda theta, x: -0.5 * (NU + 1.0) * jnp.log1p((x[:, 0] - theta[0]) ** 2 / NU), "student_t_location"
    )


def gaussian_posterior(x: np.ndarray, temperature: float) -> tuple[float, float]:
    """Closed-form mean and s.d. of the tempered posterior ``p0(theta) prod_i N(x_i | theta, 1)^(1/K)``."""
    x = np.asarray(x, np.float64)[:, 0]
    precision = 1.0 / PRIOR_SD**2 + x.size / temperature
    mean = (PRIOR_MEAN / PRIOR_SD**2 + x.sum() / temperature) / precision
    return float(mean), float(np.sqrt(1.0 / precision))


def student_posterior(x: np.ndarray, temperature: float, points: int = 4001, chunk: int = 50) -> tuple[float, float]:
    """Mean and s.d. of the tempered Student-t location posterior by quadrature on a grid around the median
    (``chunk`` grid points at a time: never a ``points x N`` array)."""
    x = np.asarray(x, np.float64)[:, 0]
    centre = float(np.median(x))
    # the posterior s.d. is about sqrt(K / (N I)) with Fisher information I = (nu + 1) / (nu + 3)
    width = 40.0 * np.sqrt(temperature * (NU + 3.0) / (x.size * (NU + 1.0)))
    grid = np.linspace(centre - width, centre + width, points)
    logp = np.empty(points)
    for i in range(0, points, chunk):
        g = grid[i : i + chunk, None]
        logp[i : i + chunk] = -0.5 * (NU + 1.0) * np.log1p((x[None, :] - g) ** 2 / NU).sum(axis=1) / temperature
    logp += -0.5 * ((grid - PRIOR_MEAN) / PRIOR_SD) ** 2
    w = np.exp(logp - logp.max())
    assert w[0] < 1e-12 and w[-1] < 1e-12, "quadrature grid too narrow"
    w /= w.sum()
    mean = float(np.sum(w * grid))
    return mean, float(np.sqrt(np.sum(w * (grid - mean) ** 2)))


def data(kind: str, n: int, seed: int = 11) -> np.ndarray:
    """``n`` rows from the model's own sampling distribution at ``theta = 0.7``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n) if kind == "gaussian" else rng.standard_t(NU, n)
    return (0.7 + z).astype(np.float32)[:, None]


def posterior_draws(
    kind: str,
    test,
    n: int,
    temperature: float,
    chains: int = 8,
    steps: int = 6000,
    burn: int = 500,
    exact_temperature=None,
):
    """Pooled random-walk draws ``(chain, draw)`` after burn-in, and the exact ``(mean, sd)`` (at ``exact_temperature``,
    default ``temperature``)."""
    x = data(kind, n)
    target = temperature if exact_temperature is None else exact_temperature
    mean, sd = (gaussian_posterior if kind == "gaussian" else student_posterior)(x, target)
    model = gaussian_model() if kind == "gaussian" else student_model()
    start = mean + sd * np.random.default_rng(5).normal(0.0, 2.0, (chains, 1))  # over-dispersed
    res = sample(
        model,
        x,
        jnp.asarray(start, jnp.float32),
        proposal=random_walk(scale=2.4 * sd),
        test=test,
        num_samples=steps,
        num_chains=chains,
        temperature=temperature,
        batched_init=True,
        key=2024,
        progress=False,
    )
    return np.asarray(res.positions, np.float64)[:, burn:, 0], mean, sd


def posterior_z(draws: np.ndarray, mean: float, sd: float) -> tuple[float, float, float]:
    """``(ESS, z of the mean, z of log s.d.)``; the s.d.'s standard error uses the ESS of the squared deviations
    and their sample s.d. (about ``1/sqrt(2 ESS)`` for a Gaussian posterior)."""
    ess = _ess(draws)
    sq = (draws - mean) ** 2
    ess_sq = _ess(sq)
    var_hat = float(np.mean(sq))
    se_log_sd = float(np.std(sq) / np.sqrt(ess_sq)) / (2.0 * var_hat)
    z_mean = (float(draws.mean()) - mean) / (sd / np.sqrt(ess))
    z_log_sd = (0.5 * np.log(var_hat) - np.log(sd)) / se_log_sd
    return ess, z_mean, z_log_sd


TESTS = {
    "metropolis": MetropolisTest,
    "barker": BarkerTest,
    "mhminibatch": lambda: mh_minibatch(batch_size=50),
    "austere_mh": lambda: austere_mh(batch_size=250, epsilon=0.001),
    "mhsublhd": lambda: mh_sublhd(batch_size=100, gamma=1.5, p=2.0, delta=0.01),
}
CASES = [("gaussian", 5000, 50.0), ("student", 4000, 20.0), ("gaussian", 1000, 1.0), ("student", 1000, 1.0)]


@pytest.mark.slow
@pytest.mark.parametrize("kind, n, temperature", CASES, ids=["gauss-K50", "student-K20", "gauss-K1", "student-K1"])
@pytest.mark.parametrize("name", list(TESTS))
def test_posterior_mean_and_sd(name, kind, n, temperature):
    """ESS >= 3500: a 5% posterior s.d. error gives |z| >= 4.2, a mean shift of 0.07 s.d. |z| >= 4."""
    draws, mean, sd = posterior_draws(kind, TESTS[name](), n, temperature)
    ess, z_mean, z_log_sd = posterior_z(draws, mean, sd)
    assert ess >= MIN_ESS, ess
    assert abs(z_mean) < 4 and abs(z_log_sd) < 4, (z_mean, z_log_sd, draws.std() / sd)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gaussian", "student"])
def test_mint_targets_its_tempered_posterior(kind):
    """MINT (m = n^0.8, lambda = 0.2) against the exact posterior at its temperature ``n^(1 - lambda)``
    (ESS >= 3500: a 5% s.d. error gives |z| >= 4.2).

    MINT is exact only as n grows: its scaled minibatch noise is about ``n^(lambda - tau)`` of the
    tempered posterior's scale, so ``tau - lambda`` is kept at 0.6 (noise 0.006 at n = 5000). With
    ``tau = 0.6, lambda = 0.35`` (noise 0.12) this test measured the s.d. 6% too wide (|z| = 8):
    the power to see MINT's finite-n widening, which ``test_mint.py`` documents.
    """
    n = 5000
    test = mint(tau=0.8, lam=0.2)
    # MINT tempers the likelihood itself by n^(1 - lambda): sample at K = 1, compare with the posterior at that temperature
    draws, mean, sd = posterior_draws(kind, test, n, 1.0, exact_temperature=test.temperature_factor(n))
    ess, z_mean, z_log_sd = posterior_z(draws, mean, sd)
    assert ess >= MIN_ESS, ess
    assert abs(z_mean) < 4 and abs(z_log_sd) < 4, (z_mean, z_log_sd, draws.std() / sd)


@pytest.mark.slow
def test_naive_inflation_is_seen():
    """The naive plug-in test (m = 100 of N = 5000, K = 50) widens the posterior: the comparison above must see it
    (z of log s.d. > 4), i.e. it has the power the other tests pass with."""
    draws, mean, sd = posterior_draws("gaussian", naive_minibatch(100), 5000, 50.0)
    ess, z_mean, z_log_sd = posterior_z(draws, mean, sd)
    assert ess >= MIN_ESS, ess
    assert z_log_sd > 4, (z_log_sd, draws.std() / sd)


@pytest.mark.slow
def test_austere_inflation_at_the_issues_settings():
    """Documents AustereMH's known behaviour (issue 12): ``austere_mh(100, 0.005)`` at K = 1, N = 10^5 on the
    Student-t location model widens the posterior (~23% in the issue). Asserts an s.d. ratio above 1.10, i.e. the
    posterior comparison has the power to see it; this is the algorithm's error, not a library bug."""
    draws, mean, sd = posterior_draws("student", austere_mh(100, 0.005), 100_000, 1.0, chains=4, steps=2000, burn=300)
    ess, z_mean, z_log_sd = posterior_z(draws, mean, sd)
    assert ess >= 400, ess
    assert draws.std() / sd > 1.10 and z_log_sd > 4, (draws.std() / sd, z_log_sd, ess)
