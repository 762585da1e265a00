"""The lean warm-up's one streamed pass at a point ``c``: the log-likelihood sums with their gradient and Hessian (what
Newton needs, and exactly the Taylor proxy's sums at ``c``), the log prior's parts at ``c``, and with a bulk level the
largest deviations of the rows' proxy residuals at the influence probes (``control_variates.influence``). One jitted
function serves every pass."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.influence import probe_residuals, rounding_floor, term_scale
from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.control_variates.top_deviations import add_deviations, merge_tops, padded_top, unpadded
from minibatch_mcmc.data.passes import Chunk, host_reduce
from minibatch_mcmc.models.base import Model

PyTree = Any


class PassOut(NamedTuple):
    """One streamed pass at a point: the tempered log posterior, its gradient and Hessian, and the raw sums."""

    value: float
    grad: np.ndarray
    hessian: np.ndarray
    sums: dict
    top: tuple[np.ndarray, np.ndarray] | None
    steps: np.ndarray | None = None
    """The influence probes' steps the pass used (None: none)."""
    far: tuple[np.ndarray, np.ndarray] | None = None
    """The points ``RISE_SDS[-1]`` Laplace s.d.s out both ways along the previous pass's least-curved direction and the
    full-data log-likelihood sums there (read in the same pass): ``rising_direction``'s confirmation, without a pass of its
    own where the final direction is the same (None: no previous Hessian)."""

    @property
    def finite(self) -> bool:
        """Whether value, gradient and Hessian are all finite."""
        return bool(np.isfinite(self.value) and np.all(np.isfinite(self.grad)) and np.all(np.isfinite(self.hessian)))


def chunk_pass(model: Model, unravel: Callable, order: int) -> Callable:
    """Jitted ``(rows, weight, c, points, far) -> (sums of l_i, its gradient and Hessian at c and its values at the two
    ``far`` points, residuals at points, the log prior with its gradient and Hessian at c)``: the prior, read from one chunk per pass, costs no compilation of its own."""

    def log_prior(x: jax.Array) -> jax.Array:
        return jnp.asarray(model.log_prior(unravel(x)), x.dtype)

    def part(rows: PyTree, weight: jax.Array, c: jax.Array, points: jax.Array, far: jax.Array):
        def chunk_sum(x: jax.Array) -> jax.Array:
            return jnp.sum(weight * model.log_lik(unravel(x), rows))

        value, grad = jax.value_and_grad(chunk_sum)(c)
        sums = {"value": value, "grad": grad, "hess": jax.hessian(chunk_sum)(c), "far": jax.vmap(chunk_sum)(far)}
        proxy = TaylorProxy(unravel(c), order, grad, None, 0)  # only the centre and order are used
        prior = (log_prior(c), jax.grad(log_prior)(c), jax.hessian(log_prior)(c))
        return sums, (probe_residuals(model, proxy, points, rows), term_scale(model, c, unravel, rows)), prior

    return jax.jit(part)


def stream(
    part: Callable,
    arrays: PyTree,
    n: int,
    chunk: int,
    c: jax.Array,
    points: jax.Array,
    bulk: np.ndarray | None,
    keep: int,
    temperature: float,
    far: jax.Array,
) -> tuple[dict, tuple | None]:
    """Float64 sums over all rows (and the log prior's parts at ``c``, key ``"prior"``), and (with a ``bulk`` level) the largest
    deviations of the rows' residuals: one ``host_reduce`` pass (over several processes, one all-gather of each one's
    sums and largest deviations)."""

    def fold(acc: tuple, ch: Chunk) -> tuple:
        sums, top, _ = acc
        size = jax.tree_util.tree_leaves(ch.rows)[0].shape[0]
        piece, resid, prior = part(ch.rows, jnp.asarray(ch.fresh(size), jnp.float32), c, points, far)
        piece = {k: np.asarray(v, np.float64) for k, v in jax.device_get(piece).items()}
        sums = piece if sums is None else {k: sums[k] + piece[k] for k in sums}
        if bulk is not None:
            e, scale = resid
            new = ch.first - ch.start
            top = add_deviations(
                top,
                np.asarray(e, np.float64)[:, new:],
                bulk,
                ch.first,
                keep,
                temperature,
                rounding_floor(scale, temperature)[new:],
            )
        return sums, top, tuple(np.asarray(a, np.float64) for a in prior)

    def final(acc: tuple) -> tuple:
        return acc[0], padded_top(acc[1], keep), acc[2]

    def merge(a: tuple, b: tuple) -> tuple:
        return {k: a[0][k] + b[0][k] for k in a[0]}, merge_tops(a[1], b[1], keep), a[2]

    empty = (np.zeros(0), np.zeros(0, np.int64))
    sums, top, prior = host_reduce(fold, (None, empty, None), arrays, n, chunk, merge=merge, final=final)
    sums["prior"] = prior
    return sums, (unpadded(top) if bulk is not None else None)
