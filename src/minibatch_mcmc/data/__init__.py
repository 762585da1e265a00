"""Data sources (in memory, memory-mapped, Parquet) and without-replacement minibatch indexing."""

from minibatch_mcmc.data.arrays import ArrayData, DataSource, as_data_source, slice_rows, take, validate_data
from minibatch_mcmc.data.host import HostData, is_host_data
from minibatch_mcmc.data.indexing import permuted_index, chunk_indices
from minibatch_mcmc.data.memmap import open_npy, open_npz
from minibatch_mcmc.data.parquet import open_parquet
from minibatch_mcmc.data.prefetch import prefetch

__all__ = [
    "ArrayData",
    "DataSource",
    "HostData",
    "as_data_source",
    "validate_data",
    "take",
    "slice_rows",
    "is_host_data",
    "open_npy",
    "open_npz",
    "open_parquet",
    "prefetch",
    "permuted_index",
    "chunk_indices",
]
