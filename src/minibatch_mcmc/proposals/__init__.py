"""Proposals: each returns a candidate and its log proposal-density ratio."""

from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.proposals.random_walk import independence_gaussian, random_walk

__all__ = ["Proposal", "random_walk", "independence_gaussian"]
