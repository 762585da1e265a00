"""The exact twin's per-step sums of residuals, read from a sample of the rows wherever that settles its decision.

The twin (``exact_twin``) accepts a move when ``Delta = free + Lambda / temperature`` clears a threshold drawn from the
run's random numbers, ``Lambda = sum_i r_i`` the proxy's residuals over every row. Most decisions are settled without
reading every row. At the first step every row is read for ``PROBE_STARTS`` starts: the rows with the largest
``|r_i|`` at any of their moves form a heavy set ``H`` (``HEAVY_ROWS``), read at every step. The rest is estimated from
``m`` rows drawn uniformly with replacement afresh at each step (about ``n / SAMPLED_SHARE``):

    Lambda ~ sum_H r_i + n mean_j(r_j 1[j not in H]),   s.e.  s = n sd_j(r_j 1[j not in H]) / sqrt(m).

The exact rule accepts when ``Lambda`` exceeds an edge (``exact_twin.exact_threshold``: the decision is monotone in
``Delta``). A start whose estimate is more than ``Z s + SLACK`` from its edge (``DECISION_Z``) takes the estimate's side;
any other is estimated again from ``STAGE_GROWTH`` times more fresh draws (and so on while that is under
``1 / STAGE_FACTOR`` of the rows), then, still open or with a non-finite term sampled, reads every row. So the
twin decides as the full-data rule does except when an estimate is off by more than ``Z`` s.e. (for a normal estimate
about ``6e-7`` per decision). Heavy tails outside ``H`` could make that more frequent, so the estimates are audited
against full sums on moves ``H`` was not chosen on: at the first step the probe starts are read in two halves, each
half's full sums compared with estimates from the heavy set the other half's rows gave (and a sample); later, every start
that reads every row is compared too: the open ones, and with each lone open start (a group of ``FULL_STARTS`` is
evaluated whole) the decided start nearest its edge. One full sum more than ``AUDIT_Z`` s.e. (plus ``SLACK``) from its
estimate and every later step reads every row for every start, as before. Without a proxy (``centre`` None: the plain
ratios' spread is the whole log-likelihood's), for a single step, with fewer than ``SAMPLE_FACTOR`` gathered blocks of
rows or at most ``2 PROBE_STARTS`` starts, every step reads every row (``exact_twin``'s streamed pass for all starts at
once).

An importance-sampled population (``data.arrays.RowsRepeated``: row ``i`` at ``n_i`` of ``M`` positions, each with the
term ``r_i / n_i``) is sampled by positions, uniformly, so by the run's own weights (``n`` above is ``M``); a full read
and the heavy set are over its distinct rows (``data.arrays.DistinctRows``): each row's term read once and weighted by
``n_i``, ``N`` evaluations where reading every position took ``M`` (up to 4 N), and a drawn position whose row is in
``H`` counts 0; ``m`` is sized by ``N``.

One compiled function reads every row set (``gathered_sums``): every start, in groups of ``FULL_STARTS``, on
``L = m + |H|`` gathered rows (padded to a multiple of its chunk), one call per block of ``L`` rows. Row evaluations per check:
``PROBE_STARTS N + K T L``, plus the larger samples and ``FULL_STARTS N`` per group of starts left open in a step,
against ``K T N`` (``benchmarks/posterior_check.py --cost`` measures them, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.influence import rounding_floors
from minibatch_mcmc.data.arrays import DistinctRows, take
from minibatch_mcmc.models.base import Model

PyTree = Any

SAMPLED_SHARE = 256
"""``m`` is about ``n / SAMPLED_SHARE`` rows, within ``[MIN_SAMPLED, MAX_SAMPLED]`` (then raised to fill the gathered
block): a smaller sample leaves more decisions open, each a larger sample, then a full pass. On the Student-t regression
at ``N = 10^6`` with ``K = 100`` at ``n / 64`` no decision was left open: the samples (33 passes) cost twice the
first step's full reads (16)."""
MIN_SAMPLED = 1024
"""Fewest rows a sampled estimate uses. Not a matter of accuracy (a decision the sample settles is the full-data one to
``DECISION_Z`` s.e., and audited): a smaller sample only leaves more decisions to larger samples and full reads. It was
4,096 (blocks of at least 8,192 rows): at ``N = 327,346`` (16 groups) the samples were 2.5% of the rows a decision, the
check 84 passes and ~10x sampling."""
MAX_SAMPLED = 1 << 16
"""Most rows a sampled estimate uses."""
SAMPLE_FACTOR = 8
"""Rows are sampled only where there are at least this many times the gathered block (``m + |H|``)."""
HEAVY_ROWS = 2048
"""``|H|``: rows with the largest residual at the first step's moves, read at every step."""
CHUNK = 1024
"""Rows per chunk of the gathered function, and the granularity of its block (``m + |H|`` rounded up to it): at 4,096
every block was at least 8,192 rows (``FULL_STARTS`` starts x a chunk's terms stay in cache; measured on the Student-t
regression at ``N = 10^6``, 8 starts: 0.75 s a pass at 4,096 rows, 0.98 s at 16,384)."""
DECISION_Z = 5.0
"""An estimate decides when the decision is the same ``DECISION_Z`` s.e. (plus ``SLACK``) either side of it."""
AUDIT_Z = 4.0
"""Each full sum must lie within this many s.e. (plus ``SLACK``) of its estimate, or every later step reads every row
(a normal estimate strays that far about 6e-5 of the time)."""
PROBE_STARTS = 4
"""Starts whose first step reads every row and gives the heavy set, in two halves (each a multiple of ``FULL_STARTS``)
that audit each other's heavy sets. Was 4 probe and 4 further audit starts (8 full reads; 8 and 8 before that, half the
check's reads at ``N = 10^6``)."""
SLACK = 1e-3
"""Nats added to each interval: a sampled s.e. of 0 (every residual sampled zero) still leaves room for rows unsampled.
A decision within it of the edge is read on every row (at 1e-2 those were about 1% of the decisions, at 1e-3 0.1%;
a decision changed by less than it moves an acceptance probability by less than it)."""
STAGE_GROWTH = 8
"""A start the sample leaves undecided is estimated again from this many times more fresh draws (then 8 times more,
...) while that costs under ``1 / STAGE_FACTOR`` of a pass; only then are all its rows read."""
STAGE_FACTOR = 4
"""A larger sample is drawn only while it is at most ``1 / STAGE_FACTOR`` of the rows."""
FULL_STARTS = 2
"""Starts the gathered function evaluates together (a group; a call loops over the groups that hold its starts): an
undecided start costs this many starts' full pass."""


