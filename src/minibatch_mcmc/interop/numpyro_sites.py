"""Reading a NumPyro model's trace: which plate holds the observations, which sites are latent, which
arguments are the data rows; and the errors for models ``from_numpyro`` cannot turn into a ``Model``."""

from __future__ import annotations

import inspect
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np

NUMPYRO_EXTRA = "pip install minibatch-mcmc[numpyro]"
"""The install line named when NumPyro is missing."""


def import_numpyro():
    """Import NumPyro (an optional extra) or raise an ``ImportError`` saying how to install it."""
    try:
        import numpyro
        import numpyro.infer.util  # noqa: F401
    except ImportError as err:
        raise ImportError(f"NumPyro models need NumPyro, an optional dependency: {NUMPYRO_EXTRA}") from err
    return numpyro


class Layout(NamedTuple):
    """What a model's trace says: the data plates, their size, the likelihood and latent sites, the data arguments."""

    plates: tuple[str, ...]
    """Plates over the data rows (one name, or several of the same size)."""
    n: int
    """Number of data rows ``N`` (the plates' full size)."""
    observed: tuple[str, ...]
    """Observed sites (``numpyro.factor`` included) inside the data plates: the per-datum log-likelihood."""
    latent: tuple[str, ...]
    """Continuous latent sites: the parameters, sampled in unconstrained space."""
    data_names: tuple[str, ...]
    """Model arguments whose array leaves all have leading axis ``N``: the data pytree's keys."""
    deterministic: tuple[str, ...] = ()
    """``numpyro.deterministic`` sites outside the data plates: recorded with every draw."""


def is_factor(site: dict) -> bool:
    """True for a ``numpyro.factor`` site (an observed ``Unit`` distribution)."""
    return type(site["fn"]).__name__ == "Unit"


def row_frame(site: dict, plates: tuple[str, ...] | None = None):
    """The site's frame of a data plate (any of ``plates``; ``None``: its outermost), or ``None`` if it has none."""
    frames = [f for f in site["cond_indep_stack"] if plates is None or f.name in plates]
    return min(frames, key=lambda f: f.dim) if frames else None


def row_sizes(bound: inspect.BoundArguments) -> set[int]:
    """Leading-axis sizes of the array arguments (the candidates for ``N``)."""
    leaves = jax.tree_util.tree_leaves(dict(bound.arguments))
    return {int(a.shape[0]) for a in leaves if isinstance(a, (np.ndarray, jax.Array)) and a.ndim >= 1}


def data_plates(
    trace: dict, bound: inspect.BoundArguments | None = None
) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    """``(plates, N, observed sites)``: the plate(s) holding the observations, or a ``ValueError`` naming why not.

    The data plate of a site is the plate around it whose size is the leading axis of an array argument (the
    largest such, wherever it sits among nested plates and whatever its ``dim``), else its largest plate.
    """
    sizes = {name: int(s["args"][0]) for name, s in trace.items() if s["type"] == "plate"}
    observed = {name: s for name, s in trace.items() if s["type"] == "sample" and s["is_observed"]}
    outside = sorted(name for name, s in observed.items() if row_frame(s) is None and not is_factor(s))
    rows = None if bound is None else row_sizes(bound)
    in_plate = {}
    for name, s in observed.items():
        if s["cond_indep_stack"]:
            fits = (lambda f: True) if rows is None else (lambda f: sizes[f.name] in rows)
            in_plate[name] = max(s["cond_indep_stack"], key=lambda f: (fits(f), sizes[f.name], -f.dim)).name
    if not in_plate:
        where = f"observed sites {outside} sit outside every plate" if outside else "it has no observed site"
        raise ValueError(
            f"from_numpyro needs the observations inside a numpyro.plate over the data rows, but {where}: "
            "write `with numpyro.plate('data', N): numpyro.sample(..., obs=y)`"
        )
    if outside:
        raise ValueError(
            f"observed sites {outside} sit outside the plate(s) {sorted(set(in_plate.values()))}: a likelihood term "
            "that is not a sum over data rows cannot be read on a minibatch; move it into the plate"
        )
    n_of = {site: sizes[plate] for site, plate in in_plate.items()}
    if len(set(n_of.values())) > 1:
        listing = ", ".join(
            f"{site!r} in plate {plate!r} (size {sizes[plate]})" for site, plate in sorted(in_plate.items())
        )
        raise ValueError(
            f"observed sites sit in plates of different sizes: {listing}; from_numpyro needs every observation "
            "in one plate over the same N data rows"
        )
    plates = tuple(sorted(set(in_plate.values())))
    return plates, sizes[plates[0]], tuple(sorted(in_plate))


