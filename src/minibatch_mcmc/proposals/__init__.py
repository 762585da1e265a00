"""Proposals: random walks, independence and gradient (Langevin) proposals."""

from minibatch_mcmc.proposals.base import GradientFn, Proposal
from minibatch_mcmc.proposals.langevin import langevin, langevin_log_q_ratio
from minibatch_mcmc.proposals.random_walk import independence_gaussian, random_walk

__all__ = ["GradientFn", "Proposal", "independence_gaussian", "langevin", "langevin_log_q_ratio", "random_walk"]
