"""The warm-up's centre: the mode and Laplace covariance, the Taylor proxy, other modes, and the rows the proxy cannot
see, each phase's cost measured (``samplers.phase_cost``).

``warmup.lean.lean_mode`` finds the mode (one vmapped minibatch Adam for the start and the multi-start points, Newton
passes whose last one is also the proxy pass and the first influence round). A GLMM (``Model.glmm``) at order 2 finds
its mode from its own structure (``warmup.glmm_mode``: Newton on the proxy in predictor space, on a subsample, then on
full passes whose last one builds the proxy; no multi-start search: where it does not converge, the lean search as for
any model, with the proxy in predictor space from a pass of its own after the mode's), and the rows of its levels whose
effects move far at posterior scale join the exact stratum (``control_variates.glmm.level_stratum``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.control_variates import MAX_DENSE_DIM, Proxy, proxy_for
from minibatch_mcmc.control_variates.glmm import GLMMProxy, level_stratum
from minibatch_mcmc.control_variates.influence import Influence, influential_rows
from minibatch_mcmc.control_variates.proposals import cholesky_factor
from minibatch_mcmc.data.arrays import DataSource, take
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.contract import check_model
from minibatch_mcmc.optim.host_blas import host_blas
from minibatch_mcmc.optim.mode import laplace_covariance
from minibatch_mcmc.samplers.diagnose import bad_rows_named
from minibatch_mcmc.samplers.phase_cost import PhaseClock, PhaseCost
from minibatch_mcmc.warmup.glmm_mode import glmm_mode
from minibatch_mcmc.warmup.lean import lean_mode
from minibatch_mcmc.warmup.multistart import LocalMode, distance, modes_from_ends, warn_several_modes
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


def find_centre(
    model: Model,
    source: DataSource,
    theta0: PyTree,
    key: jax.Array,
    k_mode: jax.Array,
    *,
    temperature: float,
    order: int,
    newton_steps: int,
    num_starts: int,
    stratum: bool,
    progress: bool = False,
) -> Centre:
    """Mode, covariance, proxy, other modes and stratum (``key``: the warm-up's key, ``k_mode`` the mode search's)."""
    d = int(ravel_pytree(theta0)[0].size)
    if d > MAX_DENSE_DIM:
        raise ValueError(
            f"the warm-up needs the Hessian at the mode for the Laplace covariance; the model has more than "
            f"{MAX_DENSE_DIM} parameters for a dense Hessian: build the proxy with taylor_proxy(order=1) and tune by hand"
            + (
                "; for this GLMM with one grouping factor, optim.block_newton.block_mode finds the mode and an arrow-shaped "
                "Laplace fit without a dense Hessian, and control_variates.arrow_hmc runs proxy HMC with it as the mass"
                if model.glmm is not None and len(model.glmm.layout.levels) == 1
                else ""
            )
        )
    first_rows = take(source.arrays(), jnp.arange(min(2, source.n)))  # the same rows in every process of a split source
    check_model(model, theta0, first_rows)  # one clear line before any pass
    with host_blas(d):  # the threads of the host's d x d factorisations (optim.host_blas)
        n, cost, probe, tried = source.n, {}, None, 0
        starts = num_starts + num_starts % 2
        if model.glmm is not None and order == 2:
            with PhaseClock("mode", n, progress) as clock:
                with bad_rows_named(model, source, theta0):
                    structured = glmm_mode(
                        model,
                        source,
                        theta0,
                        k_mode,
                        temperature=temperature,
                        newton_steps=newton_steps,
                        probe_key=jax.random.fold_in(key, 20),
                    )
            if structured.mode.converged:  # the last pass built the proxy: reported as its own phase
                mode, pass_seconds = structured.mode, clock.seconds / max(structured.passes, 1)
                cost["mode"] = clock.cost(mode.data_used - n, clock.seconds - pass_seconds)
                cost["proxy"] = PhaseCost(n, pass_seconds, 1.0, 0.0)
                cov = laplace_covariance(mode.hessian)
                return finish(
                    model,
                    source,
                    key,
                    Centre(mode.theta_hat, cov, structured.proxy, (), None, cost),
                    structured.probe,
                    temperature,
                    stratum,
                    progress,
                )
            tried = structured.mode.data_used  # not converged: the lean search as for any model, these rows counted too
        with PhaseClock("mode", n, progress) as clock:
            with bad_rows_named(model, source, theta0):
                found = lean_mode(
                    model,
                    source,
                    theta0,
                    key=k_mode,
                    probe_key=jax.random.fold_in(key, 20),
                    temperature=temperature,
                    num_starts=starts,
                    newton_steps=newton_steps,
                    order=order,
                )
                mode, probe = found.mode, found.probe
            check_mode(model, mode, n, newton_steps, found.rising)
            cov = laplace_covariance(mode.hessian)
            first = LocalMode(mode.theta_hat, mode.log_posterior, cov)
            modes, used = (), mode.data_used + tried
            if num_starts:
                search = modes_from_ends(
                    model,
                    source,
                    first,
                    found.ends,
                    temperature,
                    newton_steps,
                    0,
                    0.0,
                    slack=0.0 if found.filtered else distance(found.start_end, first),
                )
                warn_several_modes(search.modes)
                modes, used = search.modes, used + search.data_used
        if model.glmm is not None and order == 2:  # a GLMM's proxy in predictor space: its own pass after the mode's
            cost["mode"] = clock.cost(used)
            with PhaseClock("proxy", n, progress) as clock:
                proxy = proxy_for(model, source, mode.theta_hat, order)
            cost["proxy"] = clock.cost(proxy.setup_data)
            probe = None  # the lean pass probed the dense proxy's residuals
        else:  # the last Newton pass is the proxy pass: reported as its own phase
            cost["mode"] = clock.cost(used - n, clock.seconds - found.last_pass_seconds)
            proxy, cost["proxy"] = found.proxy, PhaseCost(n, found.last_pass_seconds, 1.0, 0.0)
        return finish(
            model,
            source,
            key,
            Centre(mode.theta_hat, cov, proxy, modes, None, cost),
            probe,
            temperature,
            stratum,
            progress,
        )


def finish(
    model: Model,
    source: DataSource,
    key: jax.Array,
    centre: Centre,
    probe: Any,
    temperature: float,
    stratum: bool,
    progress: bool,
) -> Centre:
    """``centre`` with the rows its proxy cannot see (``influence``) when ``stratum``, their search's cost in its table."""
    if not stratum:
        return centre
    cov, proxy, n = centre.covariance, centre.proxy, source.n
    with PhaseClock("influence", n, progress) as clock:  # its own key: the other phases' keys are a run's without it
        influence = influential_rows(
            model,
            source,
            proxy,
            cholesky_factor(cov, cov.shape[0]),
            key=jax.random.fold_in(key, 20),
            temperature=temperature,
            first=probe,
        )
    centre.cost["influence"] = clock.cost(influence.data_used)
    if isinstance(proxy, GLMMProxy):  # the rows of levels whose effects move far at posterior scale, exact
        influence = with_rows(influence, level_stratum(proxy, source))
    return centre._replace(influence=influence)
