"""The lean warm-up's one streamed pass at a point ``c``: the log-likelihood sums with their gradient and Hessian (what
Newton needs, and exactly the Taylor proxy's sums at ``c``), the log prior's parts at ``c``, and with a bulk level the
largest deviations of the rows' proxy residuals at the influence probes (``control_variates.influence``). One jitted
function serves every pass.

What one chunk costs. A pass without a bulk level skips the probes (``lax.cond``: one compilation, only the branch taken
runs), and one whose far points are its centre skips them too. A model that declares a GLM family (``Model.glm``, data
``{"x", "y"}`` and its ``"offset"``) has its gradient and Hessian sums as ``X' (w f')`` and ``X' diag(w f'') X`` from the
family's derivatives in ``eta`` (one matmul a chunk instead of autodiff's ``d`` Hessian-vector products) and its probe
residuals as the family's remainder in ``delta eta = x . (p - c)`` (``glm_families.remainder_fn``: accurate to its own
rounding, where ``l_i(p) - l_i(c) - q_i`` carried float32 cancellation), by its series alone (no transcendental per
probe) where every ``|delta eta|`` of the chunk is below ``glm_families.SERIES_LIMIT``, as at large ``N``. Each row's
deviation ``max_p |e_i(p) - bulk(p)|`` (less its rounding floor, ``influence.term_floors``: 0 for both proxies here, whose
residuals are accurate relative to themselves) is reduced in the jitted function, so the host receives one number per row
instead of one per probe. On the d = 10 logistic regression of ``benchmarks/tall.py`` in 16,384-row chunks
(the fastest of 2^13 to 2^16 with the probes; CPU seconds on the loaded 2-core machine): 430 ns a row with the probes
before, 200 after, and 66 without them (a plain numpy log-likelihood + gradient pass: 110); the logistic sums are the
same floats as autodiff's. ``stream`` dispatches each chunk before it waits for the one before (JAX runs it while the
host reads the next rows), and adds the chunks' sums in row order, so the floats are those of one chunk at a time.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.control_variates.glm import GLMProxy
from minibatch_mcmc.control_variates.glm_families import SERIES_LIMIT, eta_derivatives, remainder_fn, series_remainder
from minibatch_mcmc.control_variates.influence import probe_residuals, term_floors
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
    full-data log-likelihood's rise from the centre to each, ``sum_i (l_i(far) - l_i(c))`` (read in the same pass):
    ``rising_direction``'s confirmation, without a pass of its own where the final direction is the same (None: no
    previous Hessian)."""

    @property
    def finite(self) -> bool:
        """Whether value, gradient and Hessian are all finite."""
        return bool(np.isfinite(self.value) and np.all(np.isfinite(self.grad)) and np.all(np.isfinite(self.hessian)))


def glm_rows(model: Model, rows: PyTree, d: int) -> bool:
    """Whether ``rows`` are a declared GLM's plain data (``{"x": (b, d), "y"}`` and its ``"offset"``): its sums may come
    from the family's derivatives in ``eta`` (``Model.glm``'s contract: ``l_i = f(x_i . theta + offset_i; y_i)``)."""
    spec = model.glm
    if spec is None or not isinstance(rows, dict):
        return False
    keys = {"x", "y"} | ({"offset"} if spec.offset else set())
    return set(rows) == keys and rows["x"].ndim == 2 and rows["x"].shape[1] == d


