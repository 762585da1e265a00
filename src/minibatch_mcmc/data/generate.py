"""Write a large synthetic logistic-regression data set in chunks (bounded memory), as .npy or Parquet.

    python -m minibatch_mcmc.data.generate --rows 100000000 --dim 10 --format npy --out PATH

``--format npy`` writes ``PATH/x.npy`` (float32, ``(rows, dim)``) and ``PATH/y.npy`` (int32 labels
in {0, 1}); ``--format parquet`` writes ``PATH/part-00000.parquet, ...`` with a fixed-size-list
column ``x`` and an int32 column ``y``. ``PATH/theta.npy`` holds the true weights. Rows are
``x ~ N(0, I)``, ``y ~ Bernoulli(sigmoid(x . theta))`` with ``theta ~ N(0, I / dim)``, drawn with
numpy's PCG64 one chunk at a time, so the output depends only on the seed and the chunk size.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from numpy.lib import format as npy_format

from minibatch_mcmc.checks import check_int


def logistic_chunks(
    rows: int, dim: int, seed: int, chunk: int
) -> tuple[np.ndarray, Iterator[tuple[np.ndarray, np.ndarray]]]:
    """The true weights and an iterator of ``(x, y)`` chunks of at most ``chunk`` rows."""
    rows, dim, chunk = (check_int(v, name, low=1) for v, name in ((rows, "rows"), (dim, "dim"), (chunk, "chunk")))
    root = np.random.default_rng(seed)
    theta = (root.standard_normal(dim) / np.sqrt(dim)).astype(np.float32)
    streams = root.spawn((rows + chunk - 1) // chunk)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for k, rng in enumerate(streams):
            b = min(chunk, rows - k * chunk)
            x = rng.standard_normal((b, dim), dtype=np.float32)
            p = 1.0 / (1.0 + np.exp(-(x @ theta)))
            y = (rng.random(b, dtype=np.float32) < p).astype(np.int32)
            yield x, y

    return theta, chunks()


def write_npy(out: Path, rows: int, dim: int, seed: int = 0, chunk: int = 1 << 20) -> dict[str, Path]:
    """Write ``x.npy`` and ``y.npy`` under ``out`` chunk by chunk; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    theta, chunks = logistic_chunks(rows, dim, seed, chunk)
    np.save(out / "theta.npy", theta)
    paths = {"x": out / "x.npy", "y": out / "y.npy"}
    with open(paths["x"], "wb") as fx, open(paths["y"], "wb") as fy:
        npy_format.write_array_header_2_0(fx, {"descr": "<f4", "fortran_order": False, "shape": (rows, dim)})
        npy_format.write_array_header_2_0(fy, {"descr": "<i4", "fortran_order": False, "shape": (rows,)})
        for x, y in chunks:
            fx.write(x.astype("<f4", copy=False).tobytes())
            fy.write(y.astype("<i4", copy=False).tobytes())
    return paths


def write_parquet(
    out: Path,
    rows: int,
    dim: int,
    seed: int = 0,
    chunk: int = 1 << 20,
    rows_per_shard: int = 1 << 22,
    row_group: int = 1 << 16,
) -> list[Path]:
    """Write Parquet shards ``part-NNNNN.parquet`` under ``out`` chunk by chunk; return their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    theta, chunks = logistic_chunks(rows, dim, seed, chunk)
    np.save(out / "theta.npy", theta)
    schema = pa.schema([("x", pa.list_(pa.float32(), dim)), ("y", pa.int32())])
    paths: list[Path] = []
    writer, in_shard = None, 0
    for x, y in chunks:
        if writer is None or in_shard >= rows_per_shard:
            if writer is not None:
                writer.close()
            paths.append(out / f"part-{len(paths):05d}.parquet")
            writer, in_shard = pq.ParquetWriter(paths[-1], schema), 0
        table = pa.table(
            {"x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), dim), "y": pa.array(y)}, schema=schema
        )
        writer.write_table(table, row_group_size=row_group)
        in_shard += len(y)
    if writer is not None:
        writer.close()
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m minibatch_mcmc.data.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--format", choices=("npy", "parquet"), default="npy")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=1 << 20, help="rows generated per chunk (bounds memory)")
    parser.add_argument("--rows-per-shard", type=int, default=1 << 22, help="Parquet rows per shard file")
    parser.add_argument("--row-group", type=int, default=1 << 16, help="Parquet rows per row group")
    args = parser.parse_args(argv)
    try:
        if args.format == "npy":
            paths = list(write_npy(args.out, args.rows, args.dim, args.seed, args.chunk).values())
        else:
            paths = write_parquet(
                args.out, args.rows, args.dim, args.seed, args.chunk, args.rows_per_shard, args.row_group
            )
    except ValueError as err:
        parser.error(str(err))
    size = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {args.rows} rows x {args.dim} ({args.format}, {size / 2**30:.2f} GiB) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
