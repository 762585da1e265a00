"""Estimators of the log-likelihood difference: the plain per-datum ratio and control variates."""

from minibatch_mcmc.control_variates.base import Estimator, PlainDifference, plain

__all__ = ["Estimator", "PlainDifference", "plain"]
