"""Where the minibatch sampler cannot serve a GLMM whose groups are small (issue 31): the rule, and full-data NUTS.

Where the levels of a grouping factor have few rows each (median below ``SMALL_GROUP_ROWS``), each group's effect is
held about as much by its prior as by its rows. The proxy in predictor space is then off by a term of order one per
group, and the joint move of all the effects proxy HMC proposes lands where the minibatch estimate needs about every
row to decide it; the Laplace fit at the joint mode also lies far out along the ridge of ``u = sd a`` (non-centred)
and there is no mode at all centred (the funnel). Measured in ``docs/notes-on-the-papers.md`` ("Many small groups"):
at 40 levels of 75 rows the default fit read a third of the rows per test and its chains disagreed (R-hat 1.4, the
group s.d.'s posterior s.d. several times NUTS's), and with the exact full-data Metropolis test the same proposal
still mixed too slowly (R-hat 1.35). ``auto_sample`` routes such a GLMM, when the user named neither a test nor a
proposal, to the level-by-level Gibbs sampler (``warmup.gibbs_route``, measured against this module's NUTS: "Many
small groups: level-by-level Gibbs"); ``full_data_nuts``, NumPyro's NUTS on the full-data log posterior (its own
step-size and diagonal mass adaptation), stays as the reference it is measured against.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.phase_cost import PhaseCost
from minibatch_mcmc.samplers.results import RECORD_FIELDS, SampleResult, constrain_draws
from minibatch_mcmc.samplers.run_options import RunOptions
from minibatch_mcmc.warmup.api import Warmup

PyTree = Any

SMALL_GROUP_ROWS = 100
"""A GLMM factor whose median level has fewer rows than this is sampled level by level (module docstring)."""
JOINT_MOVE_ROWS = 3000
"""A GLMM factor of ``G`` levels of a median ``n`` rows with ``G^2 / n`` above this is sampled level by level too:
a minibatch estimate of a joint move of its effects needs rows per test of that order (docs/notes-on-the-papers.md,
"Many small groups"); measured fine at 1,000 (``G = n = 1000``), wrong at 10,000 (``G = 1000``, ``n = 100``)."""
NUTS_WARMUP = 500
"""NUTS's adaptation steps per chain (NumPyro's and Stan's usual count is 500 to 1000)."""
INIT_RADIUS = 2.0
"""Chains start uniformly within this distance of ``theta0`` in each unconstrained coordinate (Stan's default box)."""


SMALL_DATA_ROWS = 200
"""Up to this many rows ``auto_sample`` samples any model by full-data NUTS when no test or proposal is named: the default
test's 50-row minibatch is then a quarter of the rows or more and the exact stratum (capped at ``N - 50`` rows) cannot
take what the proxy misses. On the non-centred funnel of 5 groups x 20 rows (a NumPyro model via ``from_numpyro``) the
minibatch sampler gave the group s.d. 1.78 +- 1.47 (R-hat 1.29, one warning of a capped stratum) where its posterior
by quadrature is 0.16 +- 0.19."""


def small_data(data: Any) -> str | None:
    """Why ``auto_sample`` samples by full-data NUTS for want of rows (one line), or None."""
    n = as_data_source(data).n
    if n > SMALL_DATA_ROWS:
        return None
    return (
        f"N = {n} rows (at most {SMALL_DATA_ROWS}): a minibatch sampler reads about every row at each step here "
        "(name a test or a proposal to keep it)"
    )


def nuts_fit(
    model: Model, data: Any, theta0: PyTree, reason: str, num_samples: int, num_chains: int, key: jax.Array, run
) -> tuple[SampleResult, Warmup]:
    """``auto_sample`` routed to full-data NUTS (one warning line): the run, and a ``Warmup`` whose ``cost`` holds NUTS's
    ``adaptation`` and ``sampling`` and whose ``kind`` is ``"full_data_nuts"``."""
    announce_route(reason, run)
    result, cost = full_data_nuts(model, data, theta0, num_samples=num_samples, num_chains=num_chains, key=key)
    return result, routed_warmup(theta0, result, cost, "full_data_nuts", reason)


def routed_warmup(theta0: PyTree, result: SampleResult, cost: dict, kind: str, reason: str) -> Warmup:
    """The ``Warmup`` of a fit routed away from the minibatch sampler: no proxy, proposal or test; ``cost`` and ``kind``
    the route's, ``acceptance`` its draws' mean."""
    return Warmup(
        centre=theta0,
        covariance=np.empty((0, 0)),
        proxy=None,
        proposal=None,
        scale=float("nan"),
        test=None,
        acceptance=float(np.mean(result.records["accepted"])),
        cost=cost,
        kind=kind,
        why="rule: " + reason,
    )


