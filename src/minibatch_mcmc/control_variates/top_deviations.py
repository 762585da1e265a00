"""The largest per-row deviations a streamed pass keeps (each process's, merged across processes by one all-gather)
and the summed deviations of the blind window a minibatch misses: the bookkeeping of ``influence.influential_rows``
and of the lean warm-up's last Newton pass."""

from __future__ import annotations

import numpy as np


def add_deviations(
    top: tuple[np.ndarray, np.ndarray],
    e: np.ndarray,
    bulk: np.ndarray,
    first_row: int,
    keep: int,
    temperature: float,
    floor: np.ndarray | float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """``top`` (deviations, rows) with the rows ``first_row, ...`` of residuals ``e`` (shape ``(P, rows)``) added, each less
    its rounding ``floor`` (``influence.term_floors`` over ``K``, at least 0), the ``keep`` largest kept (at least;
    ``influence.largest_deviations`` sorts at the end)."""
    dev = np.maximum(np.max(np.abs(e - bulk), axis=0) / temperature - floor, 0.0)
    dev = np.where(np.isfinite(dev), dev, np.inf)  # a row whose residual overflows is as influential as can be
    top_dev, top_idx = np.concatenate([top[0], dev]), np.concatenate([top[1], first_row + np.arange(dev.size)])
    if top_dev.size > 2 * keep:
        part = np.argpartition(-top_dev, keep - 1)[:keep]
        top_dev, top_idx = top_dev[part], top_idx[part]
    return top_dev, top_idx


def sorted_top(top: tuple[np.ndarray, np.ndarray], keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` largest deviations sorted down, with their rows."""
    order = np.argsort(-top[0], kind="stable")[:keep]
    return top[0][order], top[1][order]


def blind_errors(dev: np.ndarray, window: int, n_left: int) -> np.ndarray:
    """``b[k]``: summed deviations of the ``window`` largest rows after the ``k`` largest (``dev`` sorted down).

    Past the kept deviations the window is bounded by the smallest kept one times the rows it still needs.
    """
    kept = dev.size
    dev = np.minimum(dev, 1e12)  # an overflowing row stays the largest, and the sums stay finite
    csum = np.concatenate([[0.0], np.cumsum(dev)])
    k = np.arange(kept + 1)
    stop = np.minimum(k + window, kept)
    missing = np.minimum(k + window, n_left) - stop  # rows of the window that were not kept
    floor = dev[-1] if kept else 0.0
    return csum[stop] - csum[k] + missing * floor


def stratum_size(dev: np.ndarray, window: int, n: int, cap: int, tolerance: float) -> int:
    """The fewest largest deviations (``dev`` sorted down, over ``n`` rows) to make exact so that the next ``window`` sum
    to at most ``tolerance`` (``blind_errors``), ``cap`` where no count up to it will do."""
    fits = np.flatnonzero(blind_errors(dev, window, n)[: cap + 1] <= tolerance)
    return int(fits[0]) if fits.size else cap


def padded_top(top: tuple[np.ndarray, np.ndarray], keep: int) -> tuple[np.ndarray, np.ndarray]:
    """``sorted_top`` filled to exactly ``keep`` entries with deviation -1 at row -1 (no row): one shape in every
    process, for the cross-process merge."""
    dev, idx = sorted_top(top, keep)
    pad = keep - dev.size
    return np.concatenate([dev, -np.ones(pad)]), np.concatenate([idx, -np.ones(pad, np.int64)])


def unpadded(top: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``padded_top``'s entries that are rows (sorted down, as it keeps them)."""
    real = top[1] >= 0
    return top[0][real], top[1][real]


def merge_tops(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], keep: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` largest of two processes' ``padded_top`` results, padded."""
    both = unpadded(a), unpadded(b)
    return padded_top((np.concatenate([both[0][0], both[1][0]]), np.concatenate([both[0][1], both[1][1]])), keep)
