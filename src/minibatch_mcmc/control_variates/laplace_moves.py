"""The warm-up's proposals on the Laplace fit and the proxy: ``proposal_for(kind, ...)`` gives ``scale -> Proposal``.

The kinds are those of ``warmup.PROPOSALS`` other than ``auto``: the scale-tuned proxy-gradient MALA and
Laplace-shaped random walk, the untuned global moves of ``proxy_moves`` and their mixture with a random walk.
``default_kind`` is the rule that picks one when the user names none, from what the warm-up found.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.proposals import proxy_langevin
from minibatch_mcmc.control_variates.proxy_moves import proxy_hmc, proxy_independence
from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.proposals.mixture import component_chooser, mixture
from minibatch_mcmc.proposals.scaled import scaled_random_walk

DEFAULT_PROPOSAL = "proxy_hmc"
"""The kind ``default_kind`` picks when the warm-up saw nothing the Laplace fit misses: leapfrog on the data-free proxy
posterior, untuned (its step from the Laplace fit); with a Metropolis-type test its acceptance tends to 1 as ``N`` grows."""
GUARDED_PROPOSAL = "mixture"
"""The kind ``default_kind`` picks when the warm-up saw that the Laplace fit may describe the posterior poorly: proxy HMC,
or with probability ``LOCAL_WEIGHT`` a tuned random walk, which moves where the proxy is wrong."""
GLOBAL = ("independence", "independence_t", "proxy_hmc")
"""Kinds whose settings come from the Laplace fit alone: no scale to tune."""
T_DF = 5.0
"""Degrees of freedom of the t independence proposal."""
LOCAL_WEIGHT = 0.2
"""Probability of the random-walk move in ``proposal="mixture"`` (so a chain far from the proxy's centre moves)."""
HMC_STEPS = 4
"""Leapfrog steps of the warm-up's proxy HMC."""
HMC_LENGTH = {"metropolis": 0.5 * math.pi, "barker": 0.75 * math.pi}
"""Trajectory length in whitened units: a quarter period on a Gaussian (an independent draw) under Metropolis, where
nearly every move is accepted; longer under Barker, which keeps about half: accepted moves are then anti-correlated
with the current point, and the chain's lag-1 autocorrelation ``(1 + cos T) / 2`` drops (0.15 at ``T = 3 pi / 4``)."""


def proposal_for(
    kind: str, proxy: TaylorProxy, model: Model, chol: np.ndarray, temperature: float, rule: str = "barker"
) -> Callable[[Any], Proposal]:
    """``scale -> Proposal`` for the chosen kind, shaped by the Laplace covariance ``chol chol'`` (``scale`` is ignored
    by the untuned kinds in ``GLOBAL``; for ``mixture`` it is the random walk's)."""
    if kind == "random_walk":
        return lambda scale: scaled_random_walk(jnp.asarray(chol, jnp.float32), scale)
    if kind in ("independence", "independence_t"):
        fixed = proxy_independence(proxy, model.log_prior, df=T_DF if kind == "independence_t" else None, temperature=temperature)
        return lambda scale: fixed
    if kind in ("proxy_hmc", "mixture"):
        hmc = proxy_hmc(proxy, model.log_prior, HMC_LENGTH[rule] / HMC_STEPS, HMC_STEPS, cov=chol @ chol.T, temperature=temperature)
        if kind == "proxy_hmc":
            return lambda scale: hmc
        walk = proposal_for("random_walk", proxy, model, chol, temperature)
        return lambda scale: mixture([hmc, walk(scale)], [1.0 - LOCAL_WEIGHT, LOCAL_WEIGHT])
    cov = chol @ chol.T
    return lambda scale: proxy_langevin(proxy, model.log_prior, scale, cov=cov, temperature=temperature)


def default_kind(stratum_rows: int, num_modes: int) -> tuple[str, str]:
    """The kind for a fit whose user named none, and why: ``GUARDED_PROPOSAL`` when the warm-up put rows the proxy cannot
    see in an exact stratum or found several modes (the Laplace fit that shapes proxy HMC is then a poor global
    description), else ``DEFAULT_PROPOSAL``."""
    seen = [f"an exact stratum of {stratum_rows} rows"] * (stratum_rows > 0) + [f"{num_modes} modes"] * (num_modes > 1)
    if seen:
        return GUARDED_PROPOSAL, "rule: " + " and ".join(seen)
    return DEFAULT_PROPOSAL, "rule: no exact stratum, one mode"


def tuned_steps(kind: str) -> Callable[[Any], Any] | None:
    """For ``mixture``, ``k_proposal -> bool``: whether a step moves with the tuned random walk; None where every step is tuned."""
    if kind != "mixture":
        return None
    choose = component_chooser([1.0 - LOCAL_WEIGHT, LOCAL_WEIGHT])
    return lambda key: choose(key) == 1
