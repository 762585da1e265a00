"""How far a minibatch mean is from the normal a CLT-based test assumes, from a population's exact moments.

A test such as MHminibatch treats the mean of ``m`` residuals drawn from ``n`` rows as normal with the
variance its minibatch shows. Given the population's exact power sums (one streamed pass, shifted), this
module measures two things per move ``(theta, theta')``:

* ``edgeworth_error``: the sup over ``y`` of the first Edgeworth terms of the standardised mean's CDF
  against ``Phi`` (skewness ``g1 / sqrt(m)`` and excess kurtosis ``g2 / m`` of the mean), the estimable
  form of Seita et al.'s Corollary 1 error. Their Berry-Esseen constant gives ``(6.4 E|X|^3 + 2 E|X|) / sqrt(m)``
  >= 1.67 at ``m = 50`` even for normal residuals, a bound too loose to tell a sound run from a broken one;
  the Edgeworth terms are 0 for normal residuals and grow with the population's skewness and kurtosis
  (five spikes among ``n`` rows: ``g2 ~ n / 5``).
* ``scale_error``: the most the noise of the estimate can move the acceptance probability, with ``sd`` the
  estimate's exact s.d. in nats: the shape of a noise too small to matter does not matter. For Barker's rule
  (MHminibatch) ``sd / 4`` (``|E S(D*) - S(D)| <= E|D* - D| / 4``, ``S'`` <= 1/4); for the penalty test's
  Metropolis rule ``sd (1 + sd / 2)`` (``min(1, e^x)`` has slope <= 1, and the penalty shifts ``x`` by about ``sd^2 / 2``).
* ``variance_error`` (Metropolis rule only): the penalty test also trusts its variance estimate to be a scaled
  chi-square; the rows' excess kurtosis widens it (``Var(s2) / sd^4`` gains ``g2 / m``), which moves
  ``E exp(-u_B)``, and so the acceptance, by about ``sd^4 g2 / (8 m)``.

``acceptance_error = min(edgeworth_error + variance_error, scale_error, 1)`` is what the check compares with its
threshold, for the rule the run's test declares (``rule``: ``"barker"`` or ``"metropolis"``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import eval_hermitenorm

from minibatch_mcmc.checks import check_choice

Z_GRID = np.linspace(-8.0, 8.0, 1601)
"""Where the sup over standardised ``y`` is taken."""


class MinibatchShape(NamedTuple):
    """Per move: the population's residual s.d., the mean's skewness and excess kurtosis, and the errors."""

    residual_sd: np.ndarray
    """Exact s.d. of the per-row residual over the population (nats, un-tempered)."""
    estimate_sd: np.ndarray
    """Exact s.d. of the ``m``-row estimate of the log-likelihood difference (nats, tempered; without replacement)."""
    skewness: np.ndarray
    """Skewness of the ``m``-row mean: ``g1 / sqrt(m)``."""
    excess_kurtosis: np.ndarray
    """Excess kurtosis of the ``m``-row mean: ``g2 / m``."""
    edgeworth_error: np.ndarray
    """``sup_z |phi(z) (g1/(6 sqrt m) He2 + g2/(24 m) He3 + g1^2/(72 m) He5)(z)|``, capped at 1."""
    acceptance_error: np.ndarray
    """``min(edgeworth_error + variance_error, scale_error, 1)`` for the rule (module docstring)."""


def central_moments(sums: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean and 2nd-4th central moments (divisor ``n``) from power sums ``sums[..., k] = sum_i x_i^(k+1)``, k = 0..3."""
    s = np.asarray(sums, np.float64) / n
    a, r2, r3, r4 = s[..., 0], s[..., 1], s[..., 2], s[..., 3]
    m2 = np.maximum(r2 - a * a, 0.0)
    m3 = r3 - 3 * a * r2 + 2 * a**3
    m4 = np.maximum(r4 - 4 * a * r3 + 6 * a * a * r2 - 3 * a**4, 0.0)
    return a, m2, m3, m4


def edgeworth_error(skew_mean: np.ndarray, kurt_mean: np.ndarray) -> np.ndarray:
    """Sup-norm of the first Edgeworth correction to ``Phi`` for a mean with this skewness and excess kurtosis (<= 1)."""
    g1, g2 = np.asarray(skew_mean, np.float64)[..., None], np.asarray(kurt_mean, np.float64)[..., None]
    z = Z_GRID
    phi = np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    term = phi * (
        g1 / 6 * eval_hermitenorm(2, z) + g2 / 24 * eval_hermitenorm(3, z) + g1 * g1 / 72 * eval_hermitenorm(5, z)
    )
    return np.minimum(np.nan_to_num(np.max(np.abs(term), axis=-1), nan=1.0, posinf=1.0), 1.0)


RULES = ("barker", "metropolis")
"""The acceptance rules whose error the check can bound: MHminibatch's Barker rule, the penalty test's Metropolis rule."""


def scale_error(sd: np.ndarray, rule: str) -> np.ndarray:
    """The most a noise of s.d. ``sd`` can move the acceptance probability of ``rule`` (module docstring)."""
    return sd / 4.0 if rule == "barker" else sd * (1.0 + sd / 2.0)


def minibatch_shape(
    sums: np.ndarray, n: int, batch_size: int, temperature: float = 1.0, rule: str = "barker"
) -> MinibatchShape:
    """The shape of the ``batch_size``-row mean of ``n`` rows whose (shifted) residual power sums are ``sums``, and the
    acceptance error it causes under ``rule`` (one of ``RULES``)."""
    rule = check_choice(rule, "rule", RULES)
    _, m2, m3, m4 = central_moments(sums, n)
    m = float(min(batch_size, n))
    tiny = np.finfo(np.float64).tiny
    flat = m2 <= tiny
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # a flat population's ratios are discarded
        g1 = np.where(flat, 0.0, m3 / np.maximum(m2, tiny) ** 1.5)
        g2 = np.where(flat, 0.0, m4 / np.maximum(m2 * m2, tiny) - 3.0)
    fpc = max(1.0 - m / n, 0.0) * n / max(n - 1.0, 1.0)
    est_sd = n / temperature * np.sqrt(m2 * fpc / m)
    skew, kurt = g1 / np.sqrt(m), g2 / m
    edge = edgeworth_error(skew, kurt)
    spread = 0.0 if rule == "barker" else est_sd**4 * np.abs(kurt) / 8.0
    error = np.minimum(np.minimum(np.nan_to_num(edge + spread, nan=1.0), scale_error(est_sd, rule)), 1.0)
    return MinibatchShape(np.sqrt(m2), est_sd, skew, kurt, edge, error)
