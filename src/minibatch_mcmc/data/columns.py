"""A table's columns bound to a function's arguments: by an explicit ``ARG=col1,col2`` mapping, or by name.

An argument built from several columns is their ``(N, k)`` float stack, in the order given; one column is passed as it
is. The mapping by name binds every argument whose name is a column; a table whose columns do not cover the arguments
is one error listing both and an example mapping.
"""

from __future__ import annotations

import inspect
from typing import Mapping, Sequence

import numpy as np


def parse_columns(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``["X=a,b,c", "y=d"]`` -> ``{"X": ("a", "b", "c"), "y": ("d",)}``; a malformed item is an error naming it."""
    mapping: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, sep, cols = spec.partition("=")
        names = tuple(c.strip() for c in cols.split(","))
        if not sep or not name.strip() or not all(names):
            raise ValueError(f"--columns {spec!r}: expected ARG=COLUMN or ARG=COL1,COL2,... (e.g. X=a,b,c y=d)")
        if name.strip() in mapping:
            raise ValueError(f"--columns names argument {name.strip()!r} twice")
        mapping[name.strip()] = names
    return mapping


def stack_columns(table: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """One column as it is, or several stacked side by side into an ``(N, k)`` float array in the order given."""
    if len(names) == 1:
        return np.asarray(table[names[0]])
    cols = [np.asarray(table[c]) for c in names]
    dtype = np.result_type(*cols)
    return np.column_stack(cols).astype(dtype if np.issubdtype(dtype, np.floating) else np.float32)


def example_mapping(arguments: Sequence[str], columns: Sequence[str]) -> str:
    """An illustrative ``--columns`` line: the first argument from all columns but the last, the last argument from it."""
    if len(arguments) >= 2 and len(columns) >= 2:
        return f"--columns {arguments[0]}={','.join(columns[:-1])} {arguments[-1]}={columns[-1]}"
    return f"--columns {arguments[0] if arguments else 'ARG'}={','.join(columns) or 'COLUMN'}"


def bind_columns(
    table: Mapping[str, np.ndarray], fn_signature: inspect.Signature, mapping: Mapping[str, Sequence[str]] | None = None
) -> dict[str, np.ndarray]:
    """Keyword arguments for a function of signature ``fn_signature`` from ``table``'s columns (``mapping``: by it).

    Without a mapping, every argument named like a column gets that column; it is an error when an argument without
    a default finds none, or when arguments and columns are both left over (a table whose names differ from the
    model's). The errors list the arguments, the columns found and an example ``--columns`` line.
    """
    params = [p for p in fn_signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    arguments = [p.name for p in params]
    required = [p.name for p in params if p.default is p.empty]
    columns = list(table)
    listing = (
        f"the model's arguments: {', '.join(arguments) or '(none)'} (required: {', '.join(required) or 'none'}); "
        f"the columns found: {', '.join(columns) or '(none)'}; map them with e.g. {example_mapping(arguments, columns)}"
    )
    if mapping:
        unknown_args = [a for a in mapping if a not in arguments]
        unknown_cols = [c for cols in mapping.values() for c in cols if c not in table]
        missing = [a for a in required if a not in mapping]
        if unknown_args or unknown_cols or missing:
            what = "; ".join(
                s
                for s in (
                    f"no argument(s) {', '.join(unknown_args)}" if unknown_args else "",
                    f"no column(s) {', '.join(unknown_cols)}" if unknown_cols else "",
                    f"no column for the required argument(s) {', '.join(missing)}" if missing else "",
                )
                if s
            )
            raise ValueError(f"--columns: {what}: {listing}")
        return {a: stack_columns(table, cols) for a, cols in mapping.items()}
    bound = {a: np.asarray(table[a]) for a in arguments if a in table}
    missing = [a for a in required if a not in bound]
    unbound, unused = [a for a in arguments if a not in bound], [c for c in columns if c not in bound]
    if missing or (unbound and unused):
        raise ValueError(
            f"the data's columns do not name the model's arguments ({', '.join(missing or unbound)} "
            f"unmatched): {listing}"
        )
    return bound


def model_arguments(
    data: np.ndarray | Mapping[str, np.ndarray],
    fn_signature: inspect.Signature,
    specs: Sequence[str] = (),
    where: str = "--data",
) -> tuple[dict[str, np.ndarray], list[str]]:
    """``(keyword arguments, columns no argument reads)`` from a file's data: one array is the first argument; named
    columns are bound by ``specs`` (``--columns`` items) or by name (``bind_columns``)."""
    if not isinstance(data, Mapping):
        if specs:
            raise ValueError(f"--columns needs named columns (a .npz or Parquet file); {where} is one array")
        return {next(iter(fn_signature.parameters)): data}, []
    mapping = parse_columns(specs)
    bound = bind_columns(data, fn_signature, mapping)
    used = {c for a in bound for c in mapping.get(a, (a,))}
    return bound, [c for c in data if c not in used]
