"""The sampling progress bar: redrawn about every ``interval`` seconds, ending at the total, its rate free of compilation."""

from __future__ import annotations

import sys
import time
from typing import IO

import numpy as np

from minibatch_mcmc.samplers.phase_cost import on_terminal


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
    depend on the pieces, since each step's key is a function of its index. The bar stays at the end. Shown on
    a stderr that is no terminal (a log file, a pipe) and given no ``file``, it draws no bar: one line at each tenth
    of the run and at its end, each written once (a redrawn bar would write every redraw again).
    """

    def __init__(
        self,
        show: bool,
        total: int,
        done: int,
        name: str,
        interval: float = 0.5,
        payback: float = 4.0,
        file: IO | None = None,
    ):
        self.interval = interval
        self.payback = payback
        self.total = total
        self.startup: float | None = None
        """Seconds of the first piece, compilation included."""
        self.step_seconds: float | None = None
        """Seconds per step measured after the first piece."""
        self.bar = None
        self.name, self.done, self.logged = name, done, done
        self.log = show and file is None and not on_terminal(sys.stderr)
        """A log file or pipe: no redrawn bar, a line at each tenth of the run and one at the end, each written once."""
        self.recs: dict | None = None
        if show and not self.log:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=done, desc=name, unit="step", leave=True, smoothing=0, file=file)

    def piece(self, block_length: int, done: int) -> int:
        """How many steps of a block of ``block_length`` to run before redrawing the bar."""
        if self.bar is None or self.step_seconds is None or self.startup is None:
            return block_length
        if block_length * self.step_seconds <= 2 * self.interval:
            return block_length
        if (
            self.total - done
        ) * self.step_seconds <= self.payback * self.startup:  # a new compilation would not pay for itself
            return block_length
        return largest_divisor_at_most(block_length, self.interval / self.step_seconds)

    def advance(self, recs: dict, length: int, seconds: float) -> None:
        """Move the bar on by ``length`` steps that took ``seconds``, showing acceptance and mean batch size."""
        if self.startup is None:
            self.startup = seconds
        else:
            measured = seconds / length
            self.step_seconds = measured if self.step_seconds is None else min(self.step_seconds, measured)
        self.done += length
        if self.log:
            self.recs = recs
            if self.done - self.logged >= max(1, self.total // 10) or self.done >= self.total:
                self.write_line()
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

    def write_line(self) -> None:
        """Log mode: one line with the steps done, acceptance, mean batch size, rate and startup."""
        rate = "" if self.step_seconds is None else f", {1 / max(self.step_seconds, 1e-12):.4g} steps/s"
        recs = self.recs or {"accepted": np.zeros(1), "batch_size": np.zeros(1)}
        print(
            f"{self.name}: {self.done}/{self.total} steps, accept {float(np.mean(recs['accepted'])):.2f}, batch "
            f"{np.mean(recs['batch_size']):.0f}{rate}, startup {self.startup or 0.0:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        self.logged = self.done

    def close(self) -> None:
        """Draw the final count and leave the bar on screen (log mode: the last line, unless it is written already)."""
        if self.log and self.logged < self.done:
            self.write_line()
        if self.bar is not None:
            self.bar.refresh()
            self.bar.close()