class Sampling(NamedTuple):
    """The sample's size ``m`` (0: every row at every step), the heavy set's size and the gathered rows per call."""

    rows: int
    heavy: int
    block: int


def sampling_plan(n_pop: int, starts: int, steps: int, centre: PyTree) -> Sampling:
    """``Sampling`` for ``n_pop`` rows (module docstring): none without a proxy, for a single step, too few rows, or at
    most twice the first step's probe starts (as many sampled starts as read in full)."""
    m = min(MAX_SAMPLED, max(MIN_SAMPLED, n_pop // SAMPLED_SHARE))
    block = -(-(m + HEAVY_ROWS) // CHUNK) * CHUNK
    if centre is None or steps < 2 or n_pop < SAMPLE_FACTOR * block or starts <= 2 * PROBE_STARTS:
        return Sampling(0, 0, 0)
    return Sampling(block - HEAVY_ROWS, HEAVY_ROWS, block)


def planned_evaluations(plan: Sampling, starts: int, steps: int, n_pop: int) -> int:
    """Row evaluations the twin makes if no start is left undecided (``K T N`` without sampling)."""
    if not plan.rows:
        return starts * steps * n_pop
    return PROBE_STARTS * (n_pop + plan.block) + starts * steps * plan.block


def gathered_sums(model: Model, estimator: Estimator, centre: PyTree) -> Callable:
    """``(population, idx, exact, sampled, currents, candidates, count, top) -> (sum exact r, sum sampled r, sum
    sampled r^2, bad, rowmax)``: per start (of ``currents``' ``K`` slots, a multiple of ``FULL_STARTS``; the groups of
    ``FULL_STARTS`` that hold the first ``count`` are evaluated, the rest left 0), sums over the gathered rows ``idx``
    weighted by ``exact`` and ``sampled`` (``idx``'s length a multiple of ``CHUNK``), whether a weighted term was not
    finite, and per row its largest ``|r_i|`` over the first ``top`` starts (a multiple of ``FULL_STARTS``; infinite
    where not finite). Each term within its row's float32 resolution counts as 0 (``without_rounding``; the rows and
    their floors gathered once a call, not once a group). One call serves every start of a block: one dispatch and one
    read back instead of one per group."""
    flat_c, unravel_c = ravel_pytree(centre)

    def terms(current: PyTree, candidate: PyTree, rows: PyTree, floor: jax.Array) -> jax.Array:
        v = estimator.log_ratio(model, current, candidate)(rows)
        return jnp.where(jnp.abs(v) <= floor.astype(v.dtype), 0.0, v)

    many = jax.vmap(terms, in_axes=(0, 0, None, None))

    def one_group(rows, floor, exact, sampled, currents, candidates):
        def body(i, acc):
            a, b, f = (jax.lax.dynamic_slice_in_dim(v, i * CHUNK, CHUNK) for v in (exact, sampled, floor))
            chunk = jax.tree_util.tree_map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * CHUNK, CHUNK), rows)
            v = many(currents, candidates, chunk, f)
            finite = jnp.isfinite(v)
            bad = jnp.any(~finite & ((a > 0) | (b > 0)), axis=1)
            top = jnp.max(jnp.where(finite, jnp.abs(v), jnp.inf), axis=0)
            v = jnp.where(finite, v, 0.0)
            return (
                acc[0] + v @ a,
                acc[1] + v @ b,
                acc[2] + (v * v) @ b,
                acc[3] | bad,
                jax.lax.dynamic_update_slice_in_dim(acc[4], top, i * CHUNK, 0),
            )

        zero = jnp.zeros((FULL_STARTS,), jnp.float32)
        start = (zero, zero, zero, jnp.zeros((FULL_STARTS,), bool), jnp.zeros(exact.shape, jnp.float32))
        return jax.lax.fori_loop(0, exact.shape[0] // CHUNK, body, start)

    def run(population, idx, exact, sampled, currents, candidates, count, top):
        k = jax.tree_util.tree_leaves(currents)[0].shape[0]
        rows = take(population, idx)
        one = lambda tree: jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), tree)  # noqa: E731
        dtype = jax.eval_shape(
            lambda c, m: estimator.log_ratio(model, c, m)(rows), one(currents), one(candidates)
        ).dtype
        floor = rounding_floors(model, flat_c, unravel_c, rows, dtype)

        def group(g, acc):
            at = g * FULL_STARTS

            def cut(tree: PyTree) -> PyTree:
                return jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, at, FULL_STARTS), tree)

            got = one_group(rows, floor, exact, sampled, cut(currents), cut(candidates))
            sums = tuple(jax.lax.dynamic_update_slice_in_dim(a, b, at, 0) for a, b in zip(acc[:4], got[:4]))
            return sums + (jnp.where(at < top, jnp.maximum(acc[4], got[4]), acc[4]),)

        zero = jnp.zeros((k,), jnp.float32)
        start = (zero, zero, zero, jnp.zeros((k,), bool), jnp.zeros(idx.shape, jnp.float32))
        return jax.lax.fori_loop(0, (count + FULL_STARTS - 1) // FULL_STARTS, group, start)

    return run


class StepReader(NamedTuple):
    """What a step's sums come from (``read_step``)."""

    gathered: Callable
    """``gathered_sums`` jitted for ``slots`` starts, taking ``data``."""
    plan: Sampling
    n_pop: int
    seed: int
    slots: int
    """Starts a call of ``gathered`` takes: the twin's ``K`` rounded up to a multiple of ``FULL_STARTS``."""
    units: DistinctRows
    """The population's distinct rows (``data.arrays.distinct_rows``), which a full read and the heavy set are over."""


class Reading(NamedTuple):
    """What the twin has read so far: the heavy set (population indices, and a mask), whether every step from now on
    reads every row (a failed audit), and the row evaluations."""

    heavy: np.ndarray
    in_heavy: np.ndarray
    full: bool
    rows: int


def first_reading() -> Reading:
    """Nothing read yet."""
    return Reading(np.zeros(0, np.int64), np.zeros(0, bool), False, 0)


def slots_for(starts: int) -> int:
    """``starts`` rounded up to a multiple of ``FULL_STARTS``: the starts a call of the gathered sums takes."""
    return -(-starts // FULL_STARTS) * FULL_STARTS


def padded(tree: PyTree, which: np.ndarray, slots: int) -> PyTree:
    """Rows ``which`` of every leaf then copies of them up to ``slots`` rows, put on the device once per pass."""
    return jax.device_put(pick(tree, np.resize(which, slots)))


def pick(tree: PyTree, rows: np.ndarray) -> PyTree:
    """Rows ``rows`` of every leaf, on the host (no eager device operation to compile)."""
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[rows], tree)


def full_sums(reader: StepReader, data: PyTree, currents, candidates, which: np.ndarray, top: int = 0):
    """``(Lambda, bad, rowmax)`` for the starts ``which`` over every row (blocks of ``plan.block`` rows, the last
    padded with weight 0), ``rowmax`` each row's largest ``|r_i|`` over the first ``top`` of them (a multiple of
    ``FULL_STARTS``; None where ``top`` is 0). One call a block for every start, all dispatched before their results
    are read."""
    units = reader.units
    n, size = units.position.size, reader.plan.block
    rowmax = np.zeros(-(-n // size) * size, np.float32) if top else None
    zero = jax.device_put(np.zeros(size, np.float32))
    c, m = padded(currents, which, reader.slots), padded(candidates, which, reader.slots)
    count, upto = np.int32(which.size), np.int32(top)
    got = []
    for start in range(0, n, size):
        at = start + np.arange(size)
        unit = np.minimum(at, n - 1)
        idx, w = jax.device_put(units.position[unit]), jax.device_put(units.copies[unit] * (at < n))
        got.append(reader.gathered(data, idx, w, zero, c, m, count, upto))
    lam, bad = np.zeros(which.size), np.zeros(which.size, bool)
    for j, out in enumerate(got):
        lam += np.asarray(out[0], np.float64)[: which.size]
        bad |= np.asarray(out[3])[: which.size]
        if top:
            rowmax[j * size : (j + 1) * size] = np.asarray(out[4])
    return lam, bad, None if rowmax is None else rowmax[:n]


def draw_rows(plan: Sampling, reading: Reading, n_pop: int, seed: tuple, heavy: bool, units: DistinctRows):
    """The positions a sampled call gathers: with ``heavy`` the heavy set's then ``m`` uniform draws, else ``m + |H|``
    draws (sorted, padded to ``plan.block``); and their weights: a heavy row's copies for the exact sum, 1 on drawn
    positions whose row is outside ``H`` for the sampled sums."""
    top = reading.heavy if heavy else np.zeros(0, np.int64)
    drawn = np.sort(np.random.default_rng(seed).integers(0, n_pop, plan.block - top.size))
    idx = np.concatenate([units.position[top], drawn]).astype(np.int32)
    exact = np.concatenate([units.copies[top], np.zeros(drawn.size)]).astype(np.float32)
    sampled = np.concatenate([np.zeros(top.size), ~reading.in_heavy[units.of(drawn)]]).astype(np.float32)
    return idx, exact, sampled


def sampled_sums(reader: StepReader, reading: Reading, seed: tuple, data: PyTree, currents, candidates, blocks: int):
    """For the starts given: the heavy rows' sum (0 unless ``blocks`` is 1: the heavy set is read with the first
    block only), the estimate of the rest of ``Lambda`` from ``blocks`` blocks of uniform draws, its s.e., the
    non-finite flag, and the row evaluations."""
    k = jax.tree_util.tree_leaves(currents)[0].shape[0]
    n, every = reader.n_pop, np.arange(k)
    c, to = padded(currents, every, reader.slots), padded(candidates, every, reader.slots)
    got, m = [], 0
    for j in range(blocks):
        rows = draw_rows(reader.plan, reading, n, seed + (j,), blocks == 1, reader.units)
        m += rows[0].size - int(np.count_nonzero(rows[1]))  # the drawn positions (the heavy rows weigh their copies)
        got.append(reader.gathered(data, *(jax.device_put(v) for v in rows), c, to, np.int32(k), np.int32(0)))
    out = np.zeros((4, k))
    for res in got:
        out += np.stack([np.asarray(g, np.float64)[:k] for g in res[:4]])
    mean = out[1] / m
    var = np.maximum(out[2] / m - mean * mean, 0.0) * m / (m - 1)
    return out[0], n * mean, n * np.sqrt(var / m), out[3] > 0, slots_for(k) * blocks * reader.plan.block


def heaviest(rowmax: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` rows with the largest residual seen (sorted indices) and their mask."""
    top = np.sort(np.argpartition(-np.nan_to_num(rowmax, nan=np.inf), count - 1)[:count])
    mask = np.zeros(rowmax.size, bool)
    mask[top] = True
    return top, mask


def strays(full: np.ndarray, est: np.ndarray, se: np.ndarray) -> bool:
    """Whether a full sum lies more than ``AUDIT_Z`` s.e. plus ``SLACK`` from its sampled estimate."""
    return bool(np.any(np.abs(full - est) > AUDIT_Z * se + SLACK))


def first_step(reader: StepReader, reading: Reading, data: PyTree, currents, candidates):
    """The first step's full reads: every row for the ``PROBE_STARTS`` probe starts, in two halves, each half's rows'
    largest residuals giving a heavy set the other half's sums audit (an estimate from that heavy set and a sample,
    ``AUDIT_Z``), and the heavy set from all of them. ``(lam, bad, reading, strayed)`` for the probe starts."""
    n, halves = reader.units.position.size, np.split(np.arange(PROBE_STARTS), 2)
    lam, bad, tops = np.zeros(PROBE_STARTS), np.zeros(PROBE_STARTS, bool), []
    for half in halves:
        lam[half], bad[half], rowmax = full_sums(reader, data, currents, candidates, half, top=half.size)
        tops.append(rowmax)
    rows, strayed = reading.rows + 2 * slots_for(halves[0].size) * n, False
    for j, (half, other) in enumerate(zip(halves, tops[::-1])):
        heavy = heaviest(other, reader.plan.heavy)
        seed, c, m = (reader.seed, 1, 1, j), pick(currents, half), pick(candidates, half)
        h, rest, se, sbad, used = sampled_sums(
            reader, reading._replace(heavy=heavy[0], in_heavy=heavy[1]), seed, data, c, m, 1
        )
        fine = ~bad[half] & ~sbad
        strayed, rows = strayed or strays(lam[half][fine], (h + rest)[fine], se[fine]), rows + used
    heavy, in_heavy = heaviest(np.maximum(*tops), reader.plan.heavy)
    return lam, bad, reading._replace(heavy=heavy, in_heavy=in_heavy, rows=rows), strayed


def paired(open_: np.ndarray, known: np.ndarray, est: np.ndarray, edge: np.ndarray, se: np.ndarray) -> np.ndarray:
    """The starts to read in full: the open ones, and where they leave a group of ``FULL_STARTS`` part empty (it is
    evaluated whole), the decided starts nearest their edge in s.e. to fill it: their decisions read exactly, and
    audited, for nothing."""
    spare = -int(open_.sum()) % FULL_STARTS
    nearest = np.argsort(np.where(open_ | known, np.inf, np.abs(est - edge) / np.maximum(se, 1e-30)), kind="stable")
    fill = nearest[:spare][~(open_ | known)[nearest[:spare]]]
    return np.sort(np.concatenate([np.flatnonzero(open_), fill]))


def read_step(reader: StepReader, reading: Reading, t: int, data: PyTree, currents, candidates, edge: np.ndarray):
    """Step ``t``'s ``(Lambda, bad)`` per start and the reading after it (module docstring); ``edge``: per start the
    ``Lambda`` above which the exact rule accepts (``(tau - free) * temperature``)."""
    k = jax.tree_util.tree_leaves(currents)[0].shape[0]
    every, n = np.arange(k), reader.units.position.size  # a full read's evaluations: the distinct rows
    if reading.full:
        lam, bad, _ = full_sums(reader, data, currents, candidates, every)
        return lam, bad, reading._replace(rows=reading.rows + slots_for(k) * n)
    lam, bad = np.zeros(k), np.zeros(k, bool)
    known, compare, strayed = np.zeros(k, bool), np.zeros(k, bool), False
    if t == 1:
        first = every[:PROBE_STARTS]
        lam[first], bad[first], reading, strayed = first_step(reader, reading, data, currents, candidates)
        known[first] = True
    rows = reading.rows
    heavy_sum, rest_sum, se, sbad, used = sampled_sums(reader, reading, (reader.seed, t), data, currents, candidates, 1)
    est, rows = heavy_sum + rest_sum, rows + used
    open_ = np.zeros(k, bool)
    blocks = 1
    while True:
        width = DECISION_Z * se + SLACK
        open_ = ((np.abs(est - edge) <= width) | sbad) & ~known
        blocks *= STAGE_GROWTH
        if not open_.any() or STAGE_FACTOR * blocks * reader.plan.block > n:
            break
        which = every[open_ & (np.abs(est - edge) > SLACK)]  # within SLACK no sample settles it
        if not which.size:
            break
        seed = (reader.seed, t, blocks)
        got = sampled_sums(reader, reading, seed, data, pick(currents, which), pick(candidates, which), blocks)
        est[which], se[which], sbad[which], rows = heavy_sum[which] + got[1], got[2], got[3], rows + got[4]
    redo = paired(open_, known, est, edge, se) if open_.any() else every[open_]
    if redo.size:
        lam[redo], bad[redo], _ = full_sums(reader, data, currents, candidates, redo)
        known[redo], compare[redo], rows = True, True, rows + slots_for(redo.size) * n
    compare &= ~bad & ~sbad
    rest = every[~known]
    lam[rest], bad[rest] = est[rest], sbad[rest]
    if strayed or strays(lam[compare], est[compare], se[compare]):
        reading = reading._replace(full=True)
        if rest.size:
            lam[rest], bad[rest], _ = full_sums(reader, data, currents, candidates, rest)
            rows += slots_for(rest.size) * n
    return lam, bad, reading._replace(rows=rows)
