"""A safe codec for a saved warm-up: a JSON tree plus arrays for an ``.npz``, read back without running any code.

The tree's leaves are JSON's own values (``None``, bools, ints, floats, strings); containers are tagged objects:
``{"list": [...]}``, ``{"tuple": [...]}``, ``{"dict": {...}}`` (string keys), ``{"namedtuple": NAME, "fields": {...}}``
and ``{"array": KEY, "kind": "numpy" | "jax" | "scalar", "weak": bool}`` (the values in the ``.npz`` under ``KEY``,
read with ``allow_pickle=False``), and ``{"ref": NAME}`` for an object the caller supplies again on load (the run's
model, whose functions cannot be saved). A NamedTuple is rebuilt only if ``NAME`` (its module and qualified name) is in
the caller's registry, an explicit tuple of classes; no name from a file is ever imported. Anything else (a callable,
an object of an unlisted class) cannot be encoded: ``encode`` raises ``TypeError``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.austere import AustereMH
from minibatch_mcmc.acceptance.austere_design import (
    AustereDesign,
    DesignChoice,
    DesignTable,
    ErrorDesign,
    ErrorEstimate,
)
from minibatch_mcmc.acceptance.base import ResidualBounds
from minibatch_mcmc.acceptance.correction import CorrectionSampler, CorrectionTable, SkewCorrectionTable
from minibatch_mcmc.acceptance.exact import BarkerTest, MetropolisTest
from minibatch_mcmc.acceptance.mhminibatch import MHMinibatch
from minibatch_mcmc.acceptance.mhminibatch_skew import MHMinibatchSkew, SkewSampler
from minibatch_mcmc.acceptance.mhss import MHSS
from minibatch_mcmc.acceptance.mhsublhd import MHSubLhd
from minibatch_mcmc.acceptance.mint import MINT, MINTSettings
from minibatch_mcmc.acceptance.naive import NaiveMinibatch
from minibatch_mcmc.acceptance.none import NoTest
from minibatch_mcmc.acceptance.penalty import PenaltyTest
from minibatch_mcmc.acceptance.smh import ScalableMH
from minibatch_mcmc.control_variates.base import PlainDifference
from minibatch_mcmc.control_variates.glm import GLMProxy
from minibatch_mcmc.control_variates.glmm import GLMMProxy, PairBlock
from minibatch_mcmc.control_variates.importance import ImportanceProxy
from minibatch_mcmc.control_variates.influence import Influence
from minibatch_mcmc.control_variates.stratified import StratifiedProxy
from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.models.base import GLMMLayout, GLMSpec
from minibatch_mcmc.samplers.phase_cost import PhaseCost

LIBRARY_TYPES: tuple[type, ...] = (
    AustereMH,
    AustereDesign,
    DesignChoice,
    DesignTable,
    ErrorDesign,
    ErrorEstimate,
    ResidualBounds,
    CorrectionSampler,
    CorrectionTable,
    SkewCorrectionTable,
    BarkerTest,
    MetropolisTest,
    MHMinibatch,
    MHMinibatchSkew,
    SkewSampler,
    MHSS,
    MHSubLhd,
    MINT,
    MINTSettings,
    NaiveMinibatch,
    NoTest,
    PenaltyTest,
    ScalableMH,
    PlainDifference,
    GLMProxy,
    ImportanceProxy,
    Influence,
    StratifiedProxy,
    TaylorProxy,
    GLMSpec,
    PhaseCost,
    GLMMProxy,
    PairBlock,
    GLMMLayout,
)
"""The NamedTuples of this library below the warm-up's layer that a saved warm-up may hold (the caller adds its own)."""


def type_name(cls: type) -> str:
    """The name a class is saved under: its module and qualified name."""
    return f"{cls.__module__}.{cls.__qualname__}"


def encode(obj: Any, types: tuple[type, ...], refs: dict[str, Any] | None = None) -> tuple[Any, dict[str, np.ndarray]]:
    """``obj`` as a JSON tree and the arrays it refers to; ``TypeError`` naming the first part that cannot be saved."""
    arrays: dict[str, np.ndarray] = {}
    allowed = {type_name(t): t for t in types}
    return _encode(obj, allowed, refs or {}, arrays, "warm-up"), arrays


