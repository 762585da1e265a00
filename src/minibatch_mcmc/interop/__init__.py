"""Models and results in the formats of other libraries: NumPyro models in, named constrained draws out."""

from minibatch_mcmc.interop.numpyro import NumPyroModel, constrained_result, from_numpyro, to_inference_data

__all__ = ["NumPyroModel", "constrained_result", "from_numpyro", "to_inference_data"]
