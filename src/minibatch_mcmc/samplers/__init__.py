"""Samplers: ``init``/``step`` kernels and the ``sample`` driver."""

from minibatch_mcmc.samplers.driver import sample
from minibatch_mcmc.samplers.kernel import ChainState, Kernel, build_kernel
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult, summarize, to_inference_data

__all__ = ["sample", "ChainState", "Kernel", "build_kernel", "RECORD_FIELDS", "SampleResult", "summarize", "to_inference_data"]
