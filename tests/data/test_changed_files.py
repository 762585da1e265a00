"""Files changed, removed or corrupt under an out-of-core source are reported naming the file, never read silently."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from minibatch_mcmc import MetropolisTest, mh_minibatch, random_walk, sample
from minibatch_mcmc.data import open_npy, open_parquet, slice_rows, take
from minibatch_mcmc.data.host import DataChangedError
from minibatch_mcmc.models import gaussian_mixture, logistic_regression, make_mixture_data


def test_npy_truncated_in_place_is_an_error_not_sigbus(tmp_path):
    script = textwrap.dedent(
        f"""
        import numpy as np, jax.numpy as jnp
        from minibatch_mcmc.data import open_npy, take
        from minibatch_mcmc.data.host import DataChangedError
        path = {str(tmp_path / "x.npy")!r}
        np.save(path, np.arange(400_000, dtype=np.float32).reshape(-1, 2))
        src = open_npy(path)
        np.save(path, np.zeros((10, 2), np.float32))  # what rewriting the file in place does
        try:
            take(src, jnp.array([199_000]))
        except DataChangedError as err:
            print("refused:", err)
        """
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert (
        f"refused: data file {tmp_path / 'x.npy'}" in proc.stdout
        and "changed during the run (size 1600128 -> 208" in proc.stdout
    )


def test_removed_or_replaced_files_are_named_on_every_read(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((100, 2), np.float32))
    src = open_npy(tmp_path / "x.npy")
    assert float(take(src, jnp.array([3]))[0, 0]) == 1.0
    os.remove(tmp_path / "x.npy")
    with pytest.raises(
        DataChangedError, match=rf"data file {tmp_path / 'x.npy'} of npy file .* was removed during the run"
    ):
        take(src, jnp.array([3]))
    with pytest.raises(DataChangedError, match="was removed"):  # full-data passes read by name
        slice_rows(src, 0, 50)
    pq.write_table(pa.table({"x": np.ones(100, np.float32)}), tmp_path / "p.parquet")
    src = open_parquet(tmp_path / "p.parquet")
    time.sleep(0.01)
    pq.write_table(pa.table({"x": np.full(100, 2.0, np.float32)}), tmp_path / "p.parquet")  # same size, new file
    with pytest.raises(
        DataChangedError, match=rf"data file {tmp_path / 'p.parquet'} of Parquet .* changed during the run \(.*mtime_ns"
    ):
        take(src, jnp.array([5]))


def test_file_changed_during_a_run_stops_it_naming_the_file_with_finished_blocks_saved(tmp_path):
    """A file replaced after the first checkpointed block: the next block's read inside the compiled program (the
    exact test's full-data callback, which JAX reports as its own runtime error) stops the run with
    ``DataChangedError`` naming the file and the sizes, the first block's chunk on disk and the finished draws on the
    error. Would catch the callback's failure passed on as JAX's error, a run that goes on reading the new file, or
    finished blocks lost. The exact test compiles one block program; ``mh_minibatch`` compiled three (plan, planned
    block, and the block rerun on the source: 17 CPU s against 3), for the same read path (its steps read past the
    first minibatch); host reads outside a program are checked by ``test_removed_or_replaced_files_are_named_on_every_read``."""
    x = np.asarray(make_mixture_data(jax.random.key(0), 20_000))
    np.save(tmp_path / "x.npy", x)
    src = open_npy(tmp_path / "x.npy")
    ckpt = tmp_path / "ckpt"

    def rewrite_after_first_block():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(ckpt.glob("chunk-*.nc")):
            time.sleep(0.01)
        # a new file put in place (the way a pipeline overwrites its output): truncating the memory-mapped file in
        # place instead can kill the reading process with SIGBUS before any check sees it (docs/usage.md)
        np.save(tmp_path / "x-new.npy", x[:500])
        os.replace(tmp_path / "x-new.npy", tmp_path / "x.npy")

    writer = threading.Thread(target=rewrite_after_first_block)
    writer.start()
    try:
        with pytest.raises(
            DataChangedError, match=rf"data file {tmp_path / 'x.npy'} .* changed during the run \(size 80128 -> 2128"
        ) as err:
            sample(
                gaussian_mixture(),
                src,
                jnp.zeros(2),
                proposal=random_walk(scale=0.15),
                test=MetropolisTest(),
                num_samples=200_000,
                temperature=20.0,
                block_size=20,
                progress=False,
                checkpoint_dir=ckpt,
            )
    finally:
        writer.join()
    assert any(ckpt.glob("chunk-000000000-000000020.nc"))
    # the finished draws also travel with the error (a run without a checkpoint directory keeps them too)
    partial = err.value.result
    assert partial.interrupted and partial.num_draws >= 20 and partial.num_draws % 20 == 0
    assert np.all(np.isfinite(partial.positions))
    assert any("finished steps are in this error's .result" in note for note in err.value.__notes__)


def _corrupt_float(path, value: float, new: float) -> None:
    """Overwrite the stored bytes of ``value`` (float32, plain encoding) in a Parquet file with those of ``new``."""
    raw = bytearray(path.read_bytes())
    old = np.float32(value).tobytes()
    at = raw.index(old)
    raw[at : at + 4] = np.float32(new).tobytes()
    path.write_bytes(bytes(raw))


def test_corrupt_parquet_page_is_refused_at_open(tmp_path):
    x = np.linspace(-1, 1, 256).astype(np.float32)
    x[100] = -0.2222222
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"x": x}), path, compression="none", use_dictionary=False, row_group_size=64)
    _corrupt_float(path, -0.2222222, 2.3e38)  # finite, so the NaN/inf scan alone would pass it
    with pytest.raises(
        ValueError,
        match=rf"column 'x' of {path} row group 1 \(rows \[64, 128\)\) decodes to values in "
        r"\[.*, 2.3\d*e\+38\] but the file's statistics say \[.*\]: a page of the file is corrupt",
    ):
        open_parquet(path)


def test_absurd_parquet_statistics_are_refused_at_open(tmp_path):
    x = np.zeros(100, np.float32)
    x[70] = 1e35
    pq.write_table(pa.table({"x": x, "y": np.zeros(100, np.int32)}), tmp_path / "a.parquet", row_group_size=50)
    with pytest.raises(
        ValueError,
        match=rf"column 'x' of {tmp_path / 'a.parquet'} row group 1 \(rows \[50, 100\)\) has "
        r"statistics min=-?0.0, max=1.0000000\d*e\+35: impossible for data",
    ):
        open_parquet(tmp_path / "a.parquet")
    assert open_parquet(tmp_path / "a.parquet", check_finite=False).n == 100


def test_parquet_columns_that_do_not_match_the_model_are_named(tmp_path):
    rng = np.random.default_rng(0)
    table = pa.table({"a": pa.array(list(rng.normal(size=(200, 3)).astype(np.float32))), "b": rng.integers(0, 2, 200)})
    pq.write_table(table, tmp_path / "k.parquet")
    src = open_parquet(tmp_path / "k.parquet")
    where = rf"HostData\(ParquetReader\(Parquet '{tmp_path / 'k.parquet'}', N=200\)\)"
    # a shipped model's own shape check names the columns it expects, those given, and the file
    with pytest.raises(
        ValueError,
        match=rf"has structure PyTreeDef\(\{{'a': \*, 'b': \*\}}\); expected PyTreeDef\(\{{'x': \*, 'y': \*\}}\).*\(data: {where}\)",
    ):
        sample(
            logistic_regression(),
            src,
            jnp.zeros(3),
            proposal=random_walk(scale=0.1),
            test=mh_minibatch(50),
            num_samples=5,
            progress=False,
        )
    # a user's model without a shape check: the column it reads, the file and the columns there
    with pytest.raises(
        ValueError, match=rf"model.log_lik reads data column 'x' but the data \({where}\) have columns \['a', 'b'\]"
    ):
        sample(
            logistic_regression()._replace(check_shapes=None),
            src,
            jnp.zeros(3),
            proposal=random_walk(scale=0.1),
            test=mh_minibatch(50),
            num_samples=5,
            progress=False,
        )
