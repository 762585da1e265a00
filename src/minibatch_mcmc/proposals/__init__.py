"""Proposals: random walks, independence (Gaussian, t), state-independent mixtures, gradient (Langevin), reversible-jump and Stiefel-manifold moves."""

from minibatch_mcmc.proposals.base import GradientFn, Proposal
from minibatch_mcmc.proposals.langevin import langevin, langevin_log_q_ratio
from minibatch_mcmc.proposals.mixture import mixture
from minibatch_mcmc.proposals.random_walk import independence_gaussian, independence_t, random_walk
from minibatch_mcmc.proposals.reversible_jump import MoveProbabilities, reversible_jump
from minibatch_mcmc.proposals.stiefel import stiefel_random_walk

__all__ = [
    "GradientFn",
    "Proposal",
    "independence_gaussian",
    "independence_t",
    "mixture",
    "langevin",
    "langevin_log_q_ratio",
    "random_walk",
    "MoveProbabilities",
    "reversible_jump",
    "stiefel_random_walk",
]
