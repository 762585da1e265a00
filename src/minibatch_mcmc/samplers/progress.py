"""The sampling progress bar: redrawn about every ``interval`` seconds, ending at the total, its rate free of compilation."""

from __future__ import annotations

import time
from typing import IO

import numpy as np


def largest_divisor_at_most(length: int, limit: float) -> int:
    """The largest divisor of ``length`` not above ``limit`` (at least 1): pieces of equal length, one compilation."""
    for p in range(max(1, min(length, int(limit))), 0, -1):
        if length % p == 0:
            return p
    return 1


class SamplingBar:
    """A tqdm bar over the sampling steps that tells the driver how many steps to run before the next redraw.

    The first piece of a run pays for compilation: its wall time is shown as ``startup`` and the
    bar's clock and rate start after it (tqdm ``smoothing=0``: the mean rate since then). A block
    whose steps take longer than ``interval`` is run in equal pieces (a divisor of its length, so one
    more compilation at most) when the steps left take more than ``payback`` startups; the draws do not
    depend on the pieces, since each step's key is a function of its index. The bar stays at the end.
    """

    def __init__(self, show: bool, total: int, done: int, name: str, interval: float = 0.5,
                 payback: float = 4.0, file: IO | None = None):
        self.interval = interval
        self.payback = payback
        self.total = total
        self.startup: float | None = None
        """Seconds of the first piece, compilation included."""
        self.step_seconds: float | None = None
        """Seconds per step measured after the first piece."""
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=done, desc=name, unit="step", leave=True, smoothing=0, file=file)

    def piece(self, block_length: int, done: int) -> int:
        """How many steps of a block of ``block_length`` to run before redrawing the bar."""
        if self.bar is None or self.step_seconds is None or self.startup is None:
            return block_length
        if block_length * self.step_seconds <= 2 * self.interval:
            return block_length
        if (self.total - done) * self.step_seconds <= self.payback * self.startup:  # a new compilation would not pay for itself
            return block_length
        return largest_divisor_at_most(block_length, self.interval / self.step_seconds)

    def advance(self, recs: dict, length: int, seconds: float) -> None:
        """Move the bar on by ``length`` steps that took ``seconds``, showing acceptance and mean batch size."""
        if self.startup is None:
            self.startup = seconds
        else:
            measured = seconds / length
            self.step_seconds = measured if self.step_seconds is None else min(self.step_seconds, measured)
        if self.bar is None:
            return
        postfix = {"accept": f"{float(np.mean(recs['accepted'])):.2f}", "batch": f"{np.mean(recs['batch_size']):.0f}"}
        postfix["startup"] = f"{self.startup:.1f}s"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(length)
        if self.step_seconds is None:  # the rate clock starts after the first (compiling) piece
            self.bar.initial = self.bar.n
            self.bar.start_t = self.bar.last_print_t = time.time()
            self.bar.refresh()

    def close(self) -> None:
        """Draw the final count and leave the bar on screen."""
        if self.bar is not None:
            self.bar.refresh()
            self.bar.close()
