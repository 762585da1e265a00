"""A Taylor proxy with an exact stratum: a few rows the proxy cannot see, evaluated in full at every test.

The difference a test needs splits over a fixed set ``S`` of rows (the stratum) and the rest ``R``:

    sum_i [l_i(theta') - l_i(theta)] = sum_{i in S} e_i + sum_{i in R} e_i + sum_i q_i,

with ``q_i`` the proxy's difference and ``e_i = l_i(theta') - l_i(theta) - q_i`` the residual
(``taylor.py``). The proxy's sum and the stratum's residuals are computed exactly (``known_sum``);
the minibatch is drawn without replacement from ``R`` only (``population``: the data seen through
``RowsExcept``, ``N - |S|`` rows), so every test's estimate ``(N - |S|) mean_batch e + known_sum``
is unbiased and its variance, finite-population correction included, is that of sampling from ``R``.
The rows are found by ``influence.influential_rows``; an empty stratum is the plain ``TaylorProxy``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.base import Proxy, minibatch_rows, no_row_draw, plain, uses_all_rows
from minibatch_mcmc.data.arrays import RowsExcept, as_data_source, take
from minibatch_mcmc.models.base import Model

PyTree = Any


class StratifiedProxy(NamedTuple):
    """A proxy (``TaylorProxy``, ``GLMMProxy``) whose rows ``rows`` (the exact stratum) are evaluated in full at every test."""

    proxy: Proxy
    """The proxy of every row (its sums run over all ``N`` rows)."""
    rows: np.ndarray
    """Sorted indices of the stratum rows (int32)."""
    stratum: PyTree
    """The stratum rows themselves, gathered once into memory."""
    model: Model
    """The model whose per-datum log-likelihood the stratum is evaluated with."""
    name: str = "taylor+stratum"
    row_draw = staticmethod(no_row_draw)

    def log_ratio(self, model: Model, current: PyTree, candidate: PyTree) -> Callable[[PyTree], jax.Array]:
        """The proxy's residuals (read by the test on rows of ``population`` only)."""
        return self.proxy.log_ratio(model, current, candidate)

    def known_sum(self, current: PyTree, candidate: PyTree) -> jax.Array:
        """The proxy's exact difference plus the stratum's residuals: the exact difference over the stratum."""
        resid = self.proxy.log_ratio(self.model, current, candidate)(self.stratum)
        return self.proxy.known_sum(current, candidate) + jnp.sum(resid)

    def population(self, data: PyTree) -> PyTree:
        """The rows outside the stratum, renumbered ``0 .. N - |S| - 1``."""
        return RowsExcept(data, jnp.asarray(self.rows, jnp.int32))

    def population_size(self, n_data: int) -> int:
        """``N - |S|``."""
        return n_data - int(self.rows.size)

    def residual_bounds(self, model: Model, current: PyTree, candidate: PyTree) -> None:
        """No bounds: those of the Taylor proxy inside, which has none."""
        del model, current, candidate

    def subtracts_rows(self) -> bool:
        """The proxy's: its residuals are the terms."""
        return self.proxy.subtracts_rows()

    def log_lik_sum(
        self, model: Model, key: jax.Array, data: PyTree, n_data: int, batch_size: int
    ) -> tuple[Callable[[PyTree], jax.Array], float]:
        """Exact full-data sum for ``batch_size=0``; else the proxy sum, the stratum's residuals, and
        ``(N - |S|) / b`` times a minibatch of residuals drawn from the rest (constants dropped)."""
        if uses_all_rows(batch_size, n_data):
            return plain().log_lik_sum(model, key, data, n_data, batch_size)
        n_rest = self.population_size(n_data)
        b = min(batch_size, n_rest)
        rest = self.proxy.minibatch_estimate(model, minibatch_rows(key, self.population(data), n_rest, b), n_rest, b)

        def estimate(theta: PyTree) -> jax.Array:
            return rest(theta) + jnp.sum(self.proxy.remainder(model, theta, self.stratum))

        return estimate, 1.0


def stratify(model: Model, data: Any, proxy: Proxy, rows: Any) -> Proxy | StratifiedProxy:
    """``proxy`` with the rows ``rows`` made an exact stratum (gathered once, also from an out-of-core source);
    the plain ``proxy`` when ``rows`` is empty, so a model without such rows samples exactly as before.

    Args:
        model: The ``Model`` whose ``log_lik`` the stratum's rows are evaluated with, exactly, at every test.
        data: The rows (arrays or a ``DataSource``).
        proxy: The Taylor proxy used for every other row.
        rows: Indices of the stratum's rows (e.g. ``influence.influential_rows``), fewer than ``N``.
    """
    rows = np.unique(np.asarray(rows, np.int64)).astype(np.int32)
    if rows.size == 0:
        return proxy
    source = as_data_source(data)
    if rows[0] < 0 or rows[-1] >= source.n:
        raise ValueError(f"stratum rows must lie in [0, {source.n}); got {rows[0]} .. {rows[-1]}")
    if rows.size >= source.n:
        raise ValueError(f"a stratum of {rows.size} rows leaves no row of the N={source.n} for the minibatch")
    stratum = jax.tree_util.tree_map(jnp.asarray, jax.device_get(take(source.arrays(), jnp.asarray(rows))))
    return StratifiedProxy(proxy=proxy, rows=rows, stratum=stratum, model=model)