def latent_sites(trace: dict, plates: tuple[str, ...]) -> tuple[str, ...]:
    """Names of the latent sites, or a ``ValueError`` naming discrete ones and local ones inside the data plate."""
    latent = {name: s for name, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}
    discrete = sorted(name for name, s in latent.items() if s["fn"].support.is_discrete)
    if discrete:
        kinds = ", ".join(f"{name!r} ({type(latent[name]['fn']).__name__})" for name in discrete)
        raise ValueError(
            f"discrete latent sites {kinds}: Metropolis-Hastings here moves continuous parameters in unconstrained "
            "space; sum the discrete variable out of the model (e.g. a mixture distribution) first"
        )
    local = sorted(name for name, s in latent.items() if any(f.name in plates for f in s["cond_indep_stack"]))
    if local:
        raise ValueError(
            f"latent sites {local} sit inside the data plate {list(plates)}: one parameter per data row grows with N "
            "and cannot be read on a minibatch; only global parameters (outside the plate) are supported"
        )
    return tuple(sorted(latent))


def is_rows(value: Any, n: int) -> bool:
    """True if ``value`` has array leaves and every one has leading axis ``n``."""
    leaves = jax.tree_util.tree_leaves(value)
    arrays = [leaf for leaf in leaves if isinstance(leaf, (np.ndarray, jax.Array))]
    return bool(arrays) and len(arrays) == len(leaves) and all(a.ndim >= 1 and a.shape[0] == n for a in arrays)


def data_arguments(bound: inspect.BoundArguments, n: int, plates: tuple[str, ...]) -> tuple[str, ...]:
    """Names of the bound arguments holding ``n`` rows, or a ``ValueError`` if none does."""
    names = tuple(name for name, value in bound.arguments.items() if is_rows(value, n))
    if not names:
        shapes = {name: np.shape(v) for name, v in bound.arguments.items() if isinstance(v, (np.ndarray, jax.Array))}
        raise ValueError(
            f"no argument of the model has leading axis N={n} (the size of plate(s) {list(plates)}); array arguments "
            f"have shapes {shapes}: pass the observations and covariates as arguments with rows on axis 0, "
            "not through a closure"
        )
    return names


def deterministic_sites(trace: dict, plates: tuple[str, ...]) -> tuple[str, ...]:
    """Names of the ``numpyro.deterministic`` sites outside the data plates (those inside hold one value per row)."""
    return tuple(
        sorted(
            name
            for name, s in trace.items()
            if s["type"] == "deterministic" and not any(f.name in plates for f in s.get("cond_indep_stack", ()))
        )
    )


def row_deterministic_sites(trace: dict, plates: tuple[str, ...]) -> tuple[str, ...]:
    """Names of the ``numpyro.deterministic`` sites inside the data plates: one value per row, not recorded with the draws."""
    return tuple(
        sorted(
            name
            for name, s in trace.items()
            if s["type"] == "deterministic" and any(f.name in plates for f in s.get("cond_indep_stack", ()))
        )
    )


def warn_row_deterministic(trace: dict, plates: tuple[str, ...]) -> None:
    """One warning naming the per-row deterministic sites the conversion drops and how to compute them from the draws."""
    dropped = row_deterministic_sites(trace, plates)
    if dropped:
        warnings.warn(
            f"deterministic sites {list(dropped)} sit inside the data plate(s) {list(plates)}: they hold one value per data row "
            "and are not recorded with the draws; compute them after sampling with NumPyro's Predictive on the draws, e.g. "
            "draws = {k: v.reshape(-1, *v.shape[2:]) for k, v in result.positions.items()}; "
            f"numpyro.infer.Predictive(model, posterior_samples=draws, return_sites={list(dropped)})(key, *args)",
            stacklevel=4,
        )


def read_layout(trace: dict, bound: inspect.BoundArguments) -> Layout:
    """The ``Layout`` of a model from one trace of it on the full data."""
    plates, n, observed = data_plates(trace, bound)
    latent = latent_sites(trace, plates)
    if not latent:
        raise ValueError("the model has no latent site: there is nothing to sample")
    return Layout(plates, n, observed, latent, data_arguments(bound, n, plates), deterministic_sites(trace, plates))
