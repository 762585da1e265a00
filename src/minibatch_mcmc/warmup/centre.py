"""The warm-up's centre, phase by phase: the mode and Laplace covariance, the Taylor proxy, other modes, and the rows
the proxy cannot see, each phase's cost measured (``samplers.phase_cost``).

``lean=True`` (the default of ``warmup``): ``warmup.lean.lean_mode`` (one vmapped minibatch Adam for the start and
the multi-start points, Newton passes whose last one is also the proxy pass and the first influence round);
``lean=False``: the earlier path, phase after phase (``find_mode``, ``find_modes``, ``taylor_proxy``,
``influential_rows``), kept to measure what the lean path saves. A GLMM (``Model.glmm``) at order 2 gets the proxy in
predictor space (``control_variates.glmm``) from a pass of its own after the mode's, and the rows of its levels
whose effects move far at posterior scale join the exact stratum (``control_variates.glmm.level_stratum``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates import MAX_DENSE_DIM, Proxy, proxy_for, taylor_proxy
from minibatch_mcmc.control_variates.glmm import GLMMProxy, level_stratum
from minibatch_mcmc.control_variates.influence import Influence, influential_rows
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import DataSource, slice_rows
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.contract import check_model
from minibatch_mcmc.optim.mode import find_mode, laplace_covariance
from minibatch_mcmc.samplers.diagnose import bad_rows_named
from minibatch_mcmc.samplers.phase_cost import PhaseClock, PhaseCost
from minibatch_mcmc.warmup.lean import lean_mode
from minibatch_mcmc.warmup.multistart import LocalMode, distance, find_modes, modes_from_ends, warn_several_modes
from minibatch_mcmc.warmup.no_mode import check_mode

PyTree = Any


class Centre(NamedTuple):
    """What the warm-up centres on, and the cost of each phase that found it."""

    theta_hat: PyTree
    covariance: np.ndarray
    proxy: Proxy
    modes: tuple
    influence: Influence | None
    cost: dict


def with_rows(influence: Influence, rows: np.ndarray) -> Influence:
    """``influence`` with ``rows`` added to its stratum (deviation 0 for the rows it did not find itself)."""
    if rows.size == 0:
        return influence
    merged = np.union1d(influence.rows, rows).astype(np.int32)
    deviation = np.zeros(merged.size, np.asarray(influence.deviation).dtype if influence.deviation.size else np.float64)
    deviation[np.searchsorted(merged, influence.rows)] = influence.deviation
    return influence._replace(rows=merged, deviation=deviation)


def find_centre(model: Model, source: DataSource, theta0: PyTree, key: jax.Array, k_mode: jax.Array, *, temperature: float, order: int,
                adam_steps: int, newton_steps: int, num_starts: int, stratum: bool, lean: bool = True,
                progress: bool = False) -> Centre:
    """Mode, covariance, proxy, other modes and stratum (``key``: the warm-up's key, ``k_mode`` the mode search's)."""
    if int(ravel_pytree(theta0)[0].size) > MAX_DENSE_DIM:
        raise ValueError(
            f"the warm-up needs the Hessian at the mode for the Laplace covariance; the model has more than "
            f"{MAX_DENSE_DIM} parameters for a dense Hessian: build the proxy with taylor_proxy(order=1) and tune by hand"
        )
    check_model(model, theta0, slice_rows(source.arrays(), 0, min(2, source.n)))  # one clear line before any pass
    n, cost, probe = source.n, {}, None
    starts = num_starts + num_starts % 2
    with PhaseClock("mode", n, progress) as clock:
        with bad_rows_named(model, source, theta0):
            if lean:
                found = lean_mode(model, source, theta0, key=k_mode, probe_key=jax.random.fold_in(key, 20), temperature=temperature,
                                  num_starts=starts, newton_steps=newton_steps, order=order)
                mode, probe, rising = found.mode, found.probe, found.rising
            else:
                mode = find_mode(model, source, theta0, key=k_mode, temperature=temperature, adam_steps=adam_steps, newton_steps=newton_steps)
        check_mode(model, mode, n, newton_steps, rising if lean else None)
        cov = laplace_covariance(mode.hessian)
        first = LocalMode(mode.theta_hat, mode.log_posterior, cov)
        modes, used = (), mode.data_used
        if num_starts:
            if lean:
                search = modes_from_ends(model, source, first, found.ends, temperature, newton_steps, 0, 0.0,
                                         slack=0.0 if found.filtered else distance(found.start_end, first))
            else:
                search = find_modes(model, source, first, key=jax.random.fold_in(key, 19), temperature=temperature, num_starts=starts,
                                    newton_steps=newton_steps)
            warn_several_modes(search.modes)
            modes, used = search.modes, used + search.data_used
    if model.glmm is not None and order == 2:  # a GLMM's proxy in predictor space: its own pass after the mode's
        cost["mode"] = clock.cost(used)
        with PhaseClock("proxy", n, progress) as clock:
            proxy = proxy_for(model, source, mode.theta_hat, order)
        cost["proxy"], probe = clock.cost(proxy.setup_data), None  # the lean pass probed the dense proxy's residuals
    elif lean:  # the last Newton pass is the proxy pass: reported as its own phase
        cost["mode"] = clock.cost(used - n, clock.seconds - found.last_pass_seconds)
        proxy, cost["proxy"] = found.proxy, PhaseCost(n, found.last_pass_seconds, 1.0, 0.0)
    else:
        cost["mode"] = clock.cost(used)
        with PhaseClock("proxy", n, progress) as clock:
            proxy = taylor_proxy(model, source, mode.theta_hat, order=order)
        cost["proxy"] = clock.cost(proxy.setup_data)
    influence = None
    if stratum:  # its own key, so the other phases' keys are those of a run without it
        with PhaseClock("influence", n, progress) as clock:
            influence = influential_rows(model, source, proxy, cholesky_factor(cov, cov.shape[0]), key=jax.random.fold_in(key, 20),
                                         temperature=temperature, first=probe)
        cost["influence"] = clock.cost(influence.data_used)
        if isinstance(proxy, GLMMProxy):  # the rows of levels whose effects move far at posterior scale, exact
            influence = with_rows(influence, level_stratum(proxy, source))
    return Centre(mode.theta_hat, cov, proxy, modes, influence, cost)