def small_groups(model: Model, data: Any) -> str | None:
    """Why a GLMM leaves the minibatch sampler (one line naming the factor and its median rows per level), or None."""
    if model.glmm is None:
        return None
    arrays = as_data_source(data).arrays()
    for f, (name, levels) in enumerate(zip(model.glmm.layout.names, model.glmm.layout.levels)):
        median = float(np.median(np.bincount(np.asarray(arrays[f"g_{f}"]), minlength=levels)))
        if median < SMALL_GROUP_ROWS:
            return (
                f"factor {name!r} has a median of {median:g} rows per level (fewer than {SMALL_GROUP_ROWS}): every "
                f"step of the minibatch sampler would read about every row (name a proposal to keep it)"
            )
        if levels**2 / median > JOINT_MOVE_ROWS:
            return (
                f"factor {name!r} has {levels} levels of a median of {median:g} rows: a joint move of its effects "
                f"needs about levels^2 / rows = {levels**2 / median:.0f} rows per minibatch test (more than "
                f"{JOINT_MOVE_ROWS}; name a proposal to keep the minibatch sampler)"
            )
    return None


def announce_route(reason: str, run: RunOptions) -> None:
    """The one warning line of a routed fit; a ValueError naming the run options full-data NUTS does not take."""
    given = [k for k in ("checkpoint_dir", "data_sharding", "devices") if run._asdict()[k] is not None]
    if given:
        raise ValueError(f"auto_sample routes this model to full-data NUTS ({reason}), which takes none of {given}")
    warnings.warn(f"auto_sample: full-data NUTS, not the minibatch sampler: {reason}", UserWarning, stacklevel=4)


def nuts_records(accept: np.ndarray, steps: np.ndarray, n: int) -> dict:
    """``RECORD_FIELDS`` for NUTS draws: ``accepted`` its mean acceptance probability, ``batch_size`` the rows its
    gradients read (``N`` per leapfrog step), the others 0."""
    records = {k: np.zeros(accept.shape, np.float32) for k in RECORD_FIELDS}
    records["accepted"] = accept.astype(np.float32)
    records["batch_size"] = (steps * n).astype(np.float32)
    return records


def full_data_nuts(
    model: Model,
    data: Any,
    theta0: PyTree,
    *,
    num_samples: int,
    num_chains: int,
    key: jax.Array,
    num_warmup: int = NUTS_WARMUP,
) -> tuple[SampleResult, dict]:
    """NumPyro NUTS on ``log p0 + sum_i log p(y_i | theta)`` over all rows: the run, and its ``adaptation`` and
    ``sampling`` costs (``PhaseCost``: rows read by the gradients, passes over ``N``, seconds)."""
    try:
        from numpyro.infer import MCMC, NUTS
    except ImportError as err:  # an optional extra
        raise ImportError(
            "full-data NUTS samples this model (small groups or few rows): install NumPyro "
            "(pip install 'minibatch-mcmc[numpyro]'), or name a proposal to keep the minibatch sampler"
        ) from err
    source = as_data_source(data)
    rows = jax.tree_util.tree_map(jnp.asarray, source.arrays())
    flat0, unravel = ravel_pytree(theta0)

    def potential(flat: jax.Array) -> jax.Array:
        theta = unravel(flat)
        return -(model.log_prior(theta) + jnp.sum(model.log_lik(theta, rows)))

    k_init, k_run = jax.random.split(key)
    starts = flat0[None, :] + jax.random.uniform(
        k_init, (num_chains, flat0.size), flat0.dtype, -INIT_RADIUS, INIT_RADIUS
    )
    mcmc = MCMC(
        NUTS(potential_fn=potential),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    cost = {}
    for phase in ("adaptation", "sampling"):
        start = time.perf_counter()
        if phase == "adaptation":
            mcmc.warmup(k_run, init_params=starts, extra_fields=("num_steps", "accept_prob"), collect_warmup=True)
        else:
            mcmc.run(mcmc.post_warmup_state.rng_key, extra_fields=("num_steps", "accept_prob"))
        fields = mcmc.get_extra_fields(group_by_chain=True)
        read = int(np.sum(np.asarray(fields["num_steps"], np.int64))) * source.n
        cost[phase] = PhaseCost(read, time.perf_counter() - start, read / max(source.n, 1))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))
    fields = mcmc.get_extra_fields(group_by_chain=True)
    kernel = jax.vmap(jax.vmap(unravel))(jnp.asarray(draws))
    kernel = jax.tree_util.tree_map(np.asarray, kernel)
    records = nuts_records(np.asarray(fields["accept_prob"]), np.asarray(fields["num_steps"]), source.n)
    return routed_result(model, kernel, records, "full_data_nuts", source.n, cost["sampling"].seconds), cost


def routed_result(model: Model, kernel: PyTree, records: dict, method: str, n: int, seconds: float) -> SampleResult:
    """The ``SampleResult`` of a routed fit's draws (``kernel``: unconstrained, ``(chains, draws, ...)``) at
    temperature 1."""
    return SampleResult(
        positions=kernel if model.constrain is None else constrain_draws(model.constrain, kernel),
        records=records,
        method=method,
        n_data=n,
        temperature=np.ones(np.shape(records["accepted"])[1]),
        wall_time=seconds,
        unconstrained=None if model.constrain is None else kernel,
        filled=(),
    )
