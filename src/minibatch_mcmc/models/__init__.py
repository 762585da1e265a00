"""Built-in models: each is a log-prior plus a vectorised per-datum log-likelihood."""

from minibatch_mcmc.models.base import GLMSpec, Model, flat_prior, gaussian_prior
from minibatch_mcmc.models.gaussian_mean import GaussianMeanSettings, exact_posterior, gaussian_mean
from minibatch_mcmc.models.gaussian_mixture import (
    MixtureSettings,
    gaussian_mixture,
    log_posterior_grid,
    make_mixture_data,
)
from minibatch_mcmc.models.glm import (
    make_glm_data,
    poisson_log_lik,
    poisson_regression,
    probit_log_lik,
    probit_regression,
    student_t_regression,
)
from minibatch_mcmc.models.ica import amari_distance, ica, ica_log_lik, make_ica_data, orthonormality_error
from minibatch_mcmc.models.l1_regression import (
    L1DataSettings,
    L1RegressionSettings,
    exact_posterior_l1,
    l1_regression,
    make_l1_data,
)
from minibatch_mcmc.models.logistic import logistic_log_lik, logistic_regression, make_logistic_data
from minibatch_mcmc.models.mlp import bayesian_mlp, init_mlp, mlp_log_lik, predict_proba
from minibatch_mcmc.models.shared_term import SharedTerm
from minibatch_mcmc.models.tied_mixture import make_tied_mixture_data, nearest_mode, tied_mixture, tied_mixture_truth
from minibatch_mcmc.models.variable_selection import (
    SelectionPrior,
    make_selection_data,
    model_posterior_by_quadrature,
    selection_state,
    variable_selection,
)

__all__ = [
    "Model",
    "GLMSpec",
    "SharedTerm",
    "make_glm_data",
    "poisson_log_lik",
    "poisson_regression",
    "probit_log_lik",
    "probit_regression",
    "student_t_regression",
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
    "amari_distance",
    "ica",
    "ica_log_lik",
    "make_ica_data",
    "orthonormality_error",
    "L1DataSettings",
    "L1RegressionSettings",
    "exact_posterior_l1",
    "l1_regression",
    "make_l1_data",
    "bayesian_mlp",
    "init_mlp",
    "mlp_log_lik",
    "predict_proba",
    "SelectionPrior",
    "make_selection_data",
    "model_posterior_by_quadrature",
    "selection_state",
    "variable_selection",
    "make_tied_mixture_data",
    "nearest_mode",
    "tied_mixture",
    "tied_mixture_truth",
]
