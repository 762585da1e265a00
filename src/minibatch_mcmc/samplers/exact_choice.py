"""Acceptance tests by name, for ``warmup`` and ``auto_sample``: ``test="penalty"`` (or ``"mhminibatch"``) picks that
minibatch test with its default settings; an exact test (``"smh"``, ``"mhss"``, ``"tunamh"``) also swaps the warm-up's
Taylor proxy for the GLM proxy with per-datum bounds the test needs (built from ``Model.glm``).

``TESTS`` is the one table of names; a new test is one line there (``EXACT_TESTS``: its names that read bounds).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.mhminibatch import mh_minibatch
from minibatch_mcmc.acceptance.mhss import mhss, tunamh
from minibatch_mcmc.acceptance.penalty import penalty_test
from minibatch_mcmc.acceptance.smh import scalable_mh
from minibatch_mcmc.checks import check_choice
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.control_variates.glm import model_glm_proxy
from minibatch_mcmc.control_variates.influence import Influence
from minibatch_mcmc.control_variates.stratified import stratify
from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.data.arrays import DataSource
from minibatch_mcmc.models.base import Model

class NamedTest(NamedTuple):
    """A test ``warmup`` knows by name: its factory (default settings) and whether it reads per-datum residual bounds."""

    build: Callable[[], AcceptanceTest]
    bounds: bool


TESTS: dict[str, NamedTest] = {
    "mhminibatch": NamedTest(lambda: mh_minibatch(batch_size=50), False),
    "penalty": NamedTest(penalty_test, False),
    "smh": NamedTest(scalable_mh, True),
    "mhss": NamedTest(mhss, True),
    "tunamh": NamedTest(tunamh, True),
}
"""Name -> the test with its default settings; ``bounds``: an exact test that needs the GLM's per-datum bounds."""
EXACT_TESTS = tuple(name for name, t in TESTS.items() if t.bounds)
"""The names of ``TESTS`` that read per-datum residual bounds (the exact tests)."""


def named_test(test: AcceptanceTest | str) -> AcceptanceTest:
    """``test`` itself, or the test of that name (``TESTS``)."""
    if isinstance(test, str):
        return TESTS[check_choice(test, "test", tuple(TESTS))].build()
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
