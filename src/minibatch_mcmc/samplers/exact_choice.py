"""Exact minibatch tests by name, for ``warmup`` and ``auto_sample``: ``test="smh"`` (or ``"mhss"``, ``"tunamh"``) picks the test and swaps the
warm-up's Taylor proxy for the GLM proxy with per-datum bounds the test needs (built from ``Model.glm``).

``EXACT_TESTS`` is the one table of names; a new exact test is one line there.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.mhss import mhss, tunamh
from minibatch_mcmc.acceptance.smh import scalable_mh
from minibatch_mcmc.checks import check_choice
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.glm import model_glm_proxy
from minibatch_mcmc.control_variates.influence import Influence
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.data.arrays import DataSource
from minibatch_mcmc.models.base import Model

EXACT_TESTS: dict[str, Callable[[], AcceptanceTest]] = {
    "smh": scalable_mh,
    "mhss": mhss,
    "tunamh": tunamh,
}
"""Name -> factory (default settings) of each exact test that reads per-datum residual bounds."""


def exact_test(test: AcceptanceTest | str) -> AcceptanceTest:
    """``test`` itself, or the exact test of that name (``EXACT_TESTS``)."""
    if isinstance(test, str):
        return EXACT_TESTS[check_choice(test, "test", tuple(EXACT_TESTS))]()
    return test


def needs_bounds(test: AcceptanceTest) -> bool:
    """Whether ``test`` is one of the exact tests (by its declared name), which need per-datum residual bounds."""
    return test.name in EXACT_TESTS


def estimator_for(test: AcceptanceTest, model: Model, source: DataSource, proxy: TaylorProxy, chol: np.ndarray,
                  influence: Influence | None) -> Estimator:
    """The warm-up's estimator: for an exact test the GLM proxy at the proxy's centre with bounds whitened by the Laplace
    factor ``chol`` (a model that is no known GLM is refused, naming what to supply); else the proxy, stratified
    by the rows it cannot see."""
    if needs_bounds(test):
        return model_glm_proxy(model, source, proxy.centre, order=proxy.order, whiten=chol, proxy=proxy)
    return proxy if influence is None else stratify(model, source, proxy, influence.rows)
