"""What the warm-up's phases share (``WarmupContext``) and the knobs a user sets (``WarmupSettings``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.data.arrays import DataSource
from minibatch_mcmc.models.base import Model


class WarmupContext(NamedTuple):
    """What every phase after the centre reads: the model, the data, the test, the estimator, the temperature and the
    test's rule (``decision_rule``); where re-centring or the sized minibatch changes one, ``warmup`` goes on with a ``_replace``."""

    model: Model
    source: DataSource
    test: AcceptanceTest
    estimator: Any
    temperature: float
    rule: str


class WarmupSettings(NamedTuple):
    """The warm-up's knobs, at ``warmup``'s defaults (``warmup(..., settings=WarmupSettings(...))``)."""

    num_windows: int = 20
    """Tuning windows (shared out over the chains with ``num_chains``)."""
    window_size: int = 50
    """Steps per tuning window."""
    newton_steps: int = 10
    """Most streamed full-data Newton steps."""
    num_starts: int = 8
    """Minibatch-Adam searches for other modes (0: none)."""
    stratum: bool = True
    """Whether rows the proxy cannot see are put in an exact stratum."""
    order: int = 2
    """Order of the Taylor proxy."""
    target_accept: float | None = None
    """Target acceptance of a tuned move (None: ``laplace_moves.TARGET_ACCEPT`` for the move and the test's rule)."""
    recentre: bool = False
    """Whether the proxy is rebuilt at the mean of a short tuned run."""


def merged_settings(settings: WarmupSettings | None, **knobs: Any) -> WarmupSettings:
    """``settings`` (default: ``WarmupSettings()``) with each knob given as a keyword (not None) in its place."""
    if settings is not None and not isinstance(settings, WarmupSettings):
        raise TypeError(
            f"settings={settings!r} is not a WarmupSettings: build one with WarmupSettings(num_windows=..., ...)"
        )
    unknown = sorted(set(knobs) - set(WarmupSettings._fields))
    if unknown:
        raise TypeError(f"{unknown} are not warm-up settings; they are {', '.join(WarmupSettings._fields)}")
    return (WarmupSettings() if settings is None else settings)._replace(
        **{k: v for k, v in knobs.items() if v is not None}
    )
