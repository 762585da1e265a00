"""Data sources (in memory, memory-mapped, Parquet; rows split between processes) and without-replacement minibatch indexing."""

from minibatch_mcmc.data.arrays import ArrayData, DataSource, as_data_source, slice_rows, take, validate_data
from minibatch_mcmc.data.host import HostData, is_host_data
from minibatch_mcmc.data.indexing import chunk_indices, permuted_index
from minibatch_mcmc.data.memmap import open_npy, open_npz
from minibatch_mcmc.data.parquet import open_parquet
from minibatch_mcmc.data.prefetch import prefetch
from minibatch_mcmc.data.shards import open_npy_rows, open_parquet_files, open_parquet_rows, partition_rows

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
    "open_npy_rows",
    "open_parquet_rows",
    "open_parquet_files",
    "partition_rows",
    "prefetch",
    "permuted_index",
    "chunk_indices",
]
