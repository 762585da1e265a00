"""Pointwise log-likelihood of a run's draws on chosen data rows: ArviZ's ``log_likelihood`` group for LOO and WAIC.

At tall ``N`` the full ``(chain, draw, N)`` array does not fit: ``rows`` picks a subset of rows (an index array, or
a count drawn uniformly without replacement) and ``draws`` a subset of draws; the posterior and sample statistics
are thinned to the same draws so ArviZ's relative efficiency reads the draws the log-likelihood was computed on.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data.arrays import DataSource, as_data_source, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.keys import as_key
from minibatch_mcmc.samplers.results import SampleResult

PyTree = Any

MAX_VALUES = 50_000_000
"""Largest ``chains x draws x rows`` array computed without an explicit ``rows`` (400 MB in float64)."""


def choose_rows(rows: int | np.ndarray | None, n: int, key: jax.Array | int) -> np.ndarray:
    """Row indices: all rows (``None``), ``rows`` drawn uniformly without replacement (an int), or as given."""
    if rows is None:
        return np.arange(n)
    if isinstance(rows, (int, np.integer)):
        if not 1 <= rows <= n:
            raise ValueError(f"rows={rows}: expected a count in 1..N={n} or an array of row indices")
        return np.sort(np.asarray(jax.random.choice(as_key(key), n, (int(rows),), replace=False)))
    idx = np.asarray(rows)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer) or idx.size == 0 or idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"rows must be a non-empty 1-D array of integer indices in [0, {n}); got {idx!r:.80}")
    return idx


def thin(result: SampleResult, draws: slice | np.ndarray | None) -> SampleResult:
    """``result`` restricted to the given draws (every chain); ``None``: unchanged."""
    if draws is None:
        return result
    idx = np.arange(result.num_draws)[draws]
    pick = lambda tree: None if tree is None else jax.tree_util.tree_map(lambda a: np.asarray(a)[:, idx], tree)  # noqa: E731
    return result._replace(
        positions=pick(result.positions),
        unconstrained=pick(result.unconstrained),
        records=pick(result.records),
        temperature=np.asarray(result.temperature)[idx],
    )


def pointwise_log_lik(
    site_log_lik: Callable[[PyTree, PyTree], dict], positions: PyTree, batch: PyTree, chunk: int = 256
) -> dict:
    """``{site: (chain, draw, rows)}`` log-likelihoods of the rows in ``batch`` at each ``(chain, draw)`` position, in float64
    (ArviZ's LOO reduces over the draws in the dtype it is given)."""
    leaves = jax.tree_util.tree_leaves(positions)
    lead = tuple(np.shape(leaves[0])[:2])
    flat = jax.tree_util.tree_map(lambda a: np.reshape(np.asarray(a), (-1, *np.shape(a)[2:])), positions)
    fn = jax.jit(jax.vmap(site_log_lik, in_axes=(0, None)))
    parts = [
        fn(jax.tree_util.tree_map(lambda a: jnp.asarray(a[i : i + chunk]), flat), batch)
        for i in range(0, lead[0] * lead[1], chunk)
    ]
    joined = {k: np.concatenate([np.asarray(p[k]) for p in parts], dtype=np.float64) for k in parts[0]}
    return {k: v.reshape(lead + v.shape[1:]) for k, v in joined.items()}


def log_likelihood_data(
    result: SampleResult,
    model: Model,
    data: PyTree | DataSource,
    *,
    rows: int | np.ndarray | None = None,
    draws: slice | np.ndarray | None = None,
    key: jax.Array | int = 0,
    site_log_lik: Callable[[PyTree, PyTree], dict] | None = None,
):
    """ArviZ ``InferenceData`` of ``result`` (thinned to ``draws``) with a ``log_likelihood`` group on ``rows``.

    The log-likelihood is the model's own (temperature 1) at the kernel's draws, one variable per site of
    ``site_log_lik(theta, batch) -> {site: (b,)}`` (default: ``{"obs": model.log_lik}``); the row indices are
    the ``row`` coordinate. ``az.loo`` on it estimates the ELPD of those rows.

    Args:
        result: The run.
        model: The run's ``Model``.
        data: The run's rows (arrays or a ``DataSource``).
        rows: The rows to evaluate: all if None (refused when the values would not fit ``MAX_VALUES``), a count drawn
            uniformly without replacement, or an array of row indices.
        draws: The draws to keep, the same for every chain (a slice or indices); None: all.
        key: Seed or key of the row draw.
        site_log_lik: ``(theta, batch) -> {site: (b,) log-likelihood}``, one ``log_likelihood`` variable per site;
            None: ``{"obs": model.log_lik}``.

    Returns:
        An ``arviz.InferenceData`` with ``posterior``, ``sample_stats`` and ``log_likelihood`` (coordinate ``row``).
    """
    source = as_data_source(data)
    idx = choose_rows(rows, source.n, key)
    result = thin(result, draws)
    size = result.num_chains * result.num_draws * idx.size
    if rows is None and size > MAX_VALUES:
        raise ValueError(
            f"the log-likelihood of all N={source.n} rows at {result.num_chains} x {result.num_draws} draws is "
            f"{size:.3g} values (more than {MAX_VALUES:.0e}): pass rows=m (a random subset) and/or draws=slice(...)"
        )
    fn = site_log_lik if site_log_lik is not None else (lambda theta, batch: {"obs": model.log_lik(theta, batch)})
    values = pointwise_log_lik(fn, result.kernel_positions, take(source.arrays(), jnp.asarray(idx)))
    idata = result.to_inference_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az

        group = az.from_dict(log_likelihood=values, coords={"row": idx}, dims={k: ["row"] for k in values})
    idata.extend(group)
    return idata
