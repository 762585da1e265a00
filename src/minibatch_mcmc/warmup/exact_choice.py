"""The warm-up's estimator for its acceptance test: a test that declares it reads per-datum bounds (the exact tests,
``"smh"``, ``"mhss"``, ``"tunamh"``: ``acceptance.registry``'s contract of its type) swaps the Taylor proxy for the
GLM proxy with the bounds it needs (built from ``Model.glm``); a minibatch test keeps the proxy and its exact stratum,
and where the influence search found rows the proxy misses, draws its minibatch by the rows' probe weights when they
help (``control_variates.importance.weighted_estimator``: the held-out variance at most halved, and the uniform
estimate noisy enough to matter). Elsewhere no weights are computed (no pass, the same draws as before). Which one:
the estimator's ``name`` (``...+importance``) and its measured ``variance_ratio``, in ``Warmup.estimator``.
"""

from __future__ import annotations

import jax
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.registry import contract
from minibatch_mcmc.control_variates.base import Estimator, Proxy
from minibatch_mcmc.control_variates.glm import model_glm_proxy
from minibatch_mcmc.control_variates.importance import weighted_estimator
from minibatch_mcmc.control_variates.influence import Influence
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.data.arrays import DataSource
from minibatch_mcmc.models.base import Model


def needs_bounds(test: AcceptanceTest) -> bool:
    """Whether ``test`` declares it reads per-datum residual bounds (``acceptance.registry``: its type's contract)."""
    return contract(test).reads_bounds


def estimator_for(test: AcceptanceTest, model: Model, source: DataSource, proxy: Proxy, chol: np.ndarray,
                  influence: Influence | None) -> Estimator:
    """The warm-up's estimator: for an exact test the GLM proxy at the proxy's centre with bounds whitened by the Laplace
    factor ``chol`` (a model that is no known GLM is refused, naming what to supply); else the proxy, stratified
    by the rows it cannot see, and drawn by its rows' weights where some were found and the weights help."""
    if needs_bounds(test):
        return model_glm_proxy(model, source, proxy.centre, order=proxy.order, whiten=chol, proxy=proxy)
    if influence is None or influence.rows.size == 0:
        return proxy
    base = stratify(model, source, proxy, influence.rows)
    return weighted_estimator(model, base, source, proxy.centre, chol, jax.random.key(0))[0]
