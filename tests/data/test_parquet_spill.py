"""A Parquet table larger than the reader's cache decodes each row group once; random minibatches then read rows.

Before, every random gather decoded the row groups its rows fell in (a row group decodes only whole), and with the
decoded table larger than the cache the LRU kept none of them: at 10^7 rows (153 row groups) each minibatch of the tall
benchmark decoded the whole file. Now each row group is written to a spill file the first time it is decoded (the
validation scan at open) and its rows are read from there: the same values, so the same rows for the same indices as
the ``.npy`` copy of the table."""

import gc
import os
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from minibatch_mcmc.data import open_npy, open_parquet

N, D, GROUP = 6000, 3, 500


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The same rows as Parquet (12 row groups) and as ``.npy``."""
    where = tmp_path_factory.mktemp("spill")
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((N, D)).astype(np.float32), rng.integers(0, 2, N).astype(np.int32)
    pq.write_table(
        pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), D), "y": pa.array(y)}),
        where / "t.parquet",
        row_group_size=GROUP,
    )
    np.save(where / "x.npy", x), np.save(where / "y.npy", y)
    return where


def test_random_minibatches_decode_no_row_group_twice(table, tmp_path):
    """Opening decodes the 12 row groups once (the validation scan) and warns naming the spill directory; 30 random
    1000-row gathers then decode none and return exactly the ``.npy`` rows. Catches a reader that decodes again per
    minibatch (before: 12 more decodes per gather, the cache holding about one row group) or spills wrong rows."""
    with pytest.warns(UserWarning, match="decoded once and kept in") as caught:
        src = open_parquet(table / "t.parquet", cache_bytes=20_000, spill_dir=tmp_path)
    folder = src.reader.spill_folder
    assert folder in str(caught[0].message) and os.path.dirname(folder) == str(tmp_path)
    npy = open_npy({"x": table / "x.npy", "y": table / "y.npy"}).reader
    assert (
        src.reader.decoded_groups == N // GROUP and src.reader.cached_bytes == 0
    )  # no in-memory copy besides the spill
    rng = np.random.default_rng(3)
    for _ in range(30):
        idx = rng.integers(0, N, 1000)
        got, want = src.reader.gather(idx), npy.gather(idx)  # both in sorted column order: x, y
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert src.reader.decoded_groups == N // GROUP
    del src
    gc.collect()
    assert not os.path.exists(folder)


def test_no_spill_when_it_fits_or_is_refused(table):
    """A table that fits the cache is not spilled (no warning, no files); ``spill_dir=False`` keeps decoding per read."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fits = open_parquet(table / "t.parquet")
        refused = open_parquet(table / "t.parquet", cache_bytes=20_000, spill_dir=False)
    assert fits.reader.spill_folder is None and refused.reader.spill_folder is None
    refused.reader.gather(np.arange(0, N, GROUP))
    assert refused.reader.decoded_groups > N // GROUP


def test_a_spilled_range_is_one_contiguous_read(table, tmp_path, monkeypatch):
    """A streamed pass's contiguous block of a spilled table is read as a range of the spill's files, equal to the ``.npy``
    rows (across row-group boundaries, to the last row); a block whose row groups are not all spilled is gathered.
    Before, every block went through ``gather`` (a sort, a split by row group and a fancy index of the map per block)."""
    with pytest.warns(UserWarning, match="decoded once"):
        src = open_parquet(table / "t.parquet", cache_bytes=20_000, spill_dir=tmp_path)
    reader = src.reader
    npy = open_npy({"x": table / "x.npy", "y": table / "y.npy"}).reader
    gathered = []
    monkeypatch.setattr(reader, "gather", lambda idx: gathered.append(idx) or type(reader).gather(reader, idx))
    for start, stop in [(0, 500), (499, 1701), (5000, N), (123, 124)]:
        got, want = reader.read_range(start, stop), npy.read_range(start, stop)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), (start, stop)
    assert not gathered
    reader._spill.done[3] = False  # a row group not (yet) spilled: its block is gathered
    got = reader.read_range(1400, 1600)
    assert len(gathered) == 1 and all(np.array_equal(a, b) for a, b in zip(got, npy.read_range(1400, 1600)))
