"""Other libraries' models and loops: NumPyro models in (``from_numpyro``), named constrained draws out, LOO
(``log_likelihood``, ``subsampled_loo``), our sampler as a NumPyro ``MCMCKernel`` (``interop.numpyro_kernel``)
and our kernels as BlackJAX ``SamplingAlgorithm``s (``interop.blackjax``), both imported on demand.

Every peer library is an optional import: nothing here imports NumPyro or BlackJAX until it is used.
"""

import importlib

from minibatch_mcmc.interop.numpyro import (
    NumPyroModel,
    constrained_result,
    from_numpyro,
    log_likelihood,
    subsampled_loo,
    to_inference_data,
)

ON_DEMAND = {
    "MinibatchMH": "minibatch_mcmc.interop.numpyro_kernel",
    "as_sampling_algorithm": "minibatch_mcmc.interop.blackjax",
}
"""Names whose module imports its peer library, -> that module, imported on first use (PEP 562 ``__getattr__``)."""

__all__ = [
    "NumPyroModel",
    "constrained_result",
    "from_numpyro",
    "log_likelihood",
    "subsampled_loo",
    "to_inference_data",
    *ON_DEMAND,
]


def __getattr__(name: str):
    """``interop.MinibatchMH`` (imports NumPyro) and ``interop.as_sampling_algorithm``, imported on first use."""
    if name not in ON_DEMAND:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(ON_DEMAND[name]), name)
