"""What to do when the mode search did not converge: stop naming the diverging parameters, or warn.

The remaining distance to the mode of the local quadratic, in Laplace standard deviations, is the Newton
decrement ``sqrt(g' (-H)^{-1} g)``. Below ``NEAR_MODE`` the end point is within a fraction of a posterior
s.d. of a mode: the proxy is centred a little off it, which costs efficiency but not exactness (its control
variates are exact in expectation at any centre), so the warm-up warns. Further away, or where ``-H`` is not
positive definite, there is no mode to centre on: a log posterior still climbing after the full-data
Newton steps is the signature of a likelihood with no maximum along some direction (separable classes) and a
prior too weak (or flat: an improper posterior) to make one, or of a hierarchical funnel (``funnel``: a scale
parameter driven to 0 while the group effects it scales shrink together), so the warm-up stops with ``NoModeError``
naming the cause.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.models.base import Model
from minibatch_mcmc.optim.mode import ModeResult, newton_direction
from minibatch_mcmc.warmup.subsample_newton import RISE_SDS

PyTree = Any

NEAR_MODE = 0.5
"""Newton decrement (Laplace s.d.s to the mode) below which a non-converged search only warns."""

SHOWN = 5
"""Diverging parameters named in the message, at most."""

WEAK_PRIOR = 0.01
"""Share of the curvature along the diverging direction below which the prior is called too weak."""


FUNNEL_RATIO = 2.0
"""Factor by which a coordinate's prior curvature falls when a candidate scale parameter's unconstrained value rises by 1,
at or above which the coordinate is a group effect of that scale: under ``eta_j ~ N(mu, sigma)`` with ``sigma = e^u``
(NumPyro's transform of a positive site) it falls ``e^2 = 7.4``-fold; a prior that does not couple them leaves it
unchanged (factor 1)."""


class NoModeError(ValueError):
    """The warm-up found no mode to centre the proxy on (a log posterior still increasing, or not concave)."""


def flat_names(theta: PyTree) -> list[str]:
    """A readable name for every element of ``theta`` in flattened (``ravel_pytree``) order, e.g. ``theta[1]``, ``['w'][0, 2]``."""
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(theta)[0]:
        stem = "theta" + jax.tree_util.keystr(path)
        shape = np.shape(leaf)
        names += (
            [f"{stem}[{', '.join(map(str, i))}]" if shape else stem for i in np.ndindex(*shape)] if shape else [stem]
        )
    return names


def newton_decrement(grad: np.ndarray, hessian: np.ndarray) -> tuple[float, np.ndarray]:
    """``sqrt(g' d)`` with ``d`` the (eigenvalue-safeguarded) Newton step, and ``d``."""
    step = newton_direction(hessian, grad)
    return float(np.sqrt(max(float(grad @ step), 0.0))), step


def diverging(step: np.ndarray, names: list[str], theta: np.ndarray, label: str = "Newton step") -> str:
    """The parameters carrying most of the Newton step (or a direction): name, current value and the step."""
    order = np.argsort(-np.abs(step))
    big = [int(i) for i in order if abs(step[i]) >= 0.1 * abs(step[order[0]])][:SHOWN]
    return ", ".join(f"{names[i]} = {theta[i]:.4g} ({label} {step[i]:+.4g})" for i in big)


def prior_terms(model: Model, theta: PyTree) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """The log prior and its Hessian at a flat parameter (``ravel_pytree`` of ``theta``'s structure), compiled as one
    program: the no-mode messages evaluate it at the end point and at shifted points of the same shape."""
    unravel = ravel_pytree(theta)[1]
    prior_fn = lambda x: model.log_prior(unravel(x))  # noqa: E731 - the prior as a function of the flat parameter
    return jax.jit(lambda x: (prior_fn(x), jax.hessian(prior_fn)(x)))


def likely_cause(mode: ModeResult, step: np.ndarray, n: int, terms: Callable) -> str:
    """Separable data and a weak or flat prior, with the measured prior share of the curvature and log-likelihood per row
    (``terms``: the model's ``prior_terms``)."""
    flat = ravel_pytree(mode.theta_hat)[0]
    prior_value, prior_hessian = terms(flat)
    u = step / max(float(np.linalg.norm(step)), np.finfo(np.float64).tiny)
    prior_h = np.asarray(prior_hessian, np.float64)
    total, prior = -float(u @ mode.hessian @ u), -float(u @ prior_h @ u)
    share = prior / total if total > 0 else 0.0
    per_row = (mode.log_posterior - float(prior_value)) / n
    weak = "flat (an improper posterior)" if prior == 0 else f"too weak there (it gives {share:.2%} of the curvature)"
    return (
        f"the likelihood has no maximum along this direction (e.g. classes separable by these parameters in a "
        f"classification model: the log-likelihood per row is {per_row:.4g}) and the prior is "
        f"{weak if share < WEAK_PRIOR else f'giving {share:.2%} of the curvature'}"
    )


def funnel(mode: ModeResult, step: np.ndarray, terms: Callable) -> tuple[int, list[int]] | None:
    """The hierarchical scale parameter that the diverging direction drives down (its flat index) and its group effects
    (at least two coordinates whose prior curvature it scales by ``FUNNEL_RATIO`` or more), or None (``terms``: the
    model's ``prior_terms``, one compilation for every candidate)."""
    order = np.argsort(-np.abs(step))
    candidates = [int(i) for i in order if step[i] < 0 and abs(step[i]) >= 0.1 * abs(step[order[0]])]  # driven down
    if not candidates:
        return None
    flat = ravel_pytree(mode.theta_hat)[0]
    here = np.diag(np.asarray(terms(flat)[1], np.float64))
    for k in candidates:
        wider = np.diag(np.asarray(terms(flat.at[k].add(1.0))[1], np.float64))  # the scale e-fold larger
        ok = np.isfinite(here) & np.isfinite(wider) & (here < 0) & (np.arange(here.size) != k)
        group = [int(j) for j in np.flatnonzero(ok) if -here[j] >= FUNNEL_RATIO * abs(wider[j])]
        if len(group) >= 2:
            return k, group
    return None


def funnel_cause(names: list[str], flat: np.ndarray, scale: int, group: list[int]) -> str:
    """The cause and the fix for a funnel: the scale parameter, its value, and its group effects."""
    effects = ", ".join(names[j] for j in group[:SHOWN]) + (
        f" and {len(group) - SHOWN} more" if len(group) > SHOWN else ""
    )
    return (
        f"the posterior has a funnel (hierarchical scale parameter {names[scale]} goes to 0 with the group effects {effects}: "
        f"its unconstrained value is {flat[scale]:.4g} and falling, and the log posterior grows without bound as the effects "
        "shrink to a common value): no Gaussian mode. Reparameterise non-centred (each effect = mean + scale * a standard "
        "normal; in NumPyro numpyro.infer.reparam.LocScaleReparam(0)), or give the scale a prior that keeps it away from 0 "
        "(e.g. a gamma or log-normal)"
    )


def check_mode(model: Model, mode: ModeResult, n: int, newton_steps: int, rising: np.ndarray | None = None) -> None:
    """Return if ``mode`` converged; warn if it is within ``NEAR_MODE`` Laplace s.d.s of a mode; else raise ``NoModeError``.

    ``rising``: a direction along which the log-likelihood keeps rising from a converged ``mode`` (found by the lean search):
    the mode is held there only by the prior (or, under a flat prior, is the rounding's end of an unbounded climb)."""
    flat = np.asarray(ravel_pytree(mode.theta_hat)[0], np.float64)
    if rising is not None and mode.hessian is not None:
        names, terms = flat_names(mode.theta_hat), prior_terms(model, mode.theta_hat)
        raise NoModeError(
            f"the warm-up found no usable posterior mode: the log-likelihood keeps rising without a maximum along a direction "
            f"(probed out to {RISE_SDS[-1]:g} Laplace s.d.s) and the search stopped only where the curvature vanishes. Diverging "
            f"parameters: {diverging(rising, names, flat, 'direction')}. Likely cause: {likely_cause(mode, rising, n, terms)}. Give these "
            "parameters a proper prior with a smaller scale, or drop the separating feature"
        )
    if mode.converged or mode.hessian is None or mode.gradient is None:
        return
    grad = np.asarray(mode.gradient, np.float64)
    decrement, step = newton_decrement(grad, mode.hessian)
    concave = bool(np.all(np.linalg.eigvalsh(-0.5 * (mode.hessian + mode.hessian.T)) > 0))
    if concave and decrement < NEAR_MODE:
        warnings.warn(
            f"the mode search did not reach its tolerance (gradient norm {mode.grad_norm:.3g}) but the end point is "
            f"{decrement:.3g} Laplace s.d.s from the mode (Newton decrement): the proxy is centred slightly off the mode, "
            "which costs efficiency, not exactness",
            stacklevel=3,
        )
        return
    where = (
        "the log posterior is not concave there"
        if not concave
        else f"its local quadratic puts a mode {decrement:.4g} Laplace s.d.s further on (Newton decrement)"
    )
    names, terms = flat_names(mode.theta_hat), prior_terms(model, mode.theta_hat)
    found = funnel(mode, step, terms)
    cause = (
        funnel_cause(names, flat, *found)
        if found is not None
        else f"{likely_cause(mode, step, n, terms)}. Give these parameters a proper prior with a smaller scale, or drop the "
        "separating feature; if the posterior is proper and the mode is only far, raise newton_steps (of warmup or auto_sample)"
    )
    raise NoModeError(
        f"the warm-up found no posterior mode: after {newton_steps} full-data Newton steps the log posterior "
        f"({mode.log_posterior:.6g}) still increases and {where}. Diverging parameters: "
        f"{diverging(step, names, flat)}. Likely cause: {cause}"
    )
