"""The proposal interface: a draw plus the log ratio of reverse to forward proposal densities."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

PyTree = Any


class Proposal(NamedTuple):
    """``sample(key, theta) -> (theta_new, log_q_ratio)`` with ``log q(theta|theta_new) - log q(theta_new|theta)``."""

    sample: Callable[[jax.Array, PyTree], tuple[PyTree, jax.Array]]
    symmetric: bool
    name: str = "proposal"
