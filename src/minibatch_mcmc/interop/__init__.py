"""Other libraries' models and loops: NumPyro models in (``from_numpyro``), named constrained draws out, LOO
(``log_likelihood``, ``subsampled_loo``), our sampler as a NumPyro ``MCMCKernel`` (``interop.numpyro_kernel``)
and our kernels as BlackJAX ``SamplingAlgorithm``s (``interop.blackjax``), both imported on demand.

Every peer library is an optional import: nothing here imports NumPyro or BlackJAX until it is used.
"""

from minibatch_mcmc.interop.numpyro import NumPyroModel, constrained_result, from_numpyro, log_likelihood, subsampled_loo, to_inference_data

__all__ = ["NumPyroModel", "constrained_result", "from_numpyro", "log_likelihood", "subsampled_loo", "to_inference_data"]
