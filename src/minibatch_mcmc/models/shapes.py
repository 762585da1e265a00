"""Shape checks for the shipped models: the parameter and a data batch against a spec of named sizes.

A spec is a pytree whose leaves are :class:`Dims`: each entry a fixed size (``2``) or a name (``"d"``,
``"b"`` for the rows of a batch) bound the first time it is seen, so ``theta (d,)`` and ``x (b, d)``
must agree. A mismatch raises a ValueError naming the model, the argument, and the expected and
given shapes.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

PyTree = Any


class Dims:
    """The expected shape of one array: ints are fixed sizes, strings are named sizes."""

    def __init__(self, *dims: int | str) -> None:
        self.dims = tuple(dims)

    def __repr__(self) -> str:
        """``Dims('b', 'd')``: the same text in every process (checkpoint fingerprints read it)."""
        return f"Dims{self.dims!r}"

    def __eq__(self, other: object) -> bool:
        """Equal when the expected shapes are."""
        return isinstance(other, Dims) and other.dims == self.dims

    def __hash__(self) -> int:
        """Hash of the expected shape."""
        return hash(self.dims)

    def render(self, sizes: dict[str, int]) -> str:
        """The shape as text, named sizes replaced by their bound values where known."""
        parts = [str(sizes.get(d, d)) if isinstance(d, str) else str(d) for d in self.dims]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


REGRESSION_DATA = {"x": Dims("b", "d"), "y": Dims("b")}
"""Shape spec of a regression batch: ``b`` rows of ``d`` covariates and one response each."""


def _shape_and_kind(value: Any, model: str, what: str) -> tuple[tuple[int, ...], str]:
    """Shape and dtype kind of an array-like leaf (jax arrays and tracers are not copied)."""
    if isinstance(value, (jax.Array, np.ndarray)):
        return tuple(value.shape), np.dtype(value.dtype).kind if not jax.dtypes.issubdtype(
            value.dtype, jax.dtypes.prng_key
        ) else "O"
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        raise ValueError(f"{model}: {what}={value!r} is not an array of numbers") from None
    return arr.shape, arr.dtype.kind


def _match(model: str, what: str, value: Any, spec: Dims, sizes: dict[str, int]) -> None:
    """Check one leaf against its :class:`Dims`, binding named sizes in ``sizes``."""
    shape, kind = _shape_and_kind(value, model, what)
    if kind not in "biuf":
        raise ValueError(f"{model}: {what} must be an array of real numbers; got {value!r}")
    expected = spec.render(sizes)
    ok = len(shape) == len(spec.dims)
    bound = dict(sizes)
    for given, want in zip(shape, spec.dims) if ok else ():
        if isinstance(want, str):
            ok = ok and bound.setdefault(want, given) == given
        else:
            ok = ok and given == want
    if not ok:
        names = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(
            f"{model}: {what} has shape {shape}; expected {expected}" + (f" (from {names})" if names else "")
        )
    sizes.update(bound)


def check_tree(model: str, what: str, value: PyTree, spec: PyTree, sizes: dict[str, int]) -> None:
    """Check a pytree against a spec of :class:`Dims` leaves (structure first, then each leaf's shape)."""
    leaves, treedef = jax.tree_util.tree_flatten(spec)
    if isinstance(spec, dict) and isinstance(value, dict) and set(spec) <= set(value):
        value = {k: value[k] for k in spec}  # extra columns are allowed
    if treedef.num_nodes == 1:  # a single array: lists of numbers are fine too
        _match(model, what, value, leaves[0], sizes)
        return
    try:
        parts = treedef.flatten_up_to(value)
    except (ValueError, TypeError):
        raise ValueError(
            f"{model}: {what} has structure {jax.tree_util.tree_structure(value)}; expected {treedef} "
            f"with shapes {[d.render(sizes) for d in leaves]}"
        ) from None
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(spec)[0]]
    for path, part, dims in zip(paths, parts, leaves):
        _match(model, f"{what}{path}", part, dims, sizes)


def shape_check(
    model: str, theta: PyTree, batch: PyTree, sizes: dict[str, int] | None = None
) -> Callable[[PyTree, PyTree], None]:
    """A ``Model.check_shapes`` function: ``theta`` and ``batch`` against their specs (``batch`` rows named ``"b"``)."""
    fixed = dict(sizes or {})

    def check_shapes(value: PyTree, data: PyTree) -> None:
        bound = dict(fixed)
        check_tree(model, "the parameter theta", value, theta, bound)
        check_tree(model, "the data batch", data, batch, bound)

    return check_shapes