def glm_sums(model: Model, rows: dict, weight: jax.Array, c: jax.Array, order: int, unravel: Callable):
    """A GLM chunk's sums of ``l_i``, its gradient and Hessian at ``c`` (``X' (w f')``, ``X' diag(w f'') X``), with what
    its probes and far points need: ``(sums, probe residual function, rounding floors, l_i(c))`` (the floors
    ``influence.term_floors`` gives the GLM proxy, whose remainders these are)."""
    spec = model.glm
    x = rows["x"].astype(c.dtype)
    eta0 = x @ c
    eta = eta0 + rows["offset"].astype(c.dtype) if spec.offset else eta0
    y = rows["y"].astype(c.dtype)
    f1, f2 = eta_derivatives(spec.family, spec.precision, spec.nu)(eta, y)
    values = model.log_lik(unravel(c), rows)
    sums = {"value": jnp.sum(weight * values), "grad": (weight * f1) @ x, "hess": x.T @ (x * (weight * f2)[:, None])}
    full = remainder_fn(spec.family, spec.precision, spec.nu)
    series = series_remainder(spec.family)

    def residuals(points: jax.Array) -> jax.Array:
        delta = (points - c[None]) @ x.T  # (P, b)
        if series is None:
            return full(eta[None], delta, y[None], order)
        small = jnp.all(jnp.abs(delta) < SERIES_LIMIT)
        return jax.lax.cond(
            small, lambda: series(eta[None], delta, y[None], order), lambda: full(eta[None], delta, y[None], order)
        )

    return sums, residuals, term_floors(GLMProxy, model, c, unravel, rows, c.dtype), values


def autodiff_sums(model: Model, rows: PyTree, weight: jax.Array, c: jax.Array, order: int, unravel: Callable):
    """Any model's chunk sums of ``l_i``, its gradient and Hessian at ``c`` by autodiff, with what its probes and far points
    need (``glm_sums``'s four)."""

    def chunk_sum(x: jax.Array) -> jax.Array:
        return jnp.sum(weight * model.log_lik(unravel(x), rows))

    value, grad = jax.value_and_grad(chunk_sum)(c)
    sums = {"value": value, "grad": grad, "hess": jax.hessian(chunk_sum)(c)}
    proxy = TaylorProxy(unravel(c), order, grad, None, 0)  # only the centre and order are used
    residuals = lambda points: probe_residuals(model, proxy, points, rows)  # noqa: E731
    return sums, residuals, term_floors(proxy, model, c, unravel, rows, c.dtype), model.log_lik(unravel(c), rows)


def packed(sums: dict) -> jax.Array:
    """A chunk's sums as one vector (one transfer a chunk): value, gradient, Hessian (row-major), the two far rises."""
    return jnp.concatenate([sums["value"][None], sums["grad"], sums["hess"].reshape(-1), sums["far"]])


def unpacked(flat: np.ndarray, d: int) -> dict:
    """``packed``'s sums by name."""
    return {
        "value": flat[0],
        "grad": flat[1 : 1 + d],
        "hess": flat[1 + d : 1 + d + d * d].reshape(d, d),
        "far": flat[-2:],
    }


class ChunkPass(NamedTuple):
    """The jitted chunk function ``(rows, weight, c, points, far, bulk, probes, far_on) -> (packed sums, (residuals at
    points, each row's deviation from ``bulk`` less its rounding floor), the log prior with its gradient and Hessian at
    c)``; called, the same with the sums by name."""

    jitted: Callable

    def __call__(self, rows, weight, c, points, far, bulk=None, probes=True, far_on=True) -> tuple:
        """The sums of l_i, its gradient and Hessian at ``c`` and its rises to the two ``far`` points (by name), the
        probes' residuals and deviations (zeros with ``probes=False``), the log prior's parts."""
        level = jnp.zeros((points.shape[0], 1), c.dtype) if bulk is None else jnp.asarray(bulk, c.dtype)
        flat, probe, prior = self.jitted(rows, weight, c, points, far, level, jnp.asarray(probes), jnp.asarray(far_on))
        return unpacked(flat, c.shape[0]), probe, prior


