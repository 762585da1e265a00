"""Acceptance tests: pure ``decide(key, stats) -> TestOutcome`` functions, one module each."""

from minibatch_mcmc.acceptance.austere import (
    MAX_DECISION_ERROR,
    AccuracyWarning,
    AustereMH,
    austere_mh,
    austere_mh_adaptive,
    austere_mh_for_error,
)
from minibatch_mcmc.acceptance.austere_design import design_for_error, worst_case_error
from minibatch_mcmc.acceptance.base import AcceptanceTest, Statistics, TestOutcome
from minibatch_mcmc.acceptance.exact import BarkerTest, MetropolisTest
from minibatch_mcmc.acceptance.mhminibatch import MHMinibatch, mh_minibatch
from minibatch_mcmc.acceptance.mhminibatch_skew import MHMinibatchSkew, mh_minibatch_skew
from minibatch_mcmc.acceptance.mhss import MHSS, TunaMH, mhss, tunamh
from minibatch_mcmc.acceptance.mhsublhd import MHSubLhd, mh_sublhd
from minibatch_mcmc.acceptance.mint import MINT, MINTSettings, mint, mint_temperature, resolve_mint
from minibatch_mcmc.acceptance.naive import NaiveMinibatch, naive_minibatch
from minibatch_mcmc.acceptance.none import NoTest, no_test
from minibatch_mcmc.acceptance.penalty import PenaltyTest, penalty_test
from minibatch_mcmc.acceptance.smh import ScalableMH, scalable_mh
from minibatch_mcmc.data.passes import full_data_sum

__all__ = [
    "AcceptanceTest",
    "Statistics",
    "TestOutcome",
    "full_data_sum",
    "BarkerTest",
    "MetropolisTest",
    "MHMinibatch",
    "mh_minibatch",
    "MHMinibatchSkew",
    "mh_minibatch_skew",
    "PenaltyTest",
    "penalty_test",
    "AustereMH",
    "austere_mh",
    "austere_mh_adaptive",
    "austere_mh_for_error",
    "AccuracyWarning",
    "MAX_DECISION_ERROR",
    "design_for_error",
    "worst_case_error",
    "MHSubLhd",
    "mh_sublhd",
    "NaiveMinibatch",
    "naive_minibatch",
    "MINT",
    "MINTSettings",
    "mint",
    "mint_temperature",
    "resolve_mint",
    "NoTest",
    "no_test",
    "ScalableMH",
    "scalable_mh",
    "MHSS",
    "mhss",
    "TunaMH",
    "tunamh",
]