def _encode(obj: Any, allowed: dict[str, type], refs: dict[str, Any], arrays: dict, where: str) -> Any:
    """One node of ``encode``."""
    for name, ref in refs.items():
        if obj is ref:
            return {"ref": name}
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        name = type_name(type(obj))
        if allowed.get(name) is not type(obj):
            raise TypeError(f"{where} is a {name}, which a saved warm-up cannot hold")
        return {
            "namedtuple": name,
            "fields": {f: _encode(getattr(obj, f), allowed, refs, arrays, f"{where}.{f}") for f in obj._fields},
        }
    if type(obj) in (list, tuple):
        return {type(obj).__name__: [_encode(v, allowed, refs, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if type(obj) is dict:
        if not all(type(k) is str for k in obj):
            raise TypeError(f"{where} is a dict with keys that are not strings")
        return {"dict": {k: _encode(v, allowed, refs, arrays, f"{where}[{k!r}]") for k, v in obj.items()}}
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        return _encode_array(obj, arrays, where)
    raise TypeError(f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which a saved warm-up cannot hold")


def _encode_array(obj: Any, arrays: dict, where: str) -> dict:
    """An array's node; its values go into ``arrays`` (numeric, boolean and string dtypes only: no objects, no PRNG keys)."""
    if isinstance(obj, jax.Array) and jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
        raise TypeError(f"{where} is a PRNG key array, which a saved warm-up cannot hold")
    value = np.asarray(obj)
    if value.dtype.kind not in "biufcUS":
        raise TypeError(f"{where} is an array of dtype {value.dtype}, which a saved warm-up cannot hold")
    key = f"a{len(arrays)}"
    arrays[key] = value
    kind = "jax" if isinstance(obj, jax.Array) else "scalar" if isinstance(obj, np.generic) else "numpy"
    return {"array": key, "kind": kind, "weak": bool(getattr(obj, "weak_type", False))}


def decode(tree: Any, arrays: Any, types: tuple[type, ...], refs: dict[str, Any] | None = None) -> Any:
    """The object ``encode`` saved as ``tree`` and ``arrays``; ``ValueError`` for a class not in ``types`` or a malformed tree."""
    return _decode(tree, arrays, {type_name(t): t for t in types}, refs or {})


def _decode(node: Any, arrays: Any, allowed: dict[str, type], refs: dict[str, Any]) -> Any:
    """One node of ``decode``."""
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is not dict or len(node) not in (1, 2, 3):
        raise ValueError(f"malformed saved warm-up: unexpected node {str(node)[:80]}")
    if "ref" in node:
        if node["ref"] not in refs:
            raise ValueError(f"malformed saved warm-up: unknown reference {node['ref']!r}")
        return refs[node["ref"]]
    if "namedtuple" in node:
        cls = allowed.get(node["namedtuple"])
        if cls is None:
            raise ValueError(
                f"the saved warm-up holds a {node['namedtuple']!r}, which is not one of the classes it may hold"
            )
        return cls(**{f: _decode(v, arrays, allowed, refs) for f, v in node["fields"].items()})
    if "list" in node or "tuple" in node:
        items = [_decode(v, arrays, allowed, refs) for v in node.get("list", node.get("tuple"))]
        return items if "list" in node else tuple(items)
    if "dict" in node:
        return {str(k): _decode(v, arrays, allowed, refs) for k, v in node["dict"].items()}
    if "array" in node:
        return _decode_array(node, arrays)
    raise ValueError(f"malformed saved warm-up: unexpected node {str(node)[:80]}")


def _decode_array(node: dict, arrays: Any) -> Any:
    """An array node back as the kind it was: a NumPy array or scalar, or a JAX array of the same dtype (and weak type)."""
    value = np.asarray(arrays[node["array"]])
    if node["kind"] == "scalar":
        return value[()]
    if node["kind"] != "jax":
        return value
    if node.get("weak") and value.ndim == 0:  # a Python scalar's weak type, as ``jnp.asarray(0.5)`` has it
        return _weak(value)
    return jnp.asarray(value, dtype=value.dtype)


def _weak(value: np.ndarray) -> jax.Array:
    """A weakly typed 0-d JAX array holding ``value`` with its dtype."""
    out = jnp.asarray(value.item())
    return out if out.dtype == value.dtype else jnp.asarray(value, dtype=value.dtype)
