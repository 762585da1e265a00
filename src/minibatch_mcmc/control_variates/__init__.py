"""Estimators of the log-likelihood difference: the plain per-datum ratio and Taylor-proxy control variates."""

from minibatch_mcmc.control_variates.base import Estimator, PlainDifference, Proxy, plain
from minibatch_mcmc.control_variates.glm import GLMProxy, glm_proxy, logistic_proxy, model_glm_proxy
from minibatch_mcmc.control_variates.glmm import GLMMProxy, glmm_proxy, proxy_for
from minibatch_mcmc.control_variates.influence import Influence, influential_rows
from minibatch_mcmc.control_variates.proposals import proxy_gradient, proxy_langevin
from minibatch_mcmc.control_variates.proxy_moves import proxy_hmc, proxy_independence, proxy_laplace
from minibatch_mcmc.control_variates.stratified import StratifiedProxy, stratify
from minibatch_mcmc.control_variates.taylor import MAX_DENSE_DIM, TaylorProxy, taylor_proxy

__all__ = [
    "Estimator",
    "PlainDifference",
    "plain",
    "Proxy",
    "GLMMProxy",
    "glmm_proxy",
    "proxy_for",
    "GLMProxy",
    "logistic_proxy",
    "glm_proxy",
    "model_glm_proxy",
    "TaylorProxy",
    "taylor_proxy",
    "MAX_DENSE_DIM",
    "StratifiedProxy",
    "stratify",
    "Influence",
    "influential_rows",
    "proxy_gradient",
    "proxy_langevin",
    "proxy_hmc",
    "proxy_independence",
    "proxy_laplace",
]
