"""A converted NumPyro model's start and what the conversion checks read, in one compiled function.

``start_and_checks`` compiles once, the data rows an argument (not constants captured in it): the first try of
NumPyro's ``find_valid_initial_params`` with ``init_to_median`` (its key and its draws: the start it returns when
that try is valid), and the values ``from_numpyro``'s checks compare: the prior's site log-densities on the first
and last data row, the likelihood on two rows, the deterministic sites on the first and last row. NumPyro's own
search, compiled inside a jitted caller, holds its first try twice (before its retry loop and in it), and each
check compiled apart cost a compilation more; its retry loop now runs only when the first try is not valid.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.compiling import ONE_OFF_WORK, compile_options
from minibatch_mcmc.interop.numpyro_sites import Layout

PyTree = Any


class StartValues(NamedTuple):
    """The start, whether its log density and gradient are finite, and the checks' values."""

    init: dict
    valid: bool
    prior: tuple[dict, dict]
    """Sum of each prior site's log-density on the first and on the last data row."""
    likelihood: dict
    """Each observed site's log-likelihood on the first two rows (empty when ``error`` is set)."""
    error: str
    """Why the likelihood could not be read on two rows (empty if it could)."""
    deterministic: tuple[dict, dict]
    """The deterministic sites on the first and on the last data row."""


def prototype(numpyro, trace: dict, latent: tuple[str, ...]) -> dict:
    """Zeros of each latent site's unconstrained shape (NumPy: nothing compiled to make them)."""
    biject_to = numpyro.distributions.transforms.biject_to
    shapes = {k: biject_to(trace[k]["fn"].support).inverse_shape(jnp.shape(trace[k]["value"])) for k in latent}
    return {k: np.zeros(shape, jnp.result_type(float)) for k, shape in shapes.items()}


def median_try(numpyro, model: Callable, key: jax.Array, latent: tuple[str, ...]) -> tuple[dict, jax.Array]:
    """The first try of ``find_valid_initial_params(key, model, init_strategy=init_to_median)``: unconstrained start and
    whether the full-data log density and its gradient are finite (traceable)."""
    from numpyro.handlers import seed, substitute, trace
    from numpyro.infer.initialization import init_to_median
    from numpyro.infer.util import potential_energy, transform_fn

    biject_to = numpyro.distributions.transforms.biject_to
    _, subkey = jax.random.split(key)  # the search's first split
    sites = trace(substitute(seed(model, subkey), substitute_fn=init_to_median())).get_trace()
    sites = {
        k: v
        for k, v in sites.items()
        if v["type"] == "sample" and not v["is_observed"] and not v["fn"].support.is_discrete
    }
    params = transform_fn(
        {k: biject_to(v["fn"].support) for k, v in sites.items()},
        {k: v["value"] for k, v in sites.items()},
        invert=True,
    )
    pe, grad = jax.value_and_grad(lambda p: potential_energy(model, (), {}, p))(params)
    return {k: params[k] for k in latent}, jnp.isfinite(pe) & jnp.all(jnp.isfinite(ravel_pytree(grad)[0]))


def numpyro_start(
    numpyro, model: Callable, key: jax.Array, proto: dict, latent: tuple[str, ...]
) -> tuple[dict, jax.Array]:
    """NumPyro's whole ``find_valid_initial_params`` search (its retries: only for a first try that is not valid; traceable)."""
    from numpyro.infer.initialization import init_to_median
    from numpyro.infer.util import find_valid_initial_params

    (params, _, _), valid = find_valid_initial_params(key, model, init_strategy=init_to_median, prototype_params=proto)
    return {name: params[name] for name in latent}, valid


def check_values(
    numpyro, model_for: Callable, site_log_lik: Callable, constrain_on: Callable, layout: Layout, init: dict, data: dict
) -> tuple:
    """``(prior, likelihood, error, deterministic)`` of ``StartValues`` at ``init`` (traceable; ``data`` the full rows)."""
    infer = numpyro.infer.util
    first, last, two = (
        {k: v[s] for k, v in data.items()} for s in (slice(0, 1), slice(-1, None), slice(0, min(2, layout.n)))
    )

    def site_sums(rows: dict) -> dict:
        prior = numpyro.handlers.block(model_for(rows), hide=list(layout.observed))
        _, tr = infer.log_density(prior, (), {}, infer.constrain_fn(prior, (), {}, init))
        return {k: jnp.sum(s["fn"].log_prob(s["value"])) for k, s in tr.items() if s["type"] == "sample"}

    try:
        likelihood, error = site_log_lik(init, two), ""
    except Exception as err:  # noqa: BLE001 - any failure here means the rows did not reach the sites
        likelihood, error = {}, f"{type(err).__name__}: {err}"
    steady = (constrain_on(first)(init), constrain_on(last)(init)) if layout.deterministic else ({}, {})
    return (site_sums(first), site_sums(last)), likelihood, error, steady


def start_and_checks(
    numpyro,
    model_for: Callable,
    site_log_lik: Callable,
    constrain_on: Callable,
    layout: Layout,
    trace: dict,
    data: dict,
) -> StartValues:
    """The start on the full data and the checks' values at it, one compilation (a second one only for NumPyro's retries)."""
    proto, held = prototype(numpyro, trace, layout.latent), {}

    def fused(data: dict):
        init, valid = median_try(numpyro, model_for(data), jax.random.PRNGKey(0), layout.latent)
        prior, likelihood, held["error"], steady = check_values(
            numpyro, model_for, site_log_lik, constrain_on, layout, init, data
        )
        return init, valid, prior, likelihood, steady

    work = max(jnp.shape(v)[0] if jnp.ndim(v) else 1 for v in jax.tree_util.tree_leaves(data)) * sum(
        np.size(v) for v in proto.values()
    )
    init, valid, prior, likelihood, steady = jax.jit(fused, compiler_options=compile_options(work, ONE_OFF_WORK))(data)
    if not bool(valid):  # NumPyro's search goes on from there with new keys
        init, valid = jax.jit(
            lambda rows: numpyro_start(numpyro, model_for(rows), jax.random.PRNGKey(0), proto, layout.latent)
        )(data)
        if bool(valid):

            def checks(init: dict, data: dict):
                prior, likelihood, held["error"], steady = check_values(
                    numpyro, model_for, site_log_lik, constrain_on, layout, init, data
                )
                return prior, likelihood, steady

            prior, likelihood, steady = jax.jit(checks)(init, data)
    return StartValues(init, bool(valid), prior, likelihood, held["error"], steady)
