"""Samplers: ``init``/``step`` kernels, the ``sample`` driver, the key schedule, chain sharding and resumable checkpoints."""

from minibatch_mcmc.samplers import checkpoint, keys, sharding
from minibatch_mcmc.samplers.cmint import CMINTSchedule, cmint_schedule, ensemble_predict_proba
from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.kernel import ChainState, Kernel, build_kernel
from minibatch_mcmc.samplers.loo import SubsampledLoo, loo_subsample
from minibatch_mcmc.samplers.mintee import Ladder, MINTEEConfig, MINTEEResult, MINTEEState, mintee, resolve_ladder
from minibatch_mcmc.samplers.pointwise import log_likelihood_data
from minibatch_mcmc.samplers.prefetch_plan import prefetch_plan
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult, summarize, to_inference_data
from minibatch_mcmc.samplers.run_options import RunOptions
from minibatch_mcmc.samplers.sharding import ChainLayout, chain_layout

__all__ = [
    "sample",
    "RunOptions",
    "ChainState",
    "Kernel",
    "build_kernel",
    "RECORD_FIELDS",
    "SampleResult",
    "summarize",
    "to_inference_data",
    "log_likelihood_data",
    "loo_subsample",
    "SubsampledLoo",
    "checkpoint",
    "keys",
    "prefetch_plan",
    "sharding",
    "ChainLayout",
    "chain_layout",
    "CMINTSchedule",
    "cmint_schedule",
    "ensemble_predict_proba",
    "Ladder",
    "MINTEEConfig",
    "MINTEEResult",
    "MINTEEState",
    "mintee",
    "resolve_ladder",
]
