"""Row partitions over processes: who owns which rows, that a process reads only its own, and the one-process case.

The cross-process reduction itself runs in ``tests/samplers/test_multiprocess.py`` (several JAX processes)."""

import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from minibatch_mcmc.data import open_npy, open_parquet, take
from minibatch_mcmc.data.passes import full_data_sum, host_tree_sum
from minibatch_mcmc.data.shards import (
    even_bounds,
    group_bounds,
    local_rows,
    open_npy_rows,
    partition_of,
    partition_rows,
)


@pytest.mark.parametrize("n, count", [(10, 3), (7, 7), (1001, 4), (5, 1)])
def test_even_bounds_cover_every_row_once(n, count):
    """Boundaries start at 0, end at N, never decrease and give sizes differing by at most one: a gap or an overlap
    between two processes' rows (a row summed twice or never) would fail."""
    b = even_bounds(n, count)
    sizes = np.diff(b)
    assert b[0] == 0 and b[-1] == n and sizes.min() >= 0 and sizes.max() - sizes.min() <= 1 and len(sizes) == count


def test_group_bounds_cut_only_at_row_group_starts():
    """Parquet processes own whole row groups: every boundary is a group start, the ends are 0 and N, and each cut is
    the group start nearest the even split (groups of 100 rows, 1000 rows, 3 processes: 0, 300, 700, 1000)."""
    starts = np.arange(0, 1001, 100)
    np.testing.assert_array_equal(group_bounds(starts, 3), [0, 300, 700, 1000])


def _npy(tmp_path, x):
    path = tmp_path / "x.npy"
    np.save(path, x)
    return path


def test_a_process_validates_and_reads_only_its_rows(tmp_path):
    """Process 1 of 2 opens a file whose first half (process 0's rows) is NaN: it validates only its rows, so the open
    succeeds, and a read of process 0's rows is refused naming the row and the owner; NaN in its own half is an error
    naming the row. A reader that scanned or read the whole table would fail the first open."""
    x = np.arange(100, dtype=np.float32)
    x[:50] = np.nan
    source = open_npy(_npy(tmp_path, x), check_finite=False)
    mine = partition_rows(source, process_index=1, process_count=2)
    assert partition_of(mine)[2:] == (50, 100) and mine.n == 100
    np.testing.assert_array_equal(np.asarray(take(mine, jnp.arange(60, 64))), x[60:64])
    with pytest.raises(ValueError, match=r"row 49 .* process 1 of 2 reads only rows \[50, 100\)"):
        take(mine, jnp.arange(49, 52))
    x[70] = np.inf
    with pytest.raises(ValueError, match="row 70"):
        partition_rows(open_npy(_npy(tmp_path, x), check_finite=False), process_index=1, process_count=2)


def test_a_pass_over_a_split_source_needs_as_many_processes(tmp_path):
    """A source split for 2 processes, passed over in one JAX process, is refused: summing one process's half as if
    it were the data would be silently wrong by half the rows."""
    mine = partition_rows(
        open_npy(_npy(tmp_path, np.ones(40, np.float32)), check_finite=False), process_index=0, process_count=2
    )
    with pytest.raises(ValueError, match="split over 2 processes but JAX runs 1"):
        full_data_sum(lambda rows: rows, mine, mine.n, 8)


def test_parquet_process_decodes_only_its_row_groups(tmp_path):
    """Process 2 of 3 over 10 row groups of 100 rows owns groups 7-9 (rows 700-1000): validating them decodes exactly
    those 3 groups, never another process's (the reader's count of decoded groups)."""
    pq.write_table(
        pa.table({"y": pa.array(np.arange(1000, dtype=np.float64))}), tmp_path / "t.parquet", row_group_size=100
    )
    source = open_parquet(tmp_path / "t.parquet", check_finite=False)
    mine = partition_rows(source, process_index=2, process_count=3)
    assert partition_of(mine)[2:] == (700, 1000) and source.reader.decoded_groups == 3


def test_too_many_processes_is_an_error(tmp_path):
    """More processes than row groups: one clear error saying how many there are, not a process with no rows."""
    pq.write_table(
        pa.table({"y": pa.array(np.arange(200, dtype=np.float64))}), tmp_path / "t.parquet", row_group_size=100
    )
    with pytest.raises(ValueError, match="2 row groups: too few to give each of the 3 processes"):
        partition_rows(open_parquet(tmp_path / "t.parquet", check_finite=False), process_index=0, process_count=3)


def test_one_process_partition_is_the_plain_pass(tmp_path):
    """In a single JAX process the partitioned source covers every row and its passes are today's: the float64 host
    sum and the traced sum equal the plain source's exactly (same chunks, same code path)."""
    x = np.random.default_rng(0).normal(size=(300, 2)).astype(np.float32)
    path = _npy(tmp_path, x)
    whole, mine = open_npy(path), open_npy_rows(path)
    assert partition_of(mine)[2:] == (0, 300) and local_rows(mine, 300) == local_rows(whole, 300) == (0, 300)
    fn = lambda rows: {"s": jnp.sum(rows, axis=0), "q": jnp.sum(rows**2)}  # noqa: E731
    a, b = host_tree_sum(fn, whole, 300, 64), host_tree_sum(fn, mine, 300, 64)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert float(full_data_sum(lambda r: r[:, 0], whole, 300, 64)[0]) == float(
        full_data_sum(lambda r: r[:, 0], mine, 300, 64)[0]
    )


def test_sampling_a_split_source_is_refused(tmp_path):
    """In one JAX process, ``sample`` over process 0's half of a file (split for 2) stops with the error naming a row of
    process 1 and saying to start every process (or open the whole source), rather than drawing minibatches from half
    the data: scattered rows come from their owners only when all the processes run."""
    from minibatch_mcmc import mh_minibatch, random_walk, sample
    from minibatch_mcmc.models import gaussian_mixture

    x = np.random.default_rng(0).normal(size=400).astype(np.float32)
    mine = partition_rows(open_npy(_npy(tmp_path, x), check_finite=False), process_index=0, process_count=2)
    with pytest.raises(
        ValueError, match=r"belongs to another process: process 0 of 2 .*jax.distributed.initialize.* open_npy"
    ):
        sample(
            gaussian_mixture(),
            mine,
            jnp.zeros(2),
            proposal=random_walk(scale=0.1),
            test=mh_minibatch(20),
            num_samples=5,
            key=0,
            progress=False,
        )


def test_one_process_owns_every_file(tmp_path):
    """``open_parquet_files`` in one JAX process: its share is all 3 files of a directory, numbered as ``open_parquet``
    numbers them (rows read back equal the table's, global row numbers through the shift), and a pass equals the
    plain source's exactly."""
    y = np.arange(900, dtype=np.float64)
    (tmp_path / "d").mkdir()
    for k in range(3):
        pq.write_table(
            pa.table({"y": pa.array(y[300 * k : 300 * (k + 1)])}), tmp_path / "d" / f"p{k}.parquet", row_group_size=100
        )
    from minibatch_mcmc.data import open_parquet_files

    mine, whole = open_parquet_files(tmp_path / "d"), open_parquet(tmp_path / "d")
    assert partition_of(mine)[2:] == (0, 900) and mine.n == 900
    np.testing.assert_array_equal(np.asarray(take(mine, jnp.asarray([0, 299, 300, 899]))["y"]), y[[0, 299, 300, 899]])
    fn = lambda rows: {"s": jnp.sum(rows["y"])}  # noqa: E731
    assert host_tree_sum(fn, mine, 900, 128)["s"] == host_tree_sum(fn, whole, 900, 128)["s"]
