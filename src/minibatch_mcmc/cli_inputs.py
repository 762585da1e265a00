"""The ``sample`` command's inputs: its test (``--test``, ``--batch-size``, ``--sigma``), ``--devices``, and ``--model``
(a NumPyro model function or a ``Model``) with ``--data`` (``.npy``, ``.npz`` or Parquet) read into the
``(Model, data, start)`` the run samples."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minibatch_mcmc.acceptance.registry import registered
from minibatch_mcmc.warmup import DEFAULT_TEST

BATCH_SIZE, SIGMA = 50, 1.0
"""Defaults of ``--batch-size`` and ``--sigma``."""


def sample_test(name: str, batch_size: int, sigma: float):
    """The acceptance test named by ``sample --test`` (a row of ``acceptance.registry.TESTS``), from ``--batch-size`` and ``--sigma``."""
    return registered(name).from_options(batch_size, sigma)


def model_test(args: argparse.Namespace):
    """The test for ``--model``: None (``auto_sample``'s default for its ``N``) unless ``--test``, ``--batch-size`` or
    ``--sigma`` is given; those alone set up ``warmup.DEFAULT_TEST``."""
    if args.test is None and args.batch_size == BATCH_SIZE and args.sigma == SIGMA:
        return None
    return sample_test(args.test or DEFAULT_TEST, args.batch_size, args.sigma)


def devices_arg(text: str | None):
    """``--devices``: None, ``all`` or a device count."""
    if text is None or text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--devices={text!r}; expected 'all' or a number of devices") from None


def load_model(spec: str):
    """``module:name`` or ``path/to/file.py:name`` -> the object it names (a NumPyro model function, a ``Model`` or a
    function annotated to return one)."""
    import importlib
    import importlib.util

    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--model {spec!r}: expected MODULE:NAME or FILE.py:NAME")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ValueError(f"--model {spec!r}: no file {path}")
        loader = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ValueError(f"--model {spec!r}: cannot import {module_name} ({err})") from None
    if not hasattr(module, attr):
        raise ValueError(f"--model {spec!r}: {module_name} has no attribute {attr!r}")
    return getattr(module, attr)


def load_data(path: str, out_of_core: bool = False, split: bool = False):
    """``.npy`` -> an array; ``.npz`` -> ``{name: array}``; ``.parquet`` (a file or a folder of files) -> ``{column: array}``.

    Read into memory, or with ``out_of_core`` opened as host data sources that read rows on demand: a
    memory-mapped ``.npy`` or uncompressed ``.npz`` (``data.open_npy``/``open_npz``) and streamed Parquet
    (``data.open_parquet``). A compressed ``.npz`` cannot be mapped: it is read into memory, with a note. With ``split``
    (several ``jax.distributed`` processes) each process opens only its rows (``data.shards``: row ranges, row groups).
    """
    if split:
        return split_data(Path(path))
    import numpy as np

    where = Path(path)
    if not where.exists():
        raise ValueError(f"--data {path}: no such file or folder")
    if where.suffix == ".npy":
        if out_of_core:
            from minibatch_mcmc.data import open_npy

            return open_npy(where)
        return np.load(where)
    if where.suffix == ".npz":
        if out_of_core and not npz_compressed(where):
            from minibatch_mcmc.data import open_npz

            return open_npz(where)
        if out_of_core:
            print(
                f"note: --data {path} is compressed (np.savez_compressed) and cannot be memory-mapped: reading it into "
                "memory (write it with np.savez to sample it out of core)",
                file=sys.stderr,
            )
        with np.load(where) as archive:
            return {k: archive[k] for k in archive.files}
    if where.suffix == ".parquet" or where.is_dir():
        if out_of_core:
            from minibatch_mcmc.data import open_parquet

            return open_parquet(str(where))
        import pyarrow.parquet as pq

        table = pq.read_table(where)
        return {name: table.column(name).to_numpy() for name in table.column_names}
    raise ValueError(f"--data {path}: expected a .npy, .npz or .parquet file (or a folder of Parquet files)")


def split_data(where: Path):
    """This process's rows of ``--data`` (``.npy``, uncompressed ``.npz``, Parquet), never the whole table."""
    from minibatch_mcmc.data import open_npz
    from minibatch_mcmc.data.shards import open_npy_rows, open_parquet_rows, partition_rows

    if not where.exists():
        raise ValueError(f"--data {where}: no such file or folder")
    if where.suffix == ".npy":
        return open_npy_rows(where)
    if where.suffix == ".npz" and not npz_compressed(where):
        return partition_rows(open_npz(where, check_finite=False))
    if where.suffix == ".parquet" or where.is_dir():
        return open_parquet_rows(str(where))
    raise ValueError(
        f"--data {where}: several processes each read their own rows of a .npy, an uncompressed .npz (np.savez) or "
        "Parquet file(s)"
    )


def npz_compressed(path: Path) -> bool:
    """Whether any member of the ``.npz`` archive at ``path`` is compressed (a file that is no zip archive: False)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return any(info.compress_type != zipfile.ZIP_STORED for info in zf.infolist())
    except zipfile.BadZipFile:
        return False


def user_model(args: argparse.Namespace, split: bool = False):
    """``(Model, data, start)`` from ``--model``/``--data``: a ``Model`` reads the file out of core (with ``split``,
    only this process's rows); a NumPyro model is converted with the file's arrays, read into memory, as its arguments."""
    import inspect

    import numpy as np

    from minibatch_mcmc.models.base import Model

    if args.data is None:
        raise ValueError("--model needs --data FILE (.npy, .npz or .parquet)")
    target = load_model(args.model)
    if callable(target) and inspect.signature(target).return_annotation in (Model, "Model"):
        target = target()  # a factory such as models.logistic_regression
    columns = vars(args).get("columns")  # a Namespace built by hand may lack it
    if columns and isinstance(target, Model):
        raise ValueError(
            "--columns applies to a NumPyro model; a Model reads the file's columns by their names, out of "
            "core (store a covariate matrix as one list column of a Parquet file, or as one .npz array)"
        )
    if split and not isinstance(target, Model):
        raise ValueError(
            f"--model {args.model} is a NumPyro model, which is converted on the whole data in every process; over "
            "several processes give a minibatch_mcmc Model (--model MODULE:NAME --dim D), which reads only its rows"
        )
    data = load_data(args.data, out_of_core=isinstance(target, Model), split=split)  # from_numpyro needs whole arrays
    if isinstance(target, Model):
        if args.dim is None:
            raise ValueError("a Model given by --model needs --dim D (the chains start at zeros(D))")
        return target, data, np.zeros(args.dim, np.float32)
    if not callable(target):
        raise ValueError(
            f"--model {args.model}: expected a NumPyro model function or a minibatch_mcmc Model, got {type(target).__name__}"
        )
    from minibatch_mcmc.data.columns import model_arguments
    from minibatch_mcmc.interop import from_numpyro

    bound, unused = model_arguments(data, inspect.signature(target), columns or (), args.data)
    if unused:
        print(f"note: columns of --data that no model argument reads: {', '.join(unused)}", file=sys.stderr)
    converted = from_numpyro(target, **bound)
    return converted.model, converted.data, converted.init
