"""The model contract, checked once before any pass: one clear error line where a model breaks it.

A ``Model`` promises a finite scalar ``log_prior(theta)`` at the start and a ``log_lik(theta, batch)`` of shape
``(b,)``, floating point, finite at the start, and a pure function of ``(theta, batch)``. ``check_model`` evaluates
both on the first two rows in one small compiled function (``compiling.ONE_OFF_WORK``: fast compilation), tracing
``log_lik`` twice: a value drawn with ``np.random`` inside ``log_lik`` is a constant fixed at trace time, different in
each trace, so the two traces disagree (under sampling every compiled function would see its own constant, and the
chain accepts nothing or the wrong target). A declared shared term (``Model.shared``) must split ``log_lik`` to
the same tolerance. A scalar, ``(b, 1)`` or ``(b, 3)`` result would otherwise fail
13-18 frames deep in the mode search, or broadcast silently into a wrong sum.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from minibatch_mcmc.compiling import ONE_OFF_WORK, compile_options
from minibatch_mcmc.models.base import Model

PyTree = Any

SAME_VALUES = 64
"""Float epsilons (relative to ``1 + |value|``) within which two traces of ``log_lik`` count as giving the same values:
one compiled program evaluates both, so a pure ``log_lik`` gives them bit for bit; the margin only absorbs a
rounding difference between two fusions of the same operations, while a trace-time ``np.random.normal()`` moves
them by O(1)."""

SHOWN = 4
"""Rows named in a message, at most."""


def describe(value: Any) -> str:
    """A returned value in words: ``a scalar``, ``shape (2, 3)``, with its dtype."""
    shape = np.shape(value)
    return f"{'a scalar' if shape == () else f'shape {shape}'} of dtype {np.asarray(value).dtype}"


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two evaluations agree to ``SAME_VALUES`` epsilons of their dtype (NaN equal to NaN, inf to inf)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    eps = float(np.finfo(a.dtype).eps) if np.issubdtype(a.dtype, np.floating) else 0.0
    both = np.isfinite(a) & np.isfinite(b)
    close = np.abs(np.where(both, a, 0.0) - np.where(both, b, 0.0)) <= SAME_VALUES * eps * (
        1.0 + np.abs(np.where(both, a, 0.0))
    )
    return bool(np.all(np.where(both, close, (a == b) | (np.isnan(a) & np.isnan(b)))))


def impure_message(name: str, what: str, first: np.ndarray, second: np.ndarray) -> str:
    """The error for a ``log_lik`` or ``log_prior`` that gave two values for the same inputs."""
    shown = lambda v: np.array2string(np.ravel(np.asarray(v))[:SHOWN], precision=6)  # noqa: E731 - the first values
    return (
        f"model {name!r}: {what} gave different values for the same theta and rows in two traces ({shown(first)}, then "
        f"{shown(second)}): it must be a pure function of its arguments; draw random numbers with jax.random and an "
        "explicit key, never with numpy (np.random inside the function is a constant fixed when JAX traces it, "
        "different in every compiled function)"
    )


def check_values(name: str, rows: int, prior: Any, prior_again: Any, lik: Any, lik_again: Any) -> None:
    """One ``ValueError`` where the start's values break the contract (``rows``: the batch size ``log_lik`` was given)."""
    if np.shape(prior) != () or not np.issubdtype(np.asarray(prior).dtype, np.floating):
        raise ValueError(
            f"model {name!r}: log_prior returned {describe(prior)}; it must return a floating-point scalar"
        )
    if not np.isfinite(prior):
        raise ValueError(f"model {name!r}: log_prior is {float(prior)} at the start; start inside the prior's support")
    if np.shape(lik) != (rows,) or not np.issubdtype(np.asarray(lik).dtype, np.floating):
        raise ValueError(
            f"model {name!r}: log_lik(theta, batch) returned {describe(lik)} for a batch of {rows} rows; it must "
            f"return one floating-point value per row, shape ({rows},) (sum over each row's own axes, not the batch's)"
        )
    bad = np.flatnonzero(~np.isfinite(lik))
    if bad.size:
        raise ValueError(
            f"model {name!r}: log_lik is not finite at the start for rows {bad[:SHOWN].tolist()} (values "
            f"{np.asarray(lik)[bad[:SHOWN]].tolist()}); check those rows and that the start is in the model's support"
        )
    if not same_values(prior, prior_again):
        raise ValueError(impure_message(name, "log_prior", prior, prior_again))
    if not same_values(lik, lik_again):
        raise ValueError(impure_message(name, "log_lik", lik, lik_again))


def check_model(model: Model, theta: PyTree, rows: PyTree) -> None:
    """Check ``model``'s contract at ``theta`` on ``rows`` (one or two rows, their leading axis): one clear ``ValueError``."""
    size = int(np.shape(jax.tree_util.tree_leaves(rows)[0])[0])
    if model.check_shapes is not None:
        model.check_shapes(theta, rows)
    traced = []

    def evaluate(theta: PyTree, rows: PyTree) -> tuple:
        prior, prior_again = model.log_prior(theta), model.log_prior(theta)
        traced.append(True)  # the errors below are the likelihood's
        lik = model.log_lik(theta, rows)
        split = lik if model.shared is None else model.shared.rows(theta, rows) + model.shared.value(theta)
        return prior, prior_again, lik, model.log_lik(theta, rows), split

    work = 2 * size * sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(theta))
    try:  # one compiled function, fast-compiled: op by op a NumPyro model's trace took seconds
        out = jax.jit(evaluate, compiler_options=compile_options(work, ONE_OFF_WORK))(theta, rows)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        which = "log_lik" if traced else "log_prior"
        shapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), rows)
        pshapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), theta)
        raise ValueError(
            f"model {model.name!r}: {which} failed on the start (shapes {pshapes}) and {size} rows of the data "
            f"(shapes {shapes}): {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from None
    check_values(model.name, size, *(np.asarray(a) for a in out[:4]))
    if not same_values(np.asarray(out[2]), np.asarray(out[4])):
        raise ValueError(
            f"model {model.name!r}: shared.rows(theta, batch) + shared.value(theta) gives "
            f"{np.ravel(np.asarray(out[4]))[:SHOWN].tolist()} where log_lik gives "
            f"{np.ravel(np.asarray(out[2]))[:SHOWN].tolist()} at the start; the declared shared term must split "
            "log_lik exactly: log_lik(theta, batch)_i = rows(theta, batch)_i + value(theta)"
        )
