"""Built-in models: each is a log-prior plus a vectorised per-datum log-likelihood."""

from minibatch_mcmc.models.base import Model, flat_prior, gaussian_prior
from minibatch_mcmc.models.gaussian_mean import GaussianMeanSettings, exact_posterior, gaussian_mean
from minibatch_mcmc.models.gaussian_mixture import (
    MixtureSettings,
    gaussian_mixture,
    log_posterior_grid,
    make_mixture_data,
)
from minibatch_mcmc.models.logistic import logistic_log_lik, logistic_regression, make_logistic_data

__all__ = [
    "Model",
    "flat_prior",
    "gaussian_prior",
    "GaussianMeanSettings",
    "exact_posterior",
    "gaussian_mean",
    "MixtureSettings",
    "gaussian_mixture",
    "log_posterior_grid",
    "make_mixture_data",
    "logistic_log_lik",
    "logistic_regression",
    "make_logistic_data",
]
