"""Small pieces of the experiments' text tables: mean +- s.d. over trials and its cells."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def mean_sd(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and sample s.d. of per-trial values (s.d. 0 for a single trial)."""
    a = np.asarray(values, float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def plus_minus(pair: tuple[float, float] | None, spec: str = ".1f") -> str:
    """``"mean +- sd"`` with ``spec`` for both numbers; empty for ``None`` (no paper value)."""
    return "" if pair is None else f"{pair[0]:{spec}} +- {pair[1]:{spec}}"


def markdown_head(*columns: str) -> list[str]:
    """The header and the alignment row of a Markdown table: the first column left, the others right."""
    return ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
