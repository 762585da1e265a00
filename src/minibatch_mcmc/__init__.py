"""minibatch-mcmc: Metropolis-Hastings on tall data with minibatch acceptance tests, on JAX."""

from minibatch_mcmc import acceptance, control_variates, data, diagnostics, models, proposals, samplers
from minibatch_mcmc.acceptance import BarkerTest, MetropolisTest, mh_minibatch, mh_minibatch_skew, penalty_test
from minibatch_mcmc.acceptance import AccuracyWarning, austere_mh_for_error
from minibatch_mcmc.proposals import independence_gaussian, random_walk
from minibatch_mcmc.control_variates import taylor_proxy
from minibatch_mcmc.samplers import SampleResult, build_kernel, log_likelihood_data, sample
from minibatch_mcmc.warmup import auto_sample

__version__ = "0.1.0"

__all__ = [
    "acceptance",
    "control_variates",
    "data",
    "diagnostics",
    "models",
    "proposals",
    "samplers",
    "BarkerTest",
    "MetropolisTest",
    "mh_minibatch",
    "AccuracyWarning",
    "austere_mh_for_error",
    "mh_minibatch_skew",
    "penalty_test",
    "random_walk",
    "independence_gaussian",
    "SampleResult",
    "build_kernel",
    "sample",
    "log_likelihood_data",
    "taylor_proxy",
    "auto_sample",
]
