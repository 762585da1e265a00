"""NumPyro models in: a model whose observations sit in one ``numpyro.plate`` becomes a ``Model``.

``from_numpyro(model, *args, **kwargs)`` traces the model once on its arguments and reads off

- the data: every argument whose array leaves all have the plate's size ``N`` on axis 0 (a dict
  ``{argument name: rows}``, the pytree the samplers draw minibatches from);
- the per-datum log-likelihood: the model rerun on a batch of rows (those arguments sliced, the data
  plates' indices set to ``arange(b)`` as NumPyro's subsampling does, so ``x[idx]``, ``numpyro.subsample``
  and plain ``obs=y`` all read the batch), summing the observed sites of the plate row by row, unscaled;
- the prior: every other site, on one data row, at unconstrained parameters through NumPyro's own
  ``biject_to`` transforms with the log-Jacobian included (``numpyro.infer.util.potential_energy``);
- a start: NumPyro's ``initialize_model`` with ``init_to_median`` on the full data;
- the way back: ``model.constrain`` maps one unconstrained position to the named constrained values and the
  deterministic sites outside the data plates, so ``sample``'s result reports those (``result.unconstrained``
  keeps the kernel's draws); ``postprocess`` does the same for draws with any leading axes;
- the data plate: the plate around the observations whose size is the data arguments' number of rows, wherever
  it sits among nested plates; pandas ``DataFrame``/``Series`` arguments are converted to arrays;
- a GLM, where the model is one (``interop.numpyro_glm``): then a flat ``theta``, data ``{"x", "y"}`` and ``Model.glm``,
  so the warm-up's exact test applies; a line says so.

NumPyro is an optional extra, imported only when one of these functions is called.
"""

from __future__ import annotations

import inspect
import math
import re
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.compiling import use_compilation_cache
from minibatch_mcmc.interop.numpyro_checks import (
    check_likelihood,
    check_prior_is_data_free,
    no_start_error,
    steady_deterministic,
)
from minibatch_mcmc.interop.numpyro_glm import as_glm
from minibatch_mcmc.interop.numpyro_sites import Layout, import_numpyro, read_layout, row_frame, warn_row_deterministic
from minibatch_mcmc.interop.numpyro_start import start_and_checks
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.loo import SubsampledLoo, loo_subsample
from minibatch_mcmc.samplers.phase_cost import PhaseClock, PhaseCost
from minibatch_mcmc.samplers.pointwise import log_likelihood_data
from minibatch_mcmc.samplers.results import SampleResult

PyTree = Any

SUBSAMPLE_WARNING = "subsample_size does not match len(subsample)"
"""NumPyro's warning when a plate's indices are set to a batch other than its ``subsample_size`` (expected here)."""


class NumPyroModel(NamedTuple):
    """A NumPyro model as a ``Model`` plus its data, a start, and the map back to named constrained values."""

    model: Model
    """``log_prior`` (unconstrained, Jacobian included) and per-datum ``log_lik``; ``theta`` a dict or flat vector."""
    data: dict
    """``{argument name: array with leading axis N}``: pass as ``data`` to ``sample``; for a recognised GLM
    (``interop.numpyro_glm``) ``{"x", "y"}`` and a Poisson ``"offset"``."""
    init: dict | jax.Array
    """Unconstrained start ``{latent site: array}`` (NumPyro's ``init_to_median`` on the full data); flat for a GLM."""
    postprocess: Callable[[PyTree], dict]
    """Unconstrained draws (dict or flat, any leading axes) to ``{latent site: constrained array}``."""
    site_log_lik: Callable[[PyTree, PyTree], dict]
    """``(theta, batch) -> {observed site: (b,) log-likelihood per row}``; ``model.log_lik`` is their sum."""
    layout: Layout
    """Data plates, ``N``, observed and latent sites, data arguments."""
    cost: PhaseCost | None = None
    """What the conversion cost (``fit_cost``'s ``convert`` row): seconds, compile seconds, and the rows of its one full-data
    pass (NumPyro's start and the checks at it)."""


def first_rows(data: dict, b: int) -> dict:
    """The first ``b`` rows of every leaf."""
    return jax.tree_util.tree_map(lambda a: a[:b], data)


