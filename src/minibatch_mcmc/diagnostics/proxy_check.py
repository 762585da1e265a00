"""A check after sampling that the proxy-based run can fail: Pareto k-hat of full-data / proxy importance ratios.

A minibatch test with a control variate trusts the proxy wherever its minibatch shows no residual.
On a thinned set of draws the check computes, with one streamed pass each, the log ratio of the
full-data log posterior to the proxy's, ``log w(theta) = sum_{i in R} e_i(c, theta) / K`` (``e_i`` the
proxy's residual from its centre ``c``; ``R`` the rows the minibatch is drawn from, so rows of an exact
stratum are part of the proxy and drop out). Where the proxy is right these ratios are nearly constant;
where the chain may have sampled the proxy instead of the posterior their upper tail is heavy. PSIS's
Pareto ``k-hat`` (ArviZ ``psislw``) measures that tail; the check warns above Vehtari et al.'s
sample-size threshold ``min(1 - 1 / log10(S), 0.7)`` for ``S`` draws.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int
from minibatch_mcmc.control_variates.base import Estimator, plain
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.data.passes import full_data_sum
from minibatch_mcmc.models.base import Model

PyTree = Any

EQUAL_WEIGHTS = 0.05
"""Spread (max - min) of the log ratios, in nats, up to which the weights count as equal: every weight is then
within 5% of every other, no reweighting can move an estimate by more, and k-hat (of what is then rounding
noise) is reported as -inf."""


class ProxyCheck(NamedTuple):
    """What the check measured."""

    k_hat: float
    """Pareto k-hat of the importance ratios (``-inf`` when they are all equal)."""
    threshold: float
    """Above it the check warns: ``min(1 - 1 / log10(S), 0.7)``."""
    num_draws: int
    """Draws checked (``S``)."""
    log_ratio_sd: float
    """Standard deviation of ``log w`` over the checked draws (nats)."""
    log_ratio_range: float
    """``max - min`` of ``log w`` over the checked draws (nats)."""
    data_used: int
    """Row evaluations: every row at every checked draw (all draws in one streamed pass)."""
    seconds: float
    """Wall time of the check."""

    @property
    def ok(self) -> bool:
        """Whether ``k_hat`` is at most the threshold (``-inf`` when the weights are equal to ``EQUAL_WEIGHTS``)."""
        return bool(self.k_hat <= self.threshold)


def pareto_threshold(num_draws: int) -> float:
    """``min(1 - 1 / log10(S), 0.7)``: the largest k-hat at which ``S`` importance draws are still reliable."""
    return min(1.0 - 1.0 / math.log10(num_draws), 0.7)


def thinned_draws(positions: PyTree, num_draws: int) -> PyTree:
    """``num_draws`` draws evenly spaced over the second half of every chain (leading axes: chains, samples)."""
    leaves = jax.tree_util.tree_leaves(positions)
    chains, samples = leaves[0].shape[:2]
    late = [(c, s) for c in range(chains) for s in range(samples // 2, samples)]
    pick = np.unique(np.linspace(0, len(late) - 1, min(num_draws, len(late))).round().astype(int))
    ci, si = np.asarray([late[p][0] for p in pick]), np.asarray([late[p][1] for p in pick])
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[ci, si], positions)


def pareto_k(log_weights: np.ndarray) -> float:
    """ArviZ's PSIS k-hat of ``log_weights`` (independent draws), ``-inf`` if they are equal to ``EQUAL_WEIGHTS``."""
    lw = np.asarray(log_weights, np.float64)
    if np.ptp(lw) <= EQUAL_WEIGHTS:
        return float("-inf")
    _, k = az.psislw(lw - lw.max(), reff=1.0)
    return float(k)


def check_proxy(
    model: Model,
    data: Any,
    estimator: Estimator,
    centre: PyTree,
    positions: PyTree,
    *,
    num_draws: int = 100,
    temperature: float = 1.0,
    warn: bool = True,
) -> ProxyCheck:
    """Pareto k-hat of ``p(theta | all data) / proxy posterior`` on ``num_draws`` thinned draws (module docstring).

    ``estimator`` is the control variate the run used (a ``TaylorProxy`` or a ``StratifiedProxy``) and
    ``centre`` its expansion point; ``positions`` the run's draws (leading axes: chains, samples). Warns with
    the measured k-hat when it exceeds the threshold.
    """
    num_draws = check_int(num_draws, "num_draws", 5, why="Pareto smoothing needs a tail of several draws")
    t0 = time.perf_counter()
    source = as_data_source(data)
    arrays, n = source.arrays(), source.n

    def log_ratio(theta: PyTree) -> jax.Array:
        # sum_all [l_i(theta) - l_i(c)] - known_sum = the residuals of the rows the minibatch was drawn from,
        # with two log-likelihoods a row instead of the residual's nested derivative
        full = full_data_sum(plain().log_ratio(model, centre, theta), arrays, n)[0]
        return (full - estimator.known_sum(centre, theta)) / temperature

    draws = thinned_draws(positions, num_draws)
    count = int(jax.tree_util.tree_leaves(draws)[0].shape[0])
    # every checked draw in the same streamed pass: one read of each chunk serves all of them
    lw = np.asarray(jax.jit(jax.vmap(log_ratio))(jax.tree_util.tree_map(jnp.asarray, draws)), np.float64)
    if not np.all(np.isfinite(lw)):
        raise ValueError(f"the full-data log likelihood is not finite at {int(np.sum(~np.isfinite(lw)))} of {count} checked draws")
    k_hat = pareto_k(lw)
    out = ProxyCheck(k_hat, pareto_threshold(count), count, float(np.std(lw)), float(np.ptp(lw)), count * n,
                     time.perf_counter() - t0)
    if warn and not out.ok:
        warnings.warn(
            f"the draws may follow the Taylor proxy rather than the posterior: Pareto k-hat of the full-data / proxy "
            f"importance ratios is {k_hat:.2f} > {out.threshold:.2f} on {count} draws (log-ratio s.d. {out.log_ratio_sd:.3g} "
            "nats), so the proxy is wrong where the chains went and the minibatch test may not have seen it; check with an "
            "exact test (BarkerTest, MetropolisTest) or look for rows the proxy cannot see",
            stacklevel=2,
        )
    return out
