"""The warm-up's estimator for its acceptance test: a test that declares it reads per-datum bounds (the exact tests,
``"smh"``, ``"mhss"``, ``"tunamh"``: ``acceptance.registry``'s contract of its type) swaps the Taylor proxy for the
GLM proxy with the bounds it needs (built from ``Model.glm``); a minibatch test keeps the proxy and its exact stratum,
and where the influence search found rows the proxy misses, draws its minibatch by the rows' probe weights when they
help (``control_variates.importance.weighted_estimator``: the held-out variance at most halved, and the uniform
estimate noisy enough to matter). Elsewhere no weights are computed (no pass, the same draws as before). Which one:
the estimator's ``name`` (``...+importance``) and its measured ``variance_ratio``, in ``Warmup.estimator``.

The default test of a GLM that asks for it (``GLMSpec.exact_default``: a NumPyro model ``from_numpyro`` recognised as one;
the library's hand-written GLMs keep the penalty test unless they set it) is the exact
``EXACT_DEFAULT`` where it is at least as fast: ``exact_rows`` predicts the rows it reads per step from the bounds alone
(their total over pairs of Laplace draws, the moves of the default proxy HMC; no data read), and the warm-up keeps the
exact test where that is at most the penalty test's minibatch (``benchmarks/numpyro_glm.py`` measures both).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.registry import contract, named_test
from minibatch_mcmc.control_variates.base import Estimator, Proxy
from minibatch_mcmc.control_variates.glm import model_glm_proxy
from minibatch_mcmc.control_variates.importance import weighted_estimator
from minibatch_mcmc.control_variates.influence import Influence
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.data.arrays import DataSource
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.warmup.context import WarmupContext


def needs_bounds(test: AcceptanceTest) -> bool:
    """Whether ``test`` declares it reads per-datum residual bounds (``acceptance.registry``: its type's contract)."""
    return contract(test).reads_bounds


def estimator_for(
    test: AcceptanceTest, model: Model, source: DataSource, proxy: Proxy, chol: np.ndarray, influence: Influence | None
) -> Estimator:
    """The warm-up's estimator: for an exact test the GLM proxy at the proxy's centre with bounds whitened by the Laplace
    factor ``chol`` (a model that is no known GLM is refused, naming what to supply); else the proxy, stratified
    by the rows it cannot see, and drawn by its rows' weights where some were found and the weights help."""
    if needs_bounds(test):
        return model_glm_proxy(model, source, proxy.centre, order=proxy.order, whiten=chol, proxy=proxy)
    if influence is None or influence.rows.size == 0:
        return proxy
    base = stratify(model, source, proxy, influence.rows)
    return weighted_estimator(model, base, source, proxy.centre, chol, jax.random.key(0))[0]


EXACT_DEFAULT = "smh"
"""The exact test a GLM gets by default (``acceptance.registry.TESTS``): Scalable MH."""
PAIRS = 256
"""Pairs of Laplace draws over which ``exact_rows`` averages the bounds' total."""


def default_exact(model: Model) -> AcceptanceTest | None:
    """``EXACT_DEFAULT`` for a GLM that asks for it (``Model.glm.exact_default``: a recognised NumPyro GLM), else None."""
    return named_test(EXACT_DEFAULT) if model.glm is not None and model.glm.exact_default else None


def exact_rows(estimator: Estimator, chol: np.ndarray, key: jax.Array, pairs: int = PAIRS) -> float:
    """An exact test's predicted rows per step: the mean of the bounds' total ``sum_i b_i(theta, theta')`` over
    ``pairs`` pairs of independent Laplace draws (``chol``: the Laplace factor), from the GLM proxy alone."""
    centre = estimator.proxy.centre
    z = jax.random.normal(key, (2, pairs, centre.shape[0]), centre.dtype) @ jnp.asarray(chol, centre.dtype).T
    factor = jax.vmap(estimator.bound_factor)(centre + z[0], centre + z[1])
    return float(estimator.norm_sum * jnp.mean(factor))


def exact_or_penalty(
    ctx: WarmupContext,
    proxy: Proxy,
    chol: np.ndarray,
    influence: Influence | None,
    penalty: AcceptanceTest,
    key: jax.Array,
    progress: bool,
) -> WarmupContext:
    """``ctx`` with its exact default test kept where ``exact_rows`` predicts at most ``penalty.batch_size`` rows per step,
    else with ``penalty`` and its estimator; a line says which (always when it falls back)."""
    rows = exact_rows(ctx.estimator, chol, key)
    keep = rows <= penalty.batch_size
    if progress or not keep:
        print(
            f"warm-up: test {ctx.test.name if keep else penalty.name} (a GLM: the exact test's bounds predict {rows:.3g} rows "
            f"per step, the penalty test reads {penalty.batch_size})",
            flush=True,
        )
    if keep:
        return ctx
    rule = "barker" if penalty.decision_rule == "barker" else "metropolis"
    return ctx._replace(
        test=penalty, estimator=estimator_for(penalty, ctx.model, ctx.source, proxy, chol, influence), rule=rule
    )
