"""Diagnostics: summaries of runs and sample-quality metrics against known posteriors."""

from minibatch_mcmc.diagnostics.binned import (
    ChiSquared,
    GridPosterior,
    bin_counts,
    chi_squared,
    grid_posterior,
    poisson_log_likelihood,
)
from minibatch_mcmc.diagnostics.moments import MomentCheck, check_moments
from minibatch_mcmc.diagnostics.posterior_error import PosteriorError, check_posterior
from minibatch_mcmc.diagnostics.proxy_check import ProxyCheck, check_proxy
from minibatch_mcmc.diagnostics.risk import Risk, RiskCurve, posterior_risk, risk_curve

__all__ = [
    "ChiSquared",
    "GridPosterior",
    "bin_counts",
    "chi_squared",
    "grid_posterior",
    "poisson_log_likelihood",
    "MomentCheck",
    "check_moments",
    "PosteriorError",
    "check_posterior",
    "ProxyCheck",
    "check_proxy",
    "Risk",
    "RiskCurve",
    "posterior_risk",
    "risk_curve",
]
