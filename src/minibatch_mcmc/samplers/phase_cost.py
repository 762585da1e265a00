"""What each warm-up phase cost: rows read, passes over the data, seconds, and the seconds JAX spent compiling.

Compilation time is read from JAX's monitoring events (tracing, lowering and backend compilation), summed
by a listener registered once; ``PhaseClock`` takes the difference over a phase and, with ``progress``,
shows one status line per phase (tqdm, as the sampling bar) that ends with the phase's cost.
"""

from __future__ import annotations

import math
import sys
import time
from typing import IO, Any, NamedTuple

from jax import monitoring

COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
"""JAX's monitoring events whose durations count as compilation."""

COMPILE_SECONDS = [0.0]
"""Compilation seconds since import (all threads), summed by ``count_compile``."""


def count_compile(event: str, duration: float, **_: Any) -> None:
    """Monitoring listener: add a compilation event's duration to ``COMPILE_SECONDS``."""
    if event in COMPILE_EVENTS:
        COMPILE_SECONDS[0] += duration


monitoring.register_event_duration_secs_listener(count_compile)


class PhaseCost(NamedTuple):
    """Data points read and seconds spent by one warm-up phase, its passes over ``N`` and its compilation seconds."""

    data: int
    seconds: float
    passes: float = math.nan
    """Rows read over ``N`` (a minibatch phase reads a fraction of a pass)."""
    compile_seconds: float = math.nan
    """Of ``seconds``, those JAX spent tracing and compiling (NaN where not measured)."""

    def describe(self) -> str:
        """``"2.16 passes (216,000 rows), 1.2 s (0.8 s compiling)"``."""
        compiling = "" if math.isnan(self.compile_seconds) else f" ({self.compile_seconds:.2f} s compiling)"
        return f"{self.passes:.2f} passes ({self.data:,} rows), {self.seconds:.2f} s{compiling}"


def on_terminal(stream: IO) -> bool:
    """Whether ``stream`` is a terminal (a bar redrawn in place), not a file or pipe (where each redraw is a new line)."""
    return bool(stream.isatty()) if callable(getattr(stream, "isatty", None)) else False


class PhaseClock:
    """Times a phase (wall and compile seconds) and, with ``progress``, shows a status line for it: on a terminal a
    tqdm line that says ``running`` and then the cost, elsewhere (a log file, a pipe) one line with the cost, written once."""

    def __init__(self, name: str, n: int, progress: bool = False, stage: str = "warm-up") -> None:
        self.name, self.n, self.progress, self.bar, self.stage = name, n, progress, None, stage
        self.t0 = self.c0 = 0.0

    def __enter__(self) -> "PhaseClock":
        self.t0, self.c0 = time.perf_counter(), COMPILE_SECONDS[0]
        if self.progress and on_terminal(sys.stderr):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=1, desc=f"{self.stage}: {self.name}", bar_format="{desc}{postfix}", leave=True)
            self.bar.set_postfix_str("running")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.t0
        # an event is reported whole when it ends (one begun before the phase, or timed on JAX's clock, can make the sum
        # exceed the phase's wall time by milliseconds): capped at the phase's seconds
        self.compile_seconds = min(COMPILE_SECONDS[0] - self.c0, self.seconds)
        if self.bar is not None and exc[0] is not None:
            self.bar.close()

    def cost(self, data: int, seconds: float | None = None) -> PhaseCost:
        """The phase's ``PhaseCost`` for ``data`` rows read (``seconds``: the measured wall time unless given), shown."""
        c = PhaseCost(
            int(data), self.seconds if seconds is None else float(seconds), data / max(self.n, 1), self.compile_seconds
        )
        if self.bar is not None:
            self.bar.set_postfix_str(c.describe(), refresh=False)
            self.bar.update(1)
            self.bar.close()
        elif self.progress:
            print(f"{self.stage}: {self.name}, {c.describe()}", file=sys.stderr, flush=True)
        return c
