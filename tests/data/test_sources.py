"""Out-of-core data sources: same rows, same full-data sums and same draws as the in-memory arrays."""

import zipfile

import fsspec
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from draws_tolerance import mismatches
from reference_cases import flat_draws

from minibatch_mcmc import sample
from minibatch_mcmc.acceptance import mh_minibatch
from minibatch_mcmc.data import (
    HostData,
    as_data_source,
    chunk_indices,
    open_npy,
    open_npz,
    open_parquet,
    prefetch,
    take,
    validate_data,
)
from minibatch_mcmc.data.generate import logistic_chunks
from minibatch_mcmc.data.generate import main as generate_main
from minibatch_mcmc.data.passes import full_data_max_abs, full_data_sum
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import prefetch_plan

N, D, M, CHAINS = 1500, 3, 40, 3


def _table(x: np.ndarray, y: np.ndarray) -> pa.Table:
    return pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1]), "y": pa.array(y)})


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(np.float32)
    theta = np.array([1.0, -0.5, 0.25], np.float32)
    y = (rng.random(N) < 1 / (1 + np.exp(-(x @ theta)))).astype(np.int32)
    return {"x": x, "y": y}


@pytest.fixture(scope="module")
def sources(arrays, tmp_path_factory):
    d = tmp_path_factory.mktemp("sources")
    x, y = arrays["x"], arrays["y"]
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    np.savez(d / "data.npz", x=x, y=y)
    table = _table(x, y)
    pq.write_table(table, d / "one.parquet", row_group_size=128)
    (d / "shards").mkdir()
    cuts = [0, 400, 401, 1100, N]  # uneven shards, one of a single row
    fs = fsspec.filesystem("memory")
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        pq.write_table(table.slice(a, b - a), d / "shards" / f"part-{k:03d}.parquet", row_group_size=150)
        with fs.open(f"/test-sources/part-{k:03d}.parquet", "wb") as f:
            pq.write_table(table.slice(a, b - a), f, row_group_size=97)
    return {
        "npy": open_npy({"x": d / "x.npy", "y": d / "y.npy"}),
        "npz": open_npz(d / "data.npz"),
        "parquet": open_parquet(d / "one.parquet"),
        "parquet-shards": open_parquet(d / "shards"),
        "memory://": open_parquet("memory://test-sources"),
    }


NAMES = ["npy", "npz", "parquet", "parquet-shards", "memory://"]


def _probe(key, data):
    """Second chunk of each chain's permutation (vmapped over chains) and two full-data passes."""
    keys = jax.random.split(key, CHAINS)
    rows = jax.vmap(lambda k: take(data, chunk_indices(k, 1, M, N)[0]))(keys)
    fn = lambda r: r["x"] @ jnp.array([0.3, -1.0, 2.0]) * (r["y"] - 0.5)  # noqa: E731
    return rows, full_data_sum(fn, data, N, chunk=400), full_data_max_abs(fn, data, N, chunk=400)


@pytest.fixture(scope="module")
def expected(arrays):
    return jax.jit(_probe)(jax.random.key(7), jax.tree_util.tree_map(jnp.asarray, arrays))


