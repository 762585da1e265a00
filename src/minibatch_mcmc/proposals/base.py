"""The proposal interface: a draw plus the log ratio of reverse to forward proposal densities."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

PyTree = Any

GradientFn = Callable[[PyTree], PyTree]
"""``grad_log_target(theta)``: gradient of the (minibatch estimate of the) tempered log posterior."""


class Proposal(NamedTuple):
    """A proposal ``q(theta' | theta)``.

    ``sample(key, theta) -> (theta_new, log_q_ratio)`` with ``log q(theta|theta_new) - log q(theta_new|theta)``.
    A gradient proposal (``gradient_batch_size`` set) is instead called as
    ``sample(key, theta, grad_log_target)``: the kernel builds ``grad_log_target`` from one
    minibatch of ``gradient_batch_size`` points drawn without replacement (``0`` means all ``N``),
    and the same minibatch serves the forward and the reverse move, so the minibatch is an
    auxiliary variable drawn independently of ``theta`` and the MH correction stays valid.
    """

    sample: Callable[..., tuple[PyTree, jax.Array]]
    symmetric: bool
    name: str = "proposal"
    gradient_batch_size: int | None = None
    """``None`` for a gradient-free proposal; else the gradient minibatch size (``0``: full data)."""
