"""Rows the Taylor proxy cannot see: per-datum terms far from their quadratic proxy at posterior-scale moves.

One streamed pass evaluates every row's residual ``e_i(p) = l_i(p) - l~_i(p)`` (``l~_i`` the proxy of
``l_i``, exact at the centre ``c``) at a few probe points ``p = c +- k L u``: ``L`` the Laplace
covariance's Cholesky factor, ``u`` the unit vectors (``d <= MAX_DIRECTIONS``) or as many random unit
vectors, ``k`` in ``PROBE_SCALES`` Laplace standard deviations. A row's deviation ``a_i`` is its largest
``|e_i(p) - bulk(p)|``, ``bulk(p)`` the median residual over a chunk of rows drawn at random (a level shared by
most rows is what any minibatch sees). A minibatch of ``m`` rows out of ``N`` misses any given set of
``W = ceil(N / m)`` rows in more than a third of its steps, and then its estimate of the difference is
off by their summed residuals. So the stratum is the smallest set of largest deviations such that the
next ``W`` deviations sum to at most ``tolerance`` nats: what is left blind moves ``Delta`` by less than
that. Rows past ``max_rows`` are left to the minibatch, with a warning naming them and the blind error left.

Where the proxy's residuals are float32 subtractions of values of the size of ``l_i`` (``Estimator.subtracts_rows``: the
GLMM proxy's), a deviation within float32 resolution of the row's terms is rounding, not a finding: each row's deviation
is lowered by ``ROUNDING_ULPS`` units of its terms' resolution (``term_floors``). Without that, at N = 5e7 a logistic
regression's residuals of plain float32 subtractions (7e-7 nats a row) summed over a blind window of 10^6 rows to 0.7
nats, past the 0.1 tolerance, and built a useless 1000-row stratum with a warning that the proxy "does not pay off".
The Taylor and GLM proxies' residuals are accurate relative to themselves (each row's difference integrated along the
move, ``models.shared_term.row_difference``; the GLM's from ``delta eta``), so theirs are read as they are: a floor there
would lower true deviations (up to ``ROUNDING_ULPS eps |l_i|`` a row, over a blind window of ``N / m`` rows).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.compiling import FAST_COMPILE, ONE_OFF_WORK, compile_options
from minibatch_mcmc.control_variates.base import Estimator, Proxy
from minibatch_mcmc.control_variates.top_deviations import (
    add_deviations,
    blind_errors,
    merge_tops,
    padded_top,
    stratum_size,
    unpadded,
)
from minibatch_mcmc.data.arrays import as_data_source, split_copies, take
from minibatch_mcmc.data.indexing import KEYED_ROWS, permuted_index
from minibatch_mcmc.data.passes import DEFAULT_CHUNK, Chunk, host_reduce
from minibatch_mcmc.data.shards import local_span
from minibatch_mcmc.models.base import Model

PyTree = Any

PROBE_SCALES = (3.0,)
"""Probe distances from the centre, in Laplace standard deviations along each direction (both signs): 3, where a
Gaussian posterior keeps 99.7% of each marginal (widened further once a stratum shows the posterior is wider)."""
MAX_DIRECTIONS = 8
"""Probe directions: the ``d`` Laplace axes up to this many parameters, else this many random unit directions."""
ROUNDING_ULPS = 8.0
"""Units of a row's float32 resolution ``eps * (|l_i(c)| + |grad l_i(c) . c|)`` (``term_scale``) below which its
residual is rounding: on a d = 10 logistic regression probed at the posterior scale of N = 5e7 (where the true residuals
are ~1e-9 nats) the deviations were at most 3.2 such units over 2e5 rows; at N = 2e5 the true ones reach 95."""
WINDOW_KEPT = 1 << 14
"""Largest blind window kept exactly; past it the window's sum is bounded by its smallest kept deviation."""
CANDIDATE_WIDEN = 1.5
"""Largest widening of the probes (over the first round's, along any direction) at which a later round re-ranks only the
previous round's kept rows (the stratum's cap plus a blind window) instead of streaming all ``N`` again: a row below the
smallest kept deviation at the narrower probes would have to outgrow the kept ones by more than their whole spread to
enter the stratum (a cubic residual grows by at most ``1.5^3 = 3.4`` for every row alike). On the rare-feature logistic
of ``benchmarks/heavy_tails.py`` (N = 3e5, widening 1.23) it found the same 27 rows as the full pass, for 0.02 passes
instead of 1."""


