"""One home for the checks of user settings: each returns the cleaned value or raises a ``ValueError``
that names the setting, the value given and what is allowed.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

_INTEGER = (int, np.integer)
_REAL = (int, float, np.integer, np.floating)


def check_int(value: Any, name: str, low: int | None = None, high: int | None = None, why: str = "") -> int:
    """An integer (not a bool) in ``[low, high]``; ``why`` is appended to the message."""
    ok = isinstance(value, _INTEGER) and not isinstance(value, (bool, np.bool_))
    if ok and low is not None and value < low:
        ok = False
    if ok and high is not None and value > high:
        ok = False
    if not ok:
        raise ValueError(f"{name}={value!r} must be {_describe_int(low, high)}{_because(why)}")
    return int(value)


def check_real(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    why: str = "",
    allowed: str = "",
) -> float:
    """A finite real number (not a bool) in the interval given by ``low``/``high`` (open ends on request).

    ``allowed``, if given, replaces the generated words for the interval in the message.
    """
    ok = isinstance(value, _REAL) and not isinstance(value, (bool, np.bool_)) and math.isfinite(float(value))
    if ok and low is not None:
        ok = float(value) > low if low_open else float(value) >= low
    if ok and high is not None:
        ok = float(value) < high if high_open else float(value) <= high
    if not ok:
        words = allowed or _describe_real(low, high, low_open, high_open)
        raise ValueError(f"{name}={value!r} must be {words}{_because(why)}")
    return float(value)


def check_positive(value: Any, name: str, why: str = "") -> float:
    """A finite real number ``> 0``."""
    return check_real(value, name, 0.0, low_open=True, why=why)


def check_probability(value: Any, name: str, why: str = "") -> float:
    """A number in the open interval ``(0, 1)``."""
    return check_real(value, name, 0.0, 1.0, low_open=True, high_open=True, why=why)


def check_bool(value: Any, name: str) -> bool:
    """``True`` or ``False`` (not a truthy stand-in)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}={value!r} must be True or False")
    return bool(value)


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> Any:
    """One of ``choices``."""
    if value not in tuple(choices):
        raise ValueError(f"{name}={value!r} must be one of {', '.join(repr(c) for c in choices)}")
    return value


def _describe_int(low: int | None, high: int | None) -> str:
    """Words for an integer range."""
    if low is not None and high is not None:
        return f"an integer in [{low}, {high}]"
    if low is not None:
        return "a positive integer" if low == 1 else f"an integer >= {low}"
    if high is not None:
        return f"an integer <= {high}"
    return "an integer"


def _describe_real(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """Words for a real interval."""
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return "a finite number"


def _because(why: str) -> str:
    """`` (why)`` or nothing."""
    return f" ({why})" if why else ""
