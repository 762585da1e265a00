"""The estimator of the log-likelihood difference: the one place a control variate plugs into the kernel.

An acceptance test sees, for a candidate ``theta'`` against ``theta``, per-datum terms ``log_ratio_i``
and a data-free ``known_sum`` with ``sum_i log p(x_i|theta') - log p(x_i|theta) = sum_i log_ratio_i
+ known_sum`` (``acceptance.base.Statistics``). The plain estimator gives the per-datum ratios and
``known_sum = 0``; a control variate (``taylor.py``) gives the residuals after a proxy and the proxy's
exact sum, so a minibatch of residuals estimates the same ``Delta`` with far less variance. The
same estimator also supplies the log-likelihood sum whose gradient drives gradient proposals.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import ResidualBounds
from minibatch_mcmc.data.arrays import take
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.data.passes import full_data_sum
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.shared_term import row_difference, shared_difference

PyTree = Any


class Estimator(Protocol):
    """How the kernel turns ``(theta, theta')`` into per-datum terms and a data-free sum, and estimates gradients."""

    name: str
    """Name recorded with the results."""

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """Per-datum terms ``log_ratio_i`` (un-tempered) for any batch of rows."""
        ...

    def known_sum(self, current: PyTree, candidate: PyTree) -> jax.Array | float:
        """Data-free part of ``sum_i log p(x_i|theta') - log p(x_i|theta)`` (0 for the plain estimator)."""
        ...

    def population(self, data: PyTree) -> PyTree:
        """The rows a minibatch test draws from (all of ``data``; a stratified estimator leaves its exact stratum out)."""
        ...

    def population_size(self, n_data: int) -> int:
        """Number of rows in ``population(data)`` for data of ``n_data`` rows."""

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> ResidualBounds | None:
        """Bounds on every ``|log_ratio_i|`` and their data-free sum, for bound-based tests (None when it has none)."""
        ...

    def row_draw(self) -> Callable[[jax.Array, int], jax.Array] | None:
        """The bounds' ``draw``, the same for every pair ``(theta, theta')`` (so a step's rows can be named before it
        runs); None when rows are drawn uniformly or there are no bounds."""
        ...

    def log_lik_sum(
        self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int
    ) -> tuple[Callable[[PyTree], jax.Array], float]:
        """``(f, scale)`` with ``scale * f(theta)`` an estimate of ``sum_i log p(x_i|theta)`` from one minibatch
        of ``batch_size`` rows drawn with ``key`` (``0``: all rows, exact); its gradient drives gradient proposals."""
        ...


class Proxy(Estimator, Protocol):
    """A control variate built around a centre: ``TaylorProxy`` (dense, in ``theta``) or ``GLMMProxy`` (in predictor space).

    What the proposals on the proxy posterior (``proposals.py``, ``proxy_moves.py``), the exact stratum
    (``stratified.py``, ``influence.py``) and the warm-up read of a proxy beyond the ``Estimator`` methods."""

    centre: PyTree
    """The expansion point ``c``."""
    order: int
    """1 (gradient only) or 2."""
    setup_data: int
    """Rows read to build it."""

    def flat_centre(self) -> tuple[jax.Array, Callable[[jax.Array], PyTree]]:
        """The centre as a flat vector and the function back to a parameter."""
        ...

    def proxy_sum(self, theta: PyTree) -> jax.Array:
        """``sum_i l~_i(theta)`` up to a constant, reading no data."""
        ...

    def remainder(self, model: Model, theta: PyTree, rows: PyTree) -> jax.Array:
        """``l_i(theta) - l~_i(theta)`` for each of ``rows``, up to a per-row constant."""
        ...

    def minibatch_estimate(
        self, model: Model, batch: PyTree, n_data: int, batch_size: int
    ) -> Callable[[PyTree], jax.Array]:
        """``theta -> proxy_sum(theta) + (N / b) sum_batch remainder`` on given rows."""
        ...


def minibatch_rows(key: jax.Array, data: PyTree, n_data: int, batch_size: int) -> PyTree:
    """``batch_size`` distinct rows drawn without replacement from ``key``, independently of ``theta``."""
    idx, _ = chunk_indices(key, jnp.zeros((), jnp.int32), batch_size, n_data)
    return take(data, idx)


def uses_all_rows(batch_size: int, n_data: int) -> bool:
    """Whether a gradient minibatch of ``batch_size`` means the full data (``0`` or ``>= N``)."""
    return batch_size == 0 or batch_size >= n_data


def no_row_draw() -> None:
    """The ``row_draw`` of an estimator whose bounds draw no rows (or that has no bounds)."""
    return None


class PlainDifference(NamedTuple):
    """The per-datum log-likelihood ratios themselves (no control variate)."""

    name: str = "plain"
    row_draw = staticmethod(no_row_draw)

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """``log p(x_i|theta') - log p(x_i|theta)`` row by row, in float32 accurate relative to each difference
        (``models.shared_term.row_difference``; a declared shared term's difference computed once)."""
        if model.shared is not None:
            rows, shared = model.shared.rows, shared_difference(model.shared, current, candidate)

            def split_ratio(batch: PyTree) -> jax.Array:
                return row_difference(lambda theta: rows(theta, batch), current, candidate) + shared

            return split_ratio

        def ratio(batch: PyTree) -> jax.Array:
            return row_difference(lambda theta: model.log_lik(theta, batch), current, candidate)

        return ratio

    def known_sum(self, current: PyTree, candidate: PyTree) -> float:
        """Nothing is known without the data."""
        del current, candidate
        return 0.0

    def population(self, data: PyTree) -> PyTree:
        """Every row."""
        return data

    def population_size(self, n_data: int) -> int:
        """``N``."""
        return n_data

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> None:
        """No bounds: the plain ratios are unbounded in general."""
        del model, current, candidate

    def log_lik_sum(
        self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int
    ) -> tuple[Callable[[PyTree], jax.Array], float]:
        """The full-data sum (streamed) or ``N / b`` times a minibatch sum."""
        if uses_all_rows(batch_size, n_data):

            def full(theta: PyTree) -> jax.Array:
                # streamed in chunks, so an out-of-core source works too
                return full_data_sum(lambda rows: model.log_lik(theta, rows), data, n_data)[0]

            return full, 1.0
        batch = minibatch_rows(key, data, n_data, batch_size)

        def partial(theta: PyTree) -> jax.Array:
            return jnp.sum(model.log_lik(theta, batch))

        return partial, n_data / batch_size


def plain() -> PlainDifference:
    """The plain estimator: per-datum ratios, no control variate (the default)."""
    return PlainDifference()
