"""The whole fit's cost in one table: the NumPyro conversion, the warm-up's phases, sampling and the check after it.

``fit_cost(converted, warm, result)`` joins the ``PhaseCost`` of each part (``from_numpyro``'s ``cost``, ``Warmup.cost``,
whose ``sampling`` and ``check`` rows ``auto_sample`` adds) into a ``FitCost``: phase -> rows, passes over ``N``, seconds
and compile seconds, with totals that cover the wall-clock time of ``from_numpyro`` + ``auto_sample``.
``timed_setup`` adds a warm-up's ``setup`` row: the seconds between its timed phases.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, NamedTuple

from minibatch_mcmc.samplers.phase_cost import COMPILE_SECONDS, PhaseCost

AFTER_WARMUP = ("sampling", "check")
"""Rows of ``Warmup.cost`` that ``auto_sample`` adds after the warm-up: outside the warm-up's totals."""


class FitCost(NamedTuple):
    """Phase -> ``PhaseCost`` in the order they ran, and the totals over them."""

    phases: dict
    seconds: float
    """Seconds of every phase: the fit's wall-clock time."""
    rows: int
    passes: float
    compile_seconds: float

    def table(self) -> str:
        """One line per phase (passes, rows, seconds, compile seconds), then the total."""
        lines = [f"  {'phase':<13}{'passes':>9}{'rows':>15}{'seconds':>10}{'compiling':>11}"]
        rows = list(self.phases.items()) + [
            ("total", PhaseCost(self.rows, self.seconds, self.passes, self.compile_seconds))
        ]
        for name, c in rows:
            lines.append(f"  {name:<13}{c.passes:>9.2f}{c.data:>15,}{c.seconds:>10.2f}{c.compile_seconds:>11.2f}")
        return "\n".join(lines)


def sampling_cost(result: Any) -> PhaseCost:
    """A ``SampleResult``'s rows read (minibatches, hidden data, an exact stratum's rows at every step), passes over ``N``
    and ``wall_time``."""
    steps = int(result.records["batch_size"].size)
    rows = int(result.records["batch_size"].sum() + result.records["hidden_data"].sum()) + result.exact_rows * steps
    return PhaseCost(rows, float(result.wall_time), rows / max(result.n_data, 1))


def fit_cost(converted: Any = None, warm: Any = None, result: Any = None, before: dict | None = None) -> FitCost:
    """The cost of a fit from its parts, each optional: rows read, passes over ``N`` and seconds, phase by phase and in all.

    Args:
        converted: ``from_numpyro``'s record: its ``convert`` phase.
        warm: A ``Warmup``: its phases, with ``auto_sample``'s ``sampling`` and ``check``.
        result: A ``SampleResult`` of a ``sample`` call: its ``wall_time`` as ``sampling`` where ``warm`` holds none.
        before: Phases timed by the caller (e.g. reading the data), ``{name: PhaseCost}``, listed first.

    Returns:
        The ``FitCost``: each phase's ``PhaseCost`` and the totals.
    """
    phases = dict(before or {})
    phases.update({} if converted is None or converted.cost is None else {"convert": converted.cost})
    phases.update({} if warm is None else warm.cost)
    if result is not None and "sampling" not in phases:
        phases["sampling"] = sampling_cost(result)
    known = lambda v: 0.0 if math.isnan(v) else float(v)  # noqa: E731
    return FitCost(
        phases,
        sum(c.seconds for c in phases.values()),
        int(sum(c.data for c in phases.values())),
        sum(known(c.passes) for c in phases.values()),
        sum(known(c.compile_seconds) for c in phases.values()),
    )


def timed_setup(fn: Callable) -> Callable:
    """``fn`` returning a ``Warmup``, whose cost gains a ``setup`` row: the call's seconds outside its timed phases."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), COMPILE_SECONDS[0]
        w = fn(*args, **kwargs)
        seconds, compiling = time.perf_counter() - t0, COMPILE_SECONDS[0] - c0
        rest = lambda f: sum(f(c) for c in w.cost.values())  # noqa: E731
        known = lambda v: 0.0 if math.isnan(v) else v  # noqa: E731
        setup = PhaseCost(
            0,
            max(seconds - rest(lambda c: c.seconds), 0.0),
            0.0,
            max(compiling - rest(lambda c: known(c.compile_seconds)), 0.0),
        )
        return w._replace(cost={**w.cost, "setup": setup})

    return wrapped
