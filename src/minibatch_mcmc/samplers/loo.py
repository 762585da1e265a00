"""PSIS-LOO at tall ``N`` by subsampling with a difference estimator (Magnusson, Andersen, Jonasson and Vehtari 2020).

Exact PSIS-LOO needs the ``(draws, N)`` log-likelihood. Here a cheap approximation ``a_i`` of every row's
``elpd_loo,i`` is computed on all ``N`` rows in one streamed pass (the log-likelihood at the posterior mean of
the sampled coordinates, R ``loo``'s ``"plpd"``), exact PSIS-LOO (ArviZ) on ``m`` rows drawn uniformly without
replacement, and the total estimated as ``sum_i a_i + (N / m) sum_{j in S} (e_j - a_j)``: unbiased whatever the
approximation, with a variance that shrinks as the approximation improves. ``subsampling_se`` is that
estimator's standard error (finite-population corrected); ``se`` the usual s.e. of ``elpd_loo``, from
difference-estimated first and second moments of the ``elpd_loo,i``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int
from minibatch_mcmc.data.arrays import DataSource, as_data_source, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.pointwise import log_likelihood_data
from minibatch_mcmc.samplers.results import SampleResult

PyTree = Any


class SubsampledLoo(NamedTuple):
    """The subsampled PSIS-LOO estimate of a run's expected log pointwise predictive density."""

    elpd_loo: float
    """Estimated sum over all ``N`` rows of ``log p(y_i | y_-i)``."""
    se: float
    """Standard error of ``elpd_loo`` as exact PSIS-LOO reports it (spread of the rows' contributions)."""
    subsampling_se: float
    """Standard error added by using ``m`` rows instead of ``N``."""
    m: int
    n_data: int
    max_pareto_k: float
    """Largest Pareto ``k`` among the subsampled rows (above 0.7: unreliable importance weights)."""
    rows: np.ndarray
    """The subsampled rows."""


def point_log_lik(
    fn: Callable[[PyTree, PyTree], jax.Array], theta: PyTree, source: DataSource, chunk: int = 65_536
) -> np.ndarray:
    """``fn(theta, rows)`` on all ``N`` rows, ``chunk`` rows at a time (one streamed pass)."""
    run = jax.jit(fn)
    out = [
        np.asarray(run(theta, take(source.arrays(), jnp.arange(i, min(source.n, i + chunk)))))
        for i in range(0, source.n, chunk)
    ]
    return np.concatenate(out).astype(np.float64)


def loo_subsample(
    result: SampleResult,
    model: Model,
    data: PyTree | DataSource,
    *,
    m: int = 1000,
    draws: slice | np.ndarray | None = None,
    key: jax.Array | int = 0,
    site_log_lik: Callable[[PyTree, PyTree], dict] | None = None,
) -> SubsampledLoo:
    """Subsampled PSIS-LOO of ``result`` with the difference estimator on ``m`` random rows (all rows if ``m >= N``).

    Args:
        result: The run.
        model: The run's ``Model``.
        data: The run's rows (arrays or a ``DataSource``); all ``N`` are read once, streamed.
        m: Rows on which exact PSIS-LOO is computed (at least 2).
        draws: The draws to use, the same for every chain; None: all.
        key: Seed or key of the row draw.
        site_log_lik: ``(theta, batch) -> {site: (b,)}``, whose sum is the row's log-likelihood; None: ``model.log_lik``.

    Returns:
        The ``SubsampledLoo``: ``elpd_loo``, its ``se`` and ``subsampling_se``, the largest Pareto ``k``.
    """
    source = as_data_source(data)
    fn = (lambda t, b: model.log_lik(t, b)) if site_log_lik is None else (lambda t, b: sum(site_log_lik(t, b).values()))
    mean = jax.tree_util.tree_map(  # summed in float64: a float32 sum over many draws drifts by posterior s.d.s
        lambda a: jnp.asarray(np.asarray(a).mean(axis=(0, 1), dtype=np.float64), np.asarray(a).dtype),
        result.kernel_positions,
    )
    approx = point_log_lik(fn, mean, source)
    n = source.n
    m = min(check_int(m, "m", 2), n)
    idata = log_likelihood_data(
        result,
        model,
        source,
        rows=m if m < n else None,
        draws=draws,
        key=key,
        site_log_lik=lambda t, b: {"obs": fn(t, b)},
    )
    rows = np.asarray(idata.log_likelihood["row"].values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz as az

        loo = az.loo(idata, pointwise=True, var_name="obs")
    exact = np.asarray(loo.loo_i.values, np.float64)
    diff = exact - approx[rows]
    total = approx.sum() + n / m * diff.sum()
    var_total = n**2 * (1 - m / n) * (diff.var(ddof=1) if m > 1 else 0.0) / m
    sum_sq = np.sum(approx**2) + n / m * np.sum(exact**2 - approx[rows] ** 2)
    spread = max(sum_sq / n - (total / n) ** 2, 0.0)
    return SubsampledLoo(
        elpd_loo=float(total),
        se=float(np.sqrt(n * spread)),
        subsampling_se=float(np.sqrt(var_total)),
        m=m,
        n_data=n,
        max_pareto_k=float(np.max(loo.pareto_k.values)),
        rows=rows,
    )