def batch_size(batch: dict) -> int:
    """Rows in a batch (static)."""
    return int(jax.tree_util.tree_leaves(batch)[0].shape[0])


def on_rows(numpyro, model_fn: Callable, signature: inspect.Signature, args: tuple, kwargs: dict, layout: Layout):
    """``rows -> model``: the model run with its data arguments replaced by ``rows``, plate indices ``arange(b)``."""
    from numpyro.primitives import Messenger

    class RowsGiven(Messenger):
        """Data arguments arrive already sliced: ``numpyro.subsample`` passes them through unchanged."""

        def process_message(self, msg):
            """Drop ``event_dim`` from subsample messages so the plate does not index the sliced rows again."""
            if msg["type"] == "subsample":
                msg["kwargs"] = {**msg["kwargs"], "event_dim": None}

    def model_for(rows: dict):
        """The model on ``rows`` (no arguments)."""
        idx = jnp.arange(batch_size(rows))

        def run():
            bound = signature.bind(*args, **kwargs)
            bound.arguments.update(rows)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=re.escape(SUBSAMPLE_WARNING))
                return model_fn(*bound.args, **bound.kwargs)

        return numpyro.handlers.substitute(RowsGiven(run), data={p: idx for p in layout.plates})

    return model_for


def row_scale(site: dict, plate_scale: float):
    """Any scale the user put on a likelihood site, the data plates' ``N/b`` divided out (1 if none)."""
    scale = site["scale"]
    if scale is None:
        return 1.0
    ratio = scale / plate_scale
    return 1.0 if isinstance(ratio, float) and math.isclose(ratio, 1.0) else ratio


def per_row(log_prob: jax.Array, dim: int, b: int) -> jax.Array:
    """Sum a site's log-density over every batch axis but the plate's ``dim``: shape ``(b,)``."""
    return jnp.moveaxis(jnp.asarray(log_prob), dim, 0).reshape(b, -1).sum(axis=1)


def as_dict(theta: PyTree, unravel: Callable) -> dict:
    """A parameter dict from a dict or a flat vector."""
    return theta if isinstance(theta, dict) else unravel(theta)


def build_trace(numpyro, model_for: Callable, unravel: Callable) -> Callable[[PyTree, dict], dict]:
    """``trace_at(theta, batch)``: the model's trace on ``batch`` at unconstrained ``theta`` (latent sites constrained)."""
    biject_to = numpyro.distributions.transforms.biject_to

    def trace_at(theta: PyTree, batch: dict) -> dict:
        params = as_dict(theta, unravel)

        def constrain(site):
            if site["type"] == "sample" and site["name"] in params:
                return biject_to(site["fn"].support)(params[site["name"]])
            return None

        return numpyro.handlers.trace(
            numpyro.handlers.substitute(model_for(batch), substitute_fn=constrain)
        ).get_trace()

    return trace_at


def build_likelihood(numpyro, model_for: Callable, layout: Layout, unravel: Callable):
    """``site_log_lik(theta, batch)``: each observed site's per-row log-likelihood at unconstrained ``theta``."""
    trace_at = build_trace(numpyro, model_for, unravel)

    def site_log_lik(theta: PyTree, batch: dict) -> dict:
        b = batch_size(batch)
        trace = trace_at(theta, batch)
        out = {}
        for name in layout.observed:
            site = trace[name]
            plates = sum(f.name in layout.plates for f in site["cond_indep_stack"])
            log_prob = site["fn"].log_prob(site["value"]) * row_scale(site, (layout.n / b) ** plates)
            out[name] = per_row(log_prob, row_frame(site, layout.plates).dim, b)
        return out

    return site_log_lik


def build_constrain(
    numpyro, prior_model: Callable, names: tuple[str, ...], unravel: Callable
) -> Callable[[PyTree], dict]:
    """``constrain(theta)``: one unconstrained position (dict or flat) to ``{site: value}`` for ``names``
    (latent sites constrained, deterministic sites computed)."""
    constrain_fn = numpyro.infer.util.constrain_fn

    def constrain(theta: PyTree) -> dict:
        values = constrain_fn(prior_model, (), {}, as_dict(theta, unravel), return_deterministic=True)
        return {name: values[name] for name in names}

    return constrain