def chunk_pass(model: Model, unravel: Callable, order: int, head: int | None = None) -> ChunkPass:
    """The chunk function of one pass, jitted once: ``probes=False`` skips the residuals (zeros), ``far_on=False`` the far
    points (rises of 0). A far point's rise is ``sum_i w_i (l_i(far) - l_i(c))``, each row's difference taken before the
    sum: the difference of two float32 sums of ``l_i`` carries their rounding, which on a log-likelihood of -1.1e10
    (a Gaussian model on Cauchy noise, 1e5 rows) reached 2.2e4 nats, ten times the true fall at 64 s.d.s; ``l_i(c)`` is
    the sums' own (one evaluation of ``l_i`` fewer per row). The prior, read from one chunk per pass, costs no
    compilation of its own. ``head``: the residuals handed back are the first ``head`` rows' only (the bulk level's rows;
    each row's deviation is reduced inside), so a streamed chunk writes no ``(P, rows)`` array out; None: every row's."""

    def log_prior(x: jax.Array) -> jax.Array:
        return jnp.asarray(model.log_prior(unravel(x)), x.dtype)

    def run(rows: PyTree, weight, c, points, far, bulk, probes, far_on):
        glm = glm_rows(model, rows, c.shape[0])
        sums, residuals, floor, here = (glm_sums if glm else autodiff_sums)(model, rows, weight, c, order, unravel)

        def rises() -> jax.Array:
            return jax.vmap(lambda x: jnp.sum(weight * (model.log_lik(unravel(x), rows) - here)))(far)

        sums["far"] = jax.lax.cond(far_on, rises, lambda: jnp.zeros(2, sums["value"].dtype))

        def probed() -> tuple[jax.Array, jax.Array]:
            e = residuals(points).astype(c.dtype)
            dev = jnp.maximum(jnp.max(jnp.abs(e - bulk), axis=0) - floor, 0.0)
            return e[:, :shown], jnp.where(jnp.isfinite(dev), dev, jnp.inf)

        size = weight.shape[0]
        shown = size if head is None else min(head, size)
        skipped = lambda: (jnp.zeros((points.shape[0], shown), c.dtype), jnp.zeros(size, c.dtype))  # noqa: E731
        probe = jax.lax.cond(probes, probed, skipped)
        prior = (log_prior(c), jax.grad(log_prior)(c), jax.hessian(log_prior)(c))
        return packed(sums), probe, prior

    return ChunkPass(jax.jit(run))


def stream(
    part: ChunkPass,
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

    d = int(c.shape[0])
    level = jnp.zeros((points.shape[0], 1), c.dtype) if bulk is None else jnp.asarray(bulk, c.dtype)
    probes = jnp.asarray(bulk is not None)
    far_on = jnp.asarray(not np.array_equal(np.asarray(far), np.broadcast_to(np.asarray(c), np.shape(far))))

    def added(acc: tuple, out: tuple, ch: Chunk) -> tuple:
        """``acc`` (sums, top) with one chunk's jitted ``out`` added: where the host waits for that chunk."""
        sums, top = acc
        piece = np.asarray(out[0], np.float64)
        sums = piece if sums is None else sums + piece
        if bulk is not None:  # each row's deviation less its floor, reduced in the jitted pass: divided by K here
            new = ch.first - ch.start
            top = add_deviations(top, np.asarray(out[1][1], np.float64)[None, new:], 0.0, ch.first, keep, temperature)
        return sums, top

    def fold(acc: tuple, ch: Chunk) -> tuple:
        """Dispatch this chunk, then add the one before (its result waited for while this one's rows were read)."""
        sums, top, pending = acc
        size = jax.tree_util.tree_leaves(ch.rows)[0].shape[0]
        out = part.jitted(ch.rows, ch.fresh(size).astype(np.float32), c, points, far, level, probes, far_on)
        return (*added((sums, top), *pending), (out, ch)) if pending is not None else (sums, top, (out, ch))

    def final(acc: tuple) -> tuple:
        sums, top = added(acc[:2], *acc[2])
        return sums, padded_top(top, keep), tuple(np.asarray(a, np.float64) for a in acc[2][0][2])

    def merge(a: tuple, b: tuple) -> tuple:
        return a[0] + b[0], merge_tops(a[1], b[1], keep), a[2]

    empty = (np.zeros(0), np.zeros(0, np.int64))
    flat, top, prior = host_reduce(fold, (None, empty, None), arrays, n, chunk, merge=merge, final=final)
    sums = unpacked(flat, d)
    sums["prior"] = prior
    return sums, (unpadded(top) if bulk is not None else None)
