"""P(accept) of each minibatch test on skewed and heavy-tailed ratio populations against exact float64 answers.

Tolerances are Monte Carlo error (4 s.e., with a floor of ``sqrt(1e-4 / draws)`` where ``p`` is 0 or 1) plus a bound
computed here, never the library's own ``simulate_design``/``epsilon``:

* AustereMH: ``helpers_ratio.austere_error_bound`` with the Edgeworth skewness term (the plain CLT bound is
  exceeded on log-normal and exponential populations: the t statistic's lower tail is heavier there, so
  right-skewed ratios make the test reject too often; measured errors -0.004 to -0.048 against bounds 0.019-0.11).
  The direction is asserted too.
* MHSubLhd: its concentration inequality is not asymptotic, so ``|P(accept) - min(1, e^Delta)| <= delta`` must hold
  on every population (Bardenet et al. 2014).
* Naive and MINT are biased by design: their acceptance probability is ``E[min(1, exp(delta*))]`` over minibatches;
  it is estimated here from NumPy's own random minibatches (independent randomness) and the library must match it,
  and the bias against the exact Metropolis probability must have the convexity sign (more acceptance for Delta < 0).
* Metropolis and Barker: the exact probabilities.
"""

import numpy as np
import pytest
from helpers_ratio import austere_error_bound
from reference_decisions import keys_for, ratio_population, run_decisions
from scipy.special import expit

from minibatch_mcmc.acceptance import BarkerTest, MetropolisTest, austere_mh, mh_sublhd, mint, naive_minibatch

DRAWS = 20_000
SKEWED = ["lognormal", "exponential", "t3"]


def _accept_rate(test, r32, psi, temperature=1.0, draws=DRAWS, seed=3):
    out = run_decisions(test, r32, psi, keys_for(seed, draws), temperature)
    return float(np.mean(np.asarray(out.accepted)))


def _se(p: float, draws: int = DRAWS) -> float:
    return float(np.sqrt(max(p * (1.0 - p), 1e-4) / draws))


def _metropolis(r32, psi, temperature=1.0):
    return min(1.0, float(np.exp(np.sum(r32.astype(np.float64)) / temperature + psi)))


@pytest.mark.slow
@pytest.mark.parametrize("kind", SKEWED)
@pytest.mark.parametrize("delta, spread", [(-1.0, 5.0), (0.0, 20.0), (1.5, 60.0)])
def test_austere_error_within_the_edgeworth_union_bound(kind, delta, spread):
    """AustereMH(100, 0.01), N = 5000: |error| <= independent bound + 4 s.e., and not positive beyond 4 s.e."""
    r32, psi = ratio_population(kind, 5000, delta, spread, seed=4)
    p = _metropolis(r32, psi)
    rate = _accept_rate(austere_mh(100, 0.01), r32, psi)
    bound = austere_error_bound(r32, psi, 100, 0.01, skew=True)
    assert abs(rate - p) <= bound + 4 * _se(p), (rate, p, bound)
    if kind != "t3":  # right-skewed ratios: wrong early stops fall on the reject side
        assert rate - p <= 4 * _se(p), (rate, p)


@pytest.mark.slow
@pytest.mark.parametrize("kind", SKEWED)
@pytest.mark.parametrize("delta, spread", [(-1.0, 5.0), (0.3, 40.0)])
def test_mhsublhd_error_within_delta(kind, delta, spread):
    """MHSubLhd(50, 1.5, 2, delta = 0.05), N = 5000: |P(accept) - min(1, e^Delta)| <= delta + 4 s.e. on any shape."""
    r32, psi = ratio_population(kind, 5000, delta, spread, seed=4)
    p = _metropolis(r32, psi)
    rate = _accept_rate(mh_sublhd(50, 1.5, 2.0, 0.05), r32, psi)
    assert abs(rate - p) <= 0.05 + 4 * _se(p), (rate, p)


def _plug_in_probability(r32: np.ndarray, psi: float, m: int, scale: float, batches: int = 20_000, seed: int = 9):
    """``E[min(1, exp(scale * mean_batch(r) + psi))]`` over NumPy's random minibatches of ``m`` (float64), and its s.e."""
    rng = np.random.default_rng(seed)
    r = r32.astype(np.float64)
    vals = np.empty(batches)
    for i in range(0, batches, 1000):
        idx = np.argsort(rng.random((1000, r.size)), axis=1)[:, :m]
        vals[i : i + 1000] = np.exp(np.minimum(scale * r[idx].mean(axis=1) + psi, 0.0))
    return float(vals.mean()), float(vals.std() / np.sqrt(batches))


@pytest.mark.slow
@pytest.mark.parametrize("kind", SKEWED)
@pytest.mark.parametrize("name", ["naive", "mint"])
def test_plug_in_tests_match_their_own_probability_and_are_biased_upwards(kind, name):
    """Naive (m = 100) and MINT (m = n^0.6, lambda = 0.35) at Delta = -1: P(accept) equals the plug-in probability
    (4 combined s.e.), which exceeds min(1, e^Delta) (Jensen) by more than 4 s.e."""
    n = 2000
    r32, psi = ratio_population(kind, n, -1.0, 30.0, seed=4)
    if name == "naive":
        test, m, scale = naive_minibatch(100), 100, float(n)
    else:
        test, m, scale = mint(tau=0.6, lam=0.35), int(round(n**0.6)), float(n) ** 0.35
    p_plug, se_plug = _plug_in_probability(r32, psi, m, scale)
    rate = _accept_rate(test, r32, psi)
    assert abs(rate - p_plug) <= 4 * np.hypot(_se(p_plug), se_plug), (rate, p_plug)
    if name == "naive":
        assert p_plug - _metropolis(r32, psi) > 4 * se_plug


@pytest.mark.slow
@pytest.mark.parametrize("kind", SKEWED)
def test_full_data_tests_hit_the_exact_probabilities(kind):
    """Metropolis and Barker on N = 2000 heavy-tailed ratios at K = 3: within 4 s.e. of min(1, e^Delta), sigmoid(Delta)."""
    r32, psi = ratio_population(kind, 2000, -0.7, 30.0, seed=4)
    d = float(np.sum(r32.astype(np.float64)) / 3.0 + psi)
    for test, p in ((MetropolisTest(), min(1.0, np.exp(d))), (BarkerTest(), expit(d))):
        rate = _accept_rate(test, r32, psi, temperature=3.0)
        assert abs(rate - p) <= 4 * _se(p), (test.name, rate, p)