class Influence(NamedTuple):
    """The rows the proxy cannot see, and what finding them measured."""

    rows: np.ndarray
    """Indices of the exact stratum (sorted, int32; empty on a model the proxy sees whole)."""
    deviation: np.ndarray
    """Their deviations ``a_i`` (nats), in the order of ``rows``."""
    blind_error: float
    """Summed deviations of the ``W`` largest rows left to the minibatch (nats): at most ``tolerance`` unless capped."""
    window: int
    """``W = ceil(N / m)``: rows a minibatch of ``m`` misses together in more than a third of its steps."""
    passes: int
    """Streamed passes made (one, plus one per widening of the probes)."""
    data_used: int
    """Rows read (one pass plus the bulk sample)."""
    seconds: float
    """Wall time of the pass."""


def probe_directions(factor: np.ndarray, key: jax.Array | None) -> np.ndarray:
    """Flat directions ``L u`` (shape ``(directions, d)``): ``u`` the axes, or random unit vectors past ``MAX_DIRECTIONS``."""
    d = factor.shape[0]
    if d <= MAX_DIRECTIONS:
        u = np.eye(d)
    else:
        z = np.asarray(jax.random.normal(key, (d, MAX_DIRECTIONS)), np.float64)
        u = z / np.linalg.norm(z, axis=0)
    return (np.asarray(factor, np.float64) @ u).T


def probe_points(centre: jax.Array, steps: np.ndarray) -> jax.Array:
    """Flat probe points ``c +- k step`` for every step and every ``k`` in ``PROBE_SCALES`` (shape ``(P, d)``)."""
    moves = [s * k * steps for k in PROBE_SCALES for s in (1.0, -1.0)]
    return jnp.asarray(np.asarray(centre, np.float64) + np.concatenate(moves), centre.dtype)


def probe_residuals(model: Model, proxy: Proxy, points: jax.Array, rows: PyTree) -> jax.Array:
    """``e_i(p)`` for every probe ``p`` and row (shape ``(P, rows)``): the proxy's residual from the centre (traceable)."""
    c, unravel = proxy.flat_centre()
    return jax.vmap(lambda p: proxy.log_ratio(model, unravel(c), unravel(p))(rows))(points)


def term_scale(model: Model, centre: jax.Array, unravel: Any, rows: PyTree) -> jax.Array:
    """``|l_i(c)| + |grad l_i(c) . c|`` per row: the size of the terms whose float32 rounding a residual carries (the value,
    and its change under a relative rounding of the parameters), traceable."""
    value, slope = jax.jvp(lambda x: model.log_lik(unravel(x), rows), (centre,), (centre,))
    return jnp.abs(value) + jnp.abs(slope)


def without_rounding(
    values: jax.Array, estimator: Estimator, model: Model, centre: jax.Array, unravel: Any, rows: PyTree
) -> jax.Array:
    """``estimator``'s terms ``values`` per row as the check and the batch sizing count them, traceable: where they are
    subtractions of values of the size of ``l_i`` (``Estimator.subtracts_rows``) each one within ``ROUNDING_ULPS`` units
    of its row's float32 resolution (``term_scale``) set to 0 (rows of an importance-sampled population: a term
    ``r_i / n_i`` against its row's floor over ``n_i``); else as read, their rounding a few ``eps`` of themselves."""
    return jnp.where(jnp.abs(values) <= term_floors(estimator, model, centre, unravel, rows, values.dtype), 0.0, values)


def term_floors(
    estimator: Estimator, model: Model, centre: jax.Array, unravel: Any, rows: PyTree, dtype: Any
) -> jax.Array:
    """Per row, the ``|term|`` at or below which ``without_rounding`` sets ``estimator``'s term to 0 (0 where it counts
    them as read), traceable (computed once for rows whose terms are taken at several moves)."""
    if estimator.subtracts_rows():
        return rounding_floors(model, centre, unravel, rows, dtype)
    return jnp.zeros(jax.tree_util.tree_leaves(split_copies(rows)[0])[0].shape[0], dtype)


def rounding_floors(model: Model, centre: jax.Array, unravel: Any, rows: PyTree, dtype: Any) -> jax.Array:
    """Per row, ``ROUNDING_ULPS`` units of its float32 resolution (``term_scale``) in ``dtype``, over its copies in an
    importance-sampled population, traceable."""
    rows, copies = split_copies(rows)
    floor = ROUNDING_ULPS * jnp.finfo(dtype).eps * term_scale(model, centre, unravel, rows).astype(dtype)
    return floor if copies is None else floor / copies.astype(dtype)