def build_postprocess(constrain: Callable[[PyTree], dict], init: dict) -> Callable[[PyTree], dict]:
    """``postprocess(positions)``: unconstrained draws with any leading axes to named constrained draws."""
    flat_init, unravel = ravel_pytree(init)

    def postprocess(positions: PyTree) -> dict:
        if not isinstance(positions, dict):
            lead = np.shape(positions)[:-1]
            flat = jnp.reshape(jnp.asarray(positions), (-1, flat_init.size))
            params = jax.vmap(unravel)(flat)
        else:
            first = next(iter(init))
            lead = np.shape(positions[first])[: np.ndim(positions[first]) - np.ndim(init[first])]
            params = {k: jnp.reshape(jnp.asarray(positions[k]), (-1, *np.shape(init[k]))) for k in init}
        values = jax.jit(jax.vmap(constrain))(params)
        return {k: np.asarray(v).reshape((*lead, *v.shape[1:])) for k, v in values.items()}

    return postprocess


def inspect_trace(numpyro, model_fn: Callable, args: tuple, kwargs: dict) -> dict:
    """One trace of the model on its arguments, abstractly (``jax.eval_shape``: nothing is computed or compiled)."""
    held = {}

    def run():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=re.escape(SUBSAMPLE_WARNING))
            held["trace"] = numpyro.handlers.trace(numpyro.handlers.seed(model_fn, rng_seed=0)).get_trace(
                *args, **kwargs
            )
        return 0

    jax.eval_shape(run)
    return held["trace"]


def as_arrays(value: Any) -> Any:
    """A model argument with pandas objects and numpy arrays as JAX arrays (a ``ValueError`` for non-numeric columns)."""
    try:
        import pandas as pd
    except ImportError:  # pandas absent: nothing of its kind can have been passed
        pd = None
    if pd is not None and isinstance(value, (pd.DataFrame, pd.Series)):
        frame = value.to_frame() if isinstance(value, pd.Series) else value
        bad = [
            str(c)
            for c, t in frame.dtypes.items()
            if not (pd.api.types.is_numeric_dtype(t) or pd.api.types.is_bool_dtype(t))
        ]
        if bad:
            raise ValueError(
                f"the pandas columns {bad} are not numeric ({[str(frame[c].dtype) for c in bad]}): encode them as numbers "
                "(e.g. pd.get_dummies or .cat.codes) before passing the frame to the model"
            )
        value = value.to_numpy()
    return jnp.asarray(value) if isinstance(value, np.ndarray) else value


def from_numpyro(model_fn: Callable, *args: Any, **kwargs: Any) -> NumPyroModel:
    """Turn ``model_fn(*args, **kwargs)``, observations in one ``numpyro.plate``, into a ``NumPyroModel``.

    pandas ``DataFrame`` and ``Series`` arguments are converted to arrays (rows on axis 0) first. The record's ``cost`` is the
    conversion's (``warmup.fit_cost`` puts it first in the fit's table).

    Args:
        model_fn: A NumPyro model whose observed sites sit in one ``numpyro.plate`` over the ``N`` rows.
        *args: The model's positional arguments, as for ``model_fn(*args)``: the arrays with a leading axis of length
            ``N`` become the data read in minibatches, the others stay fixed.
        **kwargs: The model's keyword arguments, treated as ``args``.

    Returns:
        The ``NumPyroModel``: ``.model``, ``.data`` and ``.init`` are ``auto_sample``'s first three arguments.
    """
    use_compilation_cache()  # before anything compiles: a new process reads what an earlier one compiled
    with PhaseClock("convert", 1) as clock:
        converted = convert(model_fn, args, kwargs)
    n, passes = converted.layout.n, 1 if converted.model.glm is None else 2  # a recognised GLM: its design pass too
    return converted._replace(cost=PhaseCost(n * passes, clock.seconds, float(passes), clock.compile_seconds))