def test_same_minibatch_rows_and_full_data_passes(sources, expected):
    for name in NAMES:
        src = sources[name]
        assert isinstance(src, HostData) and src.n == N and as_data_source(src) is src, name
    # all five sources in one jitted function (one compile)
    got = jax.jit(lambda key, srcs: [_probe(key, s) for s in srcs])(jax.random.key(7), [sources[k] for k in NAMES])
    want_rows, (want_s, _), (want_mx, _) = expected
    for name, (rows, (s, bad), (mx, bad2)) in zip(NAMES, got):
        assert rows["x"].shape == (CHAINS, M, D) and rows["y"].dtype == jnp.int32, name
        np.testing.assert_array_equal(rows["x"], want_rows["x"], err_msg=name)
        np.testing.assert_array_equal(rows["y"], want_rows["y"], err_msg=name)
        # full-data passes stream the source chunk by chunk (400 does not divide N)
        np.testing.assert_allclose(s, want_s, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(mx, want_mx, rtol=1e-6, err_msg=name)
        assert not bad and not bad2, name
    assert len(np.unique(np.asarray(want_rows["x"])[0], axis=0)) == M  # drawn without replacement


class _AgreeingReader:
    """Test reader: serves every gather from each reader in turn and records any disagreement."""

    def __init__(self, readers):
        self.readers = readers
        first = readers[0]
        self.n, self.specs, self.treedef, self.validated = first.n, first.specs, first.treedef, True
        self.gathers, self.mismatches = 0, []

    def gather(self, idx):
        outs = [r.gather(idx) for r in self.readers]
        self.gathers += 1
        for r, out in zip(self.readers[1:], outs[1:]):
            if not all(np.array_equal(a, b) for a, b in zip(outs[0], out)):
                self.mismatches.append((repr(r), idx.copy()))
        return outs[0]

    def read_range(self, start, stop):
        return self.gather(np.arange(start, stop, dtype=np.int64))


def _run(data, key=1, num_samples=40):
    return sample(
        logistic_regression(1.0),
        data,
        jnp.zeros(D),
        proposal=random_walk(0.02),
        test=mh_minibatch(M, sigma=0.5),
        num_samples=num_samples,
        num_chains=CHAINS,
        key=key,
        temperature=4.0,
        block_size=num_samples,
        progress=False,
    )


@pytest.fixture(scope="module")
def in_memory_run(arrays):
    res = _run(arrays)
    sizes = res.records["batch_size"]
    assert sizes.min() == M and sizes.max() > M  # some steps grow the minibatch past its first chunk
    return res


def test_mhminibatch_draws_identical_to_in_memory_on_every_source(sources, in_memory_run):
    # one sampler run (one compile): every gather is served by all five sources and compared, and the
    # first chunk of each step comes from the read-ahead thread of a prefetch plan
    agree = _AgreeingReader([sources[name].reader for name in NAMES])
    src = prefetch(HostData(agree), prefetch_plan(mh_minibatch(M), 1, 40, CHAINS, N), depth=4)
    res = _run(src)
    src.reader.close()
    assert agree.gathers >= 40 and agree.mismatches == []
    assert not (bad := mismatches(flat_draws(res), flat_draws(in_memory_run), 40, N)), (
        bad
    )  # decisions exact, floats to rounding (draws_tolerance)
    # the plan replays the driver's keys: every step's first chunk was a planned read, read by the planned runner and
    # again when the chunk (the whole run: 40 steps) was rerun on the source since some steps grew past it
    assert src.reader.hits + src.reader.misses in (40, 80) and src.reader.hits >= 1


def test_generator_writes_npy_and_parquet_chunkwise(tmp_path):
    assert generate_main(["--rows", "1000", "--dim", "4", "--chunk", "300", "--out", str(tmp_path / "a")]) == 0
    assert (
        generate_main(
            [
                "--rows",
                "1000",
                "--dim",
                "4",
                "--chunk",
                "300",
                "--format",
                "parquet",
                "--rows-per-shard",
                "600",
                "--row-group",
                "100",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    theta, chunks = logistic_chunks(1000, 4, 0, 300)
    xs, ys = zip(*chunks)
    x, y = np.concatenate(xs), np.concatenate(ys)
    a = open_npy({"x": tmp_path / "a" / "x.npy", "y": tmp_path / "a" / "y.npy"})
    b = open_parquet(tmp_path / "b")
    assert len(list((tmp_path / "b").glob("*.parquet"))) == 2
    for src in (a, b):
        rows = take(src, jnp.arange(1000))
        np.testing.assert_array_equal(rows["x"], x)
        np.testing.assert_array_equal(rows["y"], y)
    np.testing.assert_array_equal(np.load(tmp_path / "a" / "theta.npy"), theta)
    # labels follow the logistic model: the mean of y - sigmoid(x.theta) is within 4 standard errors of 0
    p = 1 / (1 + np.exp(-(x @ theta)))
    assert abs(np.mean(y - p)) < 4 * np.sqrt(np.mean(p * (1 - p)) / len(y))


# ---- bad files ---------------------------------------------------------------------------------


def test_npy_errors(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((10, 2), np.float32))
    np.save(tmp_path / "y9.npy", np.zeros(9, np.int32))
    np.save(tmp_path / "s.npy", np.float32(1.0))
    np.save(tmp_path / "str.npy", np.array(["a", "b"]))
    with pytest.raises(ValueError, match=r"disagree on N: \['x'\] has 10 rows but \['y'\] has 9"):
        open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y9.npy"})
    with pytest.raises(ValueError, match="scalar"):
        open_npy(tmp_path / "s.npy")
    with pytest.raises(ValueError, match="dtype <U1; expected a numeric dtype"):
        open_npy(tmp_path / "str.npy")
    with pytest.raises(ValueError, match="does not exist"):
        open_npy(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match="only local paths"):
        open_npy("s3://bucket/x.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match="not a valid .npy header"):
        open_npy(tmp_path / "junk.npy")


def test_npz_errors(tmp_path):
    np.savez_compressed(tmp_path / "c.npz", x=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="member 'x' .* is compressed"):
        open_npz(tmp_path / "c.npz")
    np.savez(tmp_path / "n.npz", x=np.zeros((4, 2)), y=np.zeros(3))
    with pytest.raises(ValueError, match="disagree on N"):
        open_npz(tmp_path / "n.npz")
    with zipfile.ZipFile(tmp_path / "empty.npz", "w"):
        pass
    with pytest.raises(ValueError, match="has no arrays"):
        open_npz(tmp_path / "empty.npz")


def test_nan_rows_are_named_and_the_scan_can_be_skipped(tmp_path):
    x = np.zeros((300, 2), np.float32)
    x[217, 1] = np.nan
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(ValueError, match=r"column 'data' has a non-finite value nan at row 217 \(index \(217, 1\)\)"):
        open_npy(tmp_path / "x.npy")
    pq.write_table(_table(x, np.zeros(300, np.int32)), tmp_path / "nan.parquet", row_group_size=64)
    with pytest.raises(ValueError, match="column 'x' has a non-finite value nan at row 217"):
        open_parquet(tmp_path / "nan.parquet")
    src = open_npy(tmp_path / "x.npy", check_finite=False)  # per-step checks remain in force
    assert validate_data(src) == 300 and np.isnan(take(src, jnp.array([217]))[0, 1])


def test_parquet_errors(tmp_path):
    pq.write_table(pa.table({"x": pa.array([1.0, 2.0]), "s": pa.array(["a", "b"])}), tmp_path / "str.parquet")
    with pytest.raises(ValueError, match="column 's' .* has type string; expected a numeric column"):
        open_parquet(tmp_path / "str.parquet")
    assert open_parquet(tmp_path / "str.parquet", columns=["x"]).n == 2
    with pytest.raises(ValueError, match=r"no column\(s\) \['z'\]"):
        open_parquet(tmp_path / "str.parquet", columns=["z"])
    pq.write_table(pa.table({"x": pa.array([1.0, None, 3.0])}), tmp_path / "null.parquet")
    with pytest.raises(ValueError, match="column 'x' has a null at row 1"):
        open_parquet(tmp_path / "null.parquet")
    pq.write_table(pa.table({"x": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0]])}), tmp_path / "ragged.parquet")
    with pytest.raises(ValueError, match="column 'x' has a list of length 1 at row 2; expected 2"):
        open_parquet(tmp_path / "ragged.parquet")
    (tmp_path / "mixed").mkdir()
    pq.write_table(pa.table({"x": pa.array([1.0])}), tmp_path / "mixed" / "a.parquet")
    pq.write_table(pa.table({"x": pa.array([1])}), tmp_path / "mixed" / "b.parquet")
    with pytest.raises(ValueError, match="does not match the first shard's schema for column 'x'"):
        open_parquet(tmp_path / "mixed")
    (tmp_path / "none").mkdir()
    with pytest.raises(ValueError, match="holds no .parquet files"):
        open_parquet(tmp_path / "none")
    with pytest.raises(ValueError, match="does not exist"):
        open_parquet("memory://no/such/file.parquet")


def test_prefetch_errors(sources):
    with pytest.raises(ValueError, match="out-of-core HostData"):
        prefetch({"x": np.zeros(3)}, np.zeros((2, 1, 4), np.int64))
    with pytest.raises(ValueError, match=r"outside \[0, 1500\)"):
        prefetch(sources["npy"], np.full((2, 1, 4), N))