def residuals_at(model: Model, proxy: Proxy, points: jax.Array):
    """``rows -> (e_i(p) for every probe p (shape (P, rows)), the rows' rounding floors (term_floors))``, jitted."""
    c, unravel = proxy.flat_centre()

    def resid(rows: PyTree) -> tuple[jax.Array, jax.Array]:
        return probe_residuals(model, proxy, points, rows), term_floors(proxy, model, c, unravel, rows, c.dtype)

    return jax.jit(resid)


class ProbeRound(NamedTuple):
    """A first probe round made elsewhere (in the lean warm-up's last Newton pass): its probe steps and what it found."""

    steps: np.ndarray
    """The probe steps ``L u`` (shape ``(directions, d)``) the residuals were taken at."""
    top_dev: np.ndarray
    """The largest deviations, sorted down."""
    top_idx: np.ndarray
    """Their row indices."""
    bulk_rows: int
    """Rows read for the bulk level (the pass itself is counted by whoever made it)."""


def largest_deviations(
    resid, bulk: np.ndarray, arrays: PyTree, n: int, keep: int, chunk: int, temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` largest deviations ``max_p |e_i(p) - bulk(p)| / K`` over one streamed pass (``host_reduce``: over
    several processes, each one's largest merged by one all-gather), sorted down, with their row indices. Every
    chunk has the same number of rows (the last one overlaps its predecessor), so ``resid`` compiles once."""

    def fold(top: tuple[np.ndarray, np.ndarray], ch: Chunk) -> tuple[np.ndarray, np.ndarray]:
        e, floor = resid(ch.rows)
        new = ch.first - ch.start
        return add_deviations(
            top,
            np.asarray(e, np.float64)[:, new:],
            bulk,
            ch.first,
            keep,
            temperature,
            np.asarray(floor, np.float64)[new:] / temperature,
        )

    top = host_reduce(
        fold,
        (np.zeros(0), np.zeros(0, np.int64)),
        arrays,
        n,
        chunk,
        merge=lambda a, b: merge_tops(a, b, keep),
        final=lambda t: padded_top(t, keep),
    )
    return unpadded(top)


def profile_scales(model: Model, proxy: Proxy, stratum: PyTree, steps: np.ndarray, temperature: float) -> np.ndarray:
    """Standard deviation along each step ``s`` of ``t -> log p0(c + t s) + [proxy sum + stratum residuals](c + t s) / K``,
    in units of ``s`` (1 for the Laplace approximation): the posterior scale once the stratum is exact."""
    c, unravel = proxy.flat_centre()
    t = np.linspace(-12.0, 12.0, 961)

    def log_density(x: jax.Array) -> jax.Array:
        exact = proxy.remainder(model, unravel(x), stratum)
        return model.log_prior(unravel(x)) + (proxy.proxy_sum(unravel(x)) + jnp.sum(exact)) / temperature

    points = jnp.asarray(np.asarray(c, np.float64)[None, None] + t[None, :, None] * steps[:, None, :], c.dtype)
    lp = np.asarray(jax.jit(jax.vmap(jax.vmap(log_density)))(points), np.float64)
    lp = np.where(np.isfinite(lp), lp, -np.inf)
    w = np.exp(lp - lp.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    mean = w @ t
    return np.sqrt(np.maximum(w @ t**2 - mean**2, 0.0))


def influential_rows(
    model: Model,
    data: Any,
    proxy: Proxy,
    factor: np.ndarray,
    *,
    key: jax.Array | None = None,
    tolerance: float = 0.1,
    batch_size: int = 50,
    max_rows: int = 1000,
    warn_rows: int | None = None,
    temperature: float = 1.0,
    rounds: int = 3,
    chunk: int = DEFAULT_CHUNK,
    first: ProbeRound | None = None,
) -> Influence:
    """The rows whose terms the minibatch test would miss by more than ``tolerance`` nats in total (module docstring).

    ``factor`` is the Laplace covariance's lower Cholesky factor (flat parameter order); ``batch_size`` the
    minibatch the test reads; residuals count divided by ``temperature``. When rows are found, the probes
    are widened to the scale of the posterior with those rows exact (``profile_scales``) and the pass is
    repeated, at most ``rounds`` passes in all. Warns when the stratum exceeds ``warn_rows`` (default
    ``batch_size``: it then costs more per test than the minibatch) or ``max_rows``. ``first``: the first round,
    made by the caller's own pass at the proxy's centre (with ``probe_plan``'s directions, bulk rows and ``kept_rows``).
    """
    tolerance = check_positive(tolerance, "tolerance")
    batch_size = check_int(batch_size, "batch_size", 1)
    max_rows = check_int(max_rows, "max_rows", 0)
    warn_rows = batch_size if warn_rows is None else check_int(warn_rows, "warn_rows", 0)
    rounds = check_int(rounds, "rounds", 1)
    chunk = check_int(chunk, "chunk", 1)
    t0 = time.perf_counter()
    source = as_data_source(data)
    n, arrays = source.n, source.arrays()
    centre = proxy.flat_centre()[0]
    chunk = min(chunk, n)
    steps, bulk_idx = probe_plan(factor, key, n, chunk) if first is None else (first.steps, None)
    bulk_rows = None
    window = math.ceil(n / batch_size)
    keep = kept_rows(n, batch_size, max_rows)
    cap = min(max_rows, max(n - batch_size, 0))  # leave the minibatch at least its m rows
    rows, used, passes, first_steps = np.zeros(0, np.int64), 0, 0, steps
    for r in range(rounds):
        if r == 0 and first is not None:  # made by the caller's pass
            top_dev, top_idx, used = first.top_dev, first.top_idx, first.bulk_rows
        else:
            bulk_idx = (
                probe_plan(factor, key, n, chunk)[1] if bulk_idx is None else bulk_idx
            )  # only for a round of its own
            bulk_rows = take(arrays, jnp.asarray(bulk_idx, jnp.int32)) if bulk_rows is None else bulk_rows
            resid = residuals_at(model, proxy, probe_points(centre, steps))
            bulk = np.median(np.asarray(resid(bulk_rows)[0], np.float64), axis=1, keepdims=True)
            if r > 0 and rerank_only(steps, first_steps, top_idx.size, keep, local_span(arrays, n) is None):
                top_dev, top_idx = reranked(resid, bulk, arrays, top_idx, keep, chunk, temperature)
                used = used + top_idx.size + bulk_idx.size
            else:
                top_dev, top_idx = largest_deviations(resid, bulk, arrays, n, keep, chunk, temperature)
                used, passes = used + n + bulk_idx.size, passes + 1
        size = stratum_size(top_dev, window, n, cap, tolerance)
        found = set(top_idx[:size].tolist())
        if size == 0 or found <= set(rows.tolist()):
            break
        rows = np.asarray(sorted(found | set(rows.tolist())), np.int64)
        widen = profile_scales(model, proxy, take(arrays, jnp.asarray(rows, jnp.int32)), steps, temperature)
        if np.all(widen <= 1.05):
            break
        steps = steps * np.maximum(widen, 1.0)[:, None]
    where = {int(i): j for j, i in enumerate(top_idx)}
    dev = np.asarray([top_dev[where[int(i)]] if int(i) in where else np.nan for i in rows])
    rest = np.asarray([d for i, d in zip(top_idx, top_dev) if int(i) not in set(rows.tolist())])
    blind_left = float(blind_errors(rest, window, n - rows.size)[0]) if rest.size else 0.0
    warn_stratum(
        rows,
        dev,
        blind_left,
        capped=blind_left > tolerance,
        tolerance=tolerance,
        batch_size=batch_size,
        warn_rows=warn_rows,
        max_rows=cap,
    )
    return Influence(rows.astype(np.int32), dev, blind_left, window, passes, used, time.perf_counter() - t0)


def rerank_only(steps: np.ndarray, first_steps: np.ndarray, kept: int, keep: int, one_process: bool) -> bool:
    """Whether a later round may re-rank the previous round's kept rows alone: it kept all ``keep`` (or all rows), the
    probes grew by at most ``CANDIDATE_WIDEN`` along every direction, and the rows are in one process."""
    grown = np.linalg.norm(steps, axis=1) / np.maximum(np.linalg.norm(first_steps, axis=1), 1e-300)
    return one_process and kept >= keep and float(np.max(grown)) <= CANDIDATE_WIDEN


def reranked(
    resid, bulk: np.ndarray, arrays: PyTree, candidates: np.ndarray, keep: int, chunk: int, temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """``largest_deviations`` over the ``candidates`` rows alone (their indices in the data, sorted down by deviation)."""
    cand = np.sort(np.asarray(candidates, np.int64))
    rows = take(arrays, jnp.asarray(cand, jnp.int32))
    dev, idx = largest_deviations(resid, bulk, rows, cand.size, keep, min(chunk, cand.size), temperature)
    return dev, cand[idx]


def probe_plan(factor: np.ndarray, key: jax.Array | None, n: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """The probe steps ``L u`` and the sorted indices of the ``min(chunk, n)`` rows drawn for the bulk level: up to
    ``KEYED_ROWS`` rows (exclusive) the head of a permutation of all ``N`` (``jax.random.choice`` without replacement, bit for bit),
    from it on the head of the keyed bijection minibatches use (``sampled_rows``), whose memory does not grow with ``N``
    (the permutation of 5e7 rows took the process's peak resident memory from 0.4 to 3.0 GB)."""
    key = jax.random.key(0) if key is None else key
    if n >= KEYED_ROWS:
        return probe_steps(factor, key), sampled_rows(key, n, min(chunk, n))
    order = np.asarray(permuted_rows(key, n))
    return probe_steps(factor, key), np.sort(order[: min(chunk, n)])


def sampled_rows(key: jax.Array, n: int, count: int) -> np.ndarray:
    """``count`` distinct rows of ``n``, sorted: the first ``count`` positions of ``indexing.permuted_index``'s keyed
    bijection of ``[0, n)`` (drawn from the second half of ``key``), in memory ``O(count)``."""
    return np.sort(
        np.asarray(permuted_index(jax.random.split(key)[1], jnp.arange(count, dtype=jnp.int32), n)).astype(np.int64)
    )


def permuted_rows(key: jax.Array, n: int) -> jax.Array:
    """The permutation of the ``n`` rows drawn from the second half of ``key``: one compilation per ``n``, whatever the bulk's
    size; fast-compiled up to ``ONE_OFF_WORK`` rows (a sort of integer keys: the same permutation either way)."""
    run = permutation_fast if compile_options(n, ONE_OFF_WORK) else permutation_optimised
    return run(key, n)


def permutation(key: jax.Array, n: int) -> jax.Array:
    """``jax.random.permutation`` of ``n`` by the second half of ``key``."""
    return jax.random.permutation(jax.random.split(key)[1], n)


permutation_optimised = jax.jit(permutation, static_argnums=1)
permutation_fast = jax.jit(permutation, static_argnums=1, compiler_options=FAST_COMPILE)


def probe_steps(factor: np.ndarray, key: jax.Array | None) -> np.ndarray:
    """``probe_plan``'s probe steps alone, without drawing its bulk rows (a permutation of all ``N``)."""
    factor = np.asarray(factor, np.float64)
    if (
        factor.shape[0] <= MAX_DIRECTIONS
    ):  # the axes: no random directions, no key to split (a compiled split and slice)
        return probe_directions(factor, None)
    return probe_directions(factor, jax.random.split(jax.random.key(0) if key is None else key)[0])


def kept_rows(n: int, batch_size: int = 50, max_rows: int = 1000) -> int:
    """Largest deviations a pass keeps: the stratum's cap plus a blind window."""
    return min(n, max_rows + min(math.ceil(n / batch_size), WINDOW_KEPT))


def name_rows(rows: np.ndarray, dev: np.ndarray, shown: int = 10) -> str:
    """``"12 (3.1 nats), 40 (2.2 nats), ... and 31 more"``: the most influential rows first."""
    order = np.argsort(-dev, kind="stable")
    named = ", ".join(f"{int(rows[i])} ({dev[i]:.3g} nats)" for i in order[:shown])
    return named + (f", ... and {rows.size - shown} more" if rows.size > shown else "")


def warn_stratum(rows, dev, blind, *, capped, tolerance, batch_size, warn_rows, max_rows) -> None:
    """Warn when the stratum is capped (rows left blind) or costs more per test than ``warn_rows`` rows."""
    if capped:
        warnings.warn(
            f"the Taylor proxy misses many rows: the exact stratum is capped at max_rows={max_rows} rows ({name_rows(rows, dev)}) "
            f"and the rows left to the minibatch still differ from the proxy by {blind:.3g} nats in total at posterior-scale "
            f"moves (tolerance {tolerance:g}): the proxy does not pay off here; sample with an exact test, a larger "
            "max_rows, or a model the proxy fits",
            stacklevel=3,
        )
    elif rows.size > warn_rows:
        warnings.warn(
            f"{rows.size} rows are far from the Taylor proxy and are evaluated exactly at every MH test ({name_rows(rows, dev)}): "
            f"{rows.size} rows per test on top of the {batch_size}-row minibatch ({rows.size / batch_size:.1f}x its cost)",
            stacklevel=3,
        )