def convert(model_fn: Callable, args: tuple, kwargs: dict, recognise: bool = True) -> NumPyroModel:
    """``from_numpyro``'s conversion, untimed (``recognise=False``: no GLM recognition, the conversion as before it)."""
    numpyro = import_numpyro()
    args, kwargs = jax.tree_util.tree_map(as_arrays, (args, kwargs))
    signature = inspect.signature(model_fn)
    bound = signature.bind(*args, **kwargs)
    trace = inspect_trace(numpyro, model_fn, args, kwargs)
    layout = read_layout(trace, bound)
    warn_row_deterministic(trace, layout.plates)
    data = {name: bound.arguments[name] for name in layout.data_names}
    model_for = on_rows(numpyro, model_fn, signature, args, kwargs, layout)
    hide = list(layout.observed)

    def constrain_on(rows: dict, unravel: Callable | None = None) -> Callable:
        return build_constrain(
            numpyro, numpyro.handlers.block(model_for(rows), hide=hide), layout.deterministic, unravel
        )

    start = start_and_checks(
        numpyro, model_for, build_likelihood(numpyro, model_for, layout, None), constrain_on, layout, trace, data
    )
    init = start.init
    _, unravel = ravel_pytree(init)
    prior_model = numpyro.handlers.block(model_for(first_rows(data, 1)), hide=hide)
    potential_energy = numpyro.infer.util.potential_energy

    def log_prior(theta: PyTree) -> jax.Array:
        return -potential_energy(prior_model, (), {}, as_dict(theta, unravel))

    site_log_lik = build_likelihood(numpyro, model_for, layout, unravel)
    if not start.valid:
        raise no_start_error(site_log_lik, data, init, layout)

    def log_lik(theta: PyTree, batch: dict) -> jax.Array:
        return sum(site_log_lik(theta, batch).values())

    check_prior_is_data_free(start.prior, layout)
    check_likelihood(start.likelihood, start.error, layout)
    layout = layout._replace(deterministic=steady_deterministic(start.deterministic, layout))
    constrain = build_constrain(numpyro, prior_model, layout.latent + layout.deterministic, unravel)
    name = f"numpyro:{getattr(model_fn, '__name__', type(model_fn).__name__)}"
    converted = NumPyroModel(
        Model(log_prior, log_lik, name, constrain=constrain),
        data,
        init,
        build_postprocess(constrain, init),
        site_log_lik,
        layout,
    )
    return as_glm(converted, build_trace(numpyro, model_for, unravel), trace) if recognise else converted


def constrained_result(result: SampleResult, converted: NumPyroModel) -> SampleResult:
    """``result`` with named constrained draws as positions: as it is if ``sample`` already reported them (it does
    for ``converted.model``); for a result of another run on the same parameters, ``postprocess`` applied."""
    if result.unconstrained is not None:
        return result
    return result._replace(positions=converted.postprocess(result.positions), unconstrained=result.positions)


def to_inference_data(result: SampleResult, converted: NumPyroModel):
    """ArviZ ``InferenceData`` of a run on a converted model: one posterior variable per latent site, constrained.

    Args:
        result: A run on ``converted.model`` (or on the same parameters, whose draws are then constrained here).
        converted: ``from_numpyro``'s record.
    """
    return constrained_result(result, converted).to_inference_data()


def log_likelihood(result: SampleResult, converted: NumPyroModel, **kwargs: Any):
    """``log_likelihood_data`` for a run on a converted model: one ``log_likelihood`` variable per observed site
    (``rows``, ``draws``, ``key`` as there), so ``az.loo`` works on it.

    Args:
        result: A run on ``converted.model``.
        converted: ``from_numpyro``'s record.
        **kwargs: ``log_likelihood_data``'s ``rows``, ``draws`` and ``key``.
    """
    return log_likelihood_data(result, converted.model, converted.data, site_log_lik=converted.site_log_lik, **kwargs)


def subsampled_loo(result: SampleResult, converted: NumPyroModel, **kwargs: Any) -> SubsampledLoo:
    """``loo_subsample`` for a run on a converted model (``m``, ``draws``, ``key`` as there): PSIS-LOO at tall N.

    Args:
        result: A run on ``converted.model``.
        converted: ``from_numpyro``'s record.
        **kwargs: ``loo_subsample``'s ``m``, ``draws`` and ``key``.
    """
    return loo_subsample(result, converted.model, converted.data, site_log_lik=converted.site_log_lik, **kwargs)
