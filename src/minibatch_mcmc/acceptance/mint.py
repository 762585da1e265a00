"""MINT (Li and Wong): a fixed minibatch Metropolis test with the log-likelihood difference scaled by ``n^lambda``.

Each step draws ``m = n^tau`` points without replacement and accepts iff
``log u < n^lambda (mu_hat(theta') - mu_hat(theta)) / K + psi``, where ``mu_hat`` is the minibatch
mean log-likelihood and ``psi`` the data-independent log ratio (prior and proposal). With
``lambda < tau`` the minibatch noise of the scaled difference vanishes as ``n`` grows, and the chain
targets (approximately) the tempered posterior ``p0(theta) prod_i p(x_i|theta)^(1/T)`` at
``T = n^(1 - lambda)`` (times the driver's temperature ``K``, 1 by default). This is the plug-in
(naive) test of ``naive.py`` run at temperature ``K T``: the two share one implementation.

Parameters come either as ``(tau, lam)`` or as ``(batch_size, alpha)`` with ``m = batch_size``,
``tau = log m / log n`` and ``lambda = alpha tau``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome
from minibatch_mcmc.acceptance.naive import NaiveMinibatch
from minibatch_mcmc.checks import check_int, check_real


class MINTSettings(NamedTuple):
    """MINT's settings resolved for a data size ``n``."""

    batch_size: int
    """Minibatch size ``m = n^tau`` (rounded)."""
    tau: float
    """Batch-size exponent ``tau = log m / log n``."""
    lam: float
    """Scale exponent ``lambda`` of the log-likelihood difference (``lambda < tau``)."""
    temperature: float
    """Implied temperature ``T = n^(1 - lambda)`` of the approximate stationary distribution."""


def mint_temperature(n_data: int, lam: float) -> float:
    """The temperature ``T = n^(1 - lambda)`` MINT targets."""
    return float(n_data) ** (1.0 - float(lam))


def check_mint_parameters(
    tau: float | None = None, lam: float | None = None, batch_size: int | None = None, alpha: float | None = None
) -> None:
    """Checks that do not depend on ``n``: one parameter pair, exponents in range, ``lambda < tau``, ``m >= 2``."""
    if (
        (tau is None) != (lam is None)
        or (batch_size is None) != (alpha is None)
        or (tau is None) == (batch_size is None)
    ):
        raise ValueError(
            "give MINT either (tau, lam) or (batch_size, alpha), not a mix: "
            f"got tau={tau!r}, lam={lam!r}, batch_size={batch_size!r}, alpha={alpha!r}"
        )
    if tau is not None:
        tau = check_real(tau, "tau", 0.0, 1.0, low_open=True, why="the exponent of m = n^tau")
        lam = check_real(lam, "lam", 0.0)
        if lam >= tau:
            raise ValueError(
                f"MINT needs lambda < tau; got lam={lam} >= tau={tau} (the minibatch noise would not vanish)"
            )
        return
    check_int(batch_size, "batch_size m", low=2)
    check_real(alpha, "alpha", 0.0, 1.0, high_open=True, why="lambda = alpha tau")


def resolve_mint(
    n_data: int,
    tau: float | None = None,
    lam: float | None = None,
    batch_size: int | None = None,
    alpha: float | None = None,
) -> MINTSettings:
    """Turn ``(tau, lam)`` or ``(batch_size, alpha)`` into MINT's settings for ``n`` data points."""
    check_mint_parameters(tau, lam, batch_size, alpha)
    if n_data < 3:
        raise ValueError(f"MINT needs at least 3 data points; got n={n_data}")
    if tau is not None:
        m = int(round(n_data ** float(tau)))
        if m < 2:
            raise ValueError(f"batch size m = n^tau = {m} is below 2 for n={n_data}; raise tau={tau}")
        return MINTSettings(min(m, n_data), float(tau), float(lam), mint_temperature(n_data, float(lam)))
    if batch_size > n_data:
        raise ValueError(f"batch_size m={batch_size} exceeds the number of data points n={n_data}; use m <= n")
    tau_f = math.log(batch_size) / math.log(n_data)
    lam_f = float(alpha) * tau_f
    return MINTSettings(batch_size, tau_f, lam_f, mint_temperature(n_data, lam_f))


class MINT(NamedTuple):
    """The MINT test, configured by ``(tau, lam)`` or by ``(batch_size, alpha)`` (``lambda = alpha tau``)."""

    tau: float | None = None
    """Batch-size exponent: ``m = n^tau``."""
    lam: float | None = None
    """Scale exponent ``lambda < tau``: the log-likelihood difference is scaled by ``n^lambda``."""
    batch_size: int | None = None
    """Minibatch size ``m`` (with ``alpha``), instead of ``tau``."""
    alpha: float | None = None
    """``lambda / tau`` in ``[0, 1)`` (with ``batch_size``)."""
    name: str = "mint"

    def settings(self, n_data: int) -> MINTSettings:
        """Batch size, exponents and implied temperature for ``n`` data points."""
        return resolve_mint(n_data, self.tau, self.lam, self.batch_size, self.alpha)

    def temperature_factor(self, n_data: int) -> float:
        """The factor ``T = n^(1 - lambda)`` by which MINT tempers the likelihood (on top of the driver's ``K``)."""
        return self.settings(n_data).temperature

    def validate(self, n_data: int) -> None:
        """Raise a clear error for impossible settings at this ``n``."""
        self.settings(n_data)

    decision_rule = "metropolis"

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The ``m`` rows of the naive test's minibatch."""
        return NaiveMinibatch(self.settings(n_data).batch_size).first_rows(key, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Accept iff ``log u < n^lambda (mu_hat(theta') - mu_hat(theta)) / K + psi`` on ``m`` fresh points."""
        s = self.settings(stats.n_data)
        return NaiveMinibatch(s.batch_size).decide(key, stats._replace(temperature=stats.temperature * s.temperature))


def mint(
    tau: float | None = None, lam: float | None = None, *, batch_size: int | None = None, alpha: float | None = None
) -> MINT:
    """MINT (Li and Wong): a fixed minibatch and a scaled log-likelihood difference, at temperature ``n^(1 - lam)``.

    Give ``(tau, lam)`` or ``(batch_size, alpha)``.

    Args:
        tau: Batch-size exponent: ``m = n^tau``.
        lam: Scale exponent (``lam < tau``): the difference is scaled by ``n^lam``.
        batch_size: ``m`` itself, instead of ``tau``.
        alpha: ``lam = alpha tau``, with ``batch_size``.
    """
    check_mint_parameters(tau, lam, batch_size, alpha)
    return MINT(tau=tau, lam=lam, batch_size=batch_size, alpha=alpha)
