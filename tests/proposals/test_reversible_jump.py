"""Reversible-jump moves: each move's acceptance ratio against a brute-force evaluation on a tiny model."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from minibatch_mcmc.models.variable_selection import selection_state, variable_selection
from minibatch_mcmc.proposals.reversible_jump import (
    BIRTH,
    DEATH,
    UPDATE,
    MoveProbabilities,
    move_of,
    move_probabilities,
    reversible_jump,
)

D = 4
UPDATE_SD, BIRTH_SD = 0.3, 0.8


def _brute_log_prior(beta, gamma, lam, a, b):
    """log p(beta_gamma, gamma): Laplace(psi) coefficients with psi integrated out numerically, truncated Poisson sizes."""
    act = np.flatnonzero(gamma)
    k = len(act)
    l1 = np.abs(beta[act]).sum()

    def integrand(log_psi):
        psi = math.exp(log_psi)
        hyper = math.exp(-math.log(psi) * (a + 1) - b / psi + (a * math.log(b) - math.lgamma(a) if a > 0 else 0.0))
        return (2 * psi) ** -k * math.exp(-l1 / psi) * hyper * psi  # d psi = psi d log psi

    val, _ = integrate.quad(integrand, -30, 30, limit=400, epsabs=0, epsrel=1e-10)
    size = lam**k / (math.comb(D, k) * math.factorial(k))
    return math.log(val) + math.log(size)


def _brute_log_q(theta, theta_new, probs):
    """log q(theta_new | theta) by summing over every (move, component) that produces theta_new."""
    b0, g0 = np.asarray(theta["beta"], float), np.asarray(theta["gamma"])
    b1, g1 = np.asarray(theta_new["beta"], float), np.asarray(theta_new["gamma"])
    k = int(g0.sum())
    pb = probs.birth if k < D else 0.0
    pd = probs.death if k > 1 else 0.0
    pu = 1 - pb - pd
    total = 0.0
    for j in range(D):
        others = np.arange(D) != j
        if not (np.array_equal(g0[others], g1[others]) and np.allclose(b0[others], b1[others], atol=0)):
            continue
        if g0[j] == 1 and g1[j] == 1 and b0[j] != b1[j]:
            total += pu / k * stats.norm.pdf(b1[j] - b0[j], scale=UPDATE_SD)
        elif g0[j] == 0 and g1[j] == 1:
            total += pb / (D - k) * stats.norm.pdf(b1[j], scale=BIRTH_SD)
        elif g0[j] == 1 and g1[j] == 0 and b1[j] == 0:
            total += pd / k
    return math.log(total)


def _paper_psi(move, theta, theta_new, lam_paper, probs):
    """psi = -log of the bracket of Equations 18-20 divided by u (paper's lambda, 1/psi hyperprior)."""
    b0, g0 = np.asarray(theta["beta"], float), np.asarray(theta["gamma"])
    b1, g1 = np.asarray(theta_new["beta"], float), np.asarray(theta_new["gamma"])
    k = int(g0.sum())
    n0, n1 = np.abs(b0 * g0).sum(), np.abs(b1 * g1).sum()
    if move == UPDATE:
        return -(-k * math.log(n0) + k * math.log(n1))
    pb = lambda kk: probs.birth if kk < D else 0.0  # noqa: E731
    pd = lambda kk: probs.death if kk > 1 else 0.0  # noqa: E731
    if move == BIRTH:
        j = int(np.flatnonzero(g1 - g0)[0])
        fwd, rev = pb(k) / (D - k), pd(k + 1) / (k + 1)
        bracket = (n0**-k * fwd * stats.norm.pdf(b1[j], scale=BIRTH_SD) * (D - k)) / (
            n1 ** -(k + 1) * rev * lam_paper * k
        )
    else:
        j = int(np.flatnonzero(g0 - g1)[0])
        fwd, rev = pd(k) / k, pb(k - 1) / (D - k + 1)
        bracket = (n0**-k * fwd * lam_paper * (k - 1)) / (
            n1 ** -(k - 1) * rev * stats.norm.pdf(b0[j], scale=BIRTH_SD) * (D - k + 1)
        )
    return -math.log(bracket)


STATES = [
    (np.array([0.7, 0.0, 0.0, 0.0]), np.array([1, 0, 0, 0])),  # k = 1: no death
    (np.array([0.4, -1.1, 0.0, 0.25]), np.array([1, 1, 0, 1])),  # 1 < k < D
    (np.array([0.4, -1.1, 0.6, 0.25]), np.array([1, 1, 1, 1])),  # k = D: no birth
]


@pytest.mark.parametrize("a,b", [(0.0, 0.0), (2.0, 0.5)])
def test_each_move_acceptance_ratio_matches_brute_force(a, b):
    lam = 1.7
    probs = MoveProbabilities(birth=0.3, death=0.25)
    model = variable_selection(D, lam, psi_shape=a, psi_scale=b)
    prop = reversible_jump(D, UPDATE_SD, BIRTH_SD, probs)
    rng = np.random.default_rng(0)
    data = {"x": jnp.asarray(rng.standard_normal((25, D)), jnp.float32), "y": jnp.asarray(rng.integers(0, 2, 25))}

    @jax.jit
    def kernel_log_ratio(key, theta):
        new, lq = prop.sample(key, theta)
        psi = model.log_prior(new) - model.log_prior(theta) + lq
        lam_sum = jnp.sum(model.log_lik(new, data) - model.log_lik(theta, data))
        return new, psi, lam_sum

    seen = set()
    for beta, gamma in STATES:
        theta = selection_state(beta, gamma)
        for i in range(12):
            new, psi, lam_sum = kernel_log_ratio(jax.random.key(i), theta)
            move = int(move_of(theta, new))
            seen.add((int(gamma.sum()), move))
            nb, ng = np.asarray(new["beta"], float), np.asarray(new["gamma"])
            t64 = {"beta": np.asarray(theta["beta"], float), "gamma": gamma}
            brute = (
                _brute_log_prior(nb, ng, lam, a, b)
                - _brute_log_prior(t64["beta"], gamma, lam, a, b)
                + _brute_log_q(new, theta, probs)
                - _brute_log_q(theta, new, probs)
            )
            np.testing.assert_allclose(float(psi), brute, rtol=1e-4, atol=2e-4)
            # the data part: Equation 16 with the included coefficients only
            x, y = np.asarray(data["x"], float), np.asarray(data["y"])
            ll = lambda bb: np.sum(y * -np.logaddexp(0, -x @ bb) + (1 - y) * -np.logaddexp(0, x @ bb))  # noqa: E731
            np.testing.assert_allclose(float(lam_sum), ll(nb * ng) - ll(t64["beta"] * gamma), rtol=1e-4, atol=1e-4)
            if a == 0:  # Equations 18-20 verbatim, with the paper's lambda = lam / 2 (the 2^-k of the Laplace)
                np.testing.assert_allclose(
                    float(psi), _paper_psi(move, theta, new, lam / 2, probs), rtol=1e-4, atol=2e-4
                )
    # every move allowed at each size was exercised, and none that is not
    assert {(1, UPDATE), (1, BIRTH), (3, UPDATE), (3, BIRTH), (3, DEATH), (4, UPDATE), (4, DEATH)} <= seen
    assert (1, DEATH) not in seen and (4, BIRTH) not in seen


def test_move_and_component_frequencies():
    probs = MoveProbabilities(birth=0.3, death=0.25)
    prop = reversible_jump(D, UPDATE_SD, BIRTH_SD, probs)
    theta = selection_state(np.array([0.4, -1.1, 0.0, 0.25]), np.array([1, 1, 0, 1]))
    n = 4000
    new, _ = jax.jit(jax.vmap(prop.sample, in_axes=(0, None)))(jax.random.split(jax.random.key(1), n), theta)
    moves = np.asarray(move_of(theta, new))
    counts = np.bincount(moves, minlength=3)
    expected = n * np.array([1 - 0.55, 0.3, 0.25])
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(chi2, 2) > 1e-3, counts
    # deaths pick each active component uniformly; births always pick the one inactive component
    dead = np.asarray(new["gamma"])[moves == DEATH]
    removed = np.bincount(np.argmin(dead[:, [0, 1, 3]], axis=1), minlength=3)
    assert stats.chisquare(removed).pvalue > 1e-3
    born = np.asarray(new["beta"])[moves == BIRTH][:, 2]
    assert stats.kstest(born / BIRTH_SD, "norm").pvalue > 1e-3
    # updates change exactly one active coefficient, by N(0, UPDATE_SD^2)
    diff = np.asarray(new["beta"])[moves == UPDATE] - np.asarray(theta["beta"])
    assert np.all((diff != 0).sum(axis=1) == 1) and np.all(diff[:, 2] == 0)
    assert stats.kstest(diff.sum(axis=1) / UPDATE_SD, "norm").pvalue > 1e-3


def test_move_probabilities_at_the_boundaries():
    probs = MoveProbabilities(0.3, 0.25)
    assert np.allclose(move_probabilities(1, D, probs), (0.3, 0.0, 0.7))
    assert np.allclose(move_probabilities(D, D, probs), (0.0, 0.25, 0.75))
    assert np.allclose(move_probabilities(2, D, probs), (0.3, 0.25, 0.45))


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="update_sd"):
        reversible_jump(3, 0.0, 1.0)
    with pytest.raises(ValueError, match="birth_sd"):
        reversible_jump(3, 1.0, float("nan"))
    with pytest.raises(ValueError, match="n_features"):
        reversible_jump(0, 1.0, 1.0)
    with pytest.raises(ValueError, match="move probabilities"):
        reversible_jump(3, 1.0, 1.0, MoveProbabilities(0.7, 0.6))
    prop = reversible_jump(3, 1.0, 1.0)
    with pytest.raises(ValueError, match="expected \\(3,\\)"):
        prop.sample(jax.random.key(0), selection_state(np.ones(4), np.ones(4)))
