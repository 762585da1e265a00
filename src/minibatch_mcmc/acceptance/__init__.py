"""Acceptance tests: pure ``decide(key, stats) -> TestOutcome`` functions, one module each."""

from minibatch_mcmc.acceptance.base import AcceptanceTest, Statistics, TestOutcome, full_data_sum
from minibatch_mcmc.acceptance.exact import BarkerTest, MetropolisTest, barker_probability, metropolis_probability
from minibatch_mcmc.acceptance.mhminibatch import MHMinibatch, mh_minibatch

__all__ = [
    "AcceptanceTest",
    "Statistics",
    "TestOutcome",
    "full_data_sum",
    "BarkerTest",
    "MetropolisTest",
    "barker_probability",
    "metropolis_probability",
    "MHMinibatch",
    "mh_minibatch",
]
