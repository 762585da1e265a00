"""Data sources and without-replacement minibatch indexing."""

from minibatch_mcmc.data.arrays import ArrayData, DataSource, as_data_source, validate_data
from minibatch_mcmc.data.indexing import permuted_index, chunk_indices

__all__ = [
    "ArrayData",
    "DataSource",
    "as_data_source",
    "validate_data",
    "permuted_index",
    "chunk_indices",
]
