"""The acceptance tests known by name: one row each, declaring as data what the test needs from its callers.

``TESTS`` is the one table that ``warmup``/``auto_sample`` (``test="name"``), the ``sample`` command (``--test``)
and the tests' own tables read. A row names the test, its class, a builder with default settings, a builder from the
command line's ``--batch-size``/``--sigma``, and the test's contract: whether it reads per-datum residual bounds (the
exact tests: the warm-up then builds the GLM proxy's bounds), whether the warm-up may size its minibatch for a
global move (``warmup.batch_choice``) and which of the optional per-step records it fills (``summary()`` shows those). ``contract(test)`` finds the row by the test's type, not its name, so a
test built by hand (``scalable_mh(chunk_size=16)``) declares the same; a type with no row declares neither.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from minibatch_mcmc.acceptance.austere import AustereMH, austere_mh
from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.acceptance.exact import BarkerTest, MetropolisTest
from minibatch_mcmc.acceptance.mhminibatch import MHMinibatch, mh_minibatch
from minibatch_mcmc.acceptance.mhss import MHSS, mhss, mhss_rows_ahead, tunamh
from minibatch_mcmc.acceptance.mhsublhd import MHSubLhd, mh_sublhd
from minibatch_mcmc.acceptance.naive import NaiveMinibatch, naive_minibatch
from minibatch_mcmc.acceptance.penalty import PenaltyTest, penalty_test
from minibatch_mcmc.acceptance.smh import ScalableMH, scalable_mh, smh_rows_ahead
from minibatch_mcmc.acceptance.thinning import Draw
from minibatch_mcmc.checks import check_choice


class Contract(NamedTuple):
    """What a test declares it needs from the warm-up, beyond the ``AcceptanceTest`` protocol."""

    reads_bounds: bool = False
    """An exact test that reads per-datum residual bounds (``Statistics.bounds``): the warm-up builds the GLM proxy with
    bounds for it, no exact stratum, and ``auto_sample`` skips the proxy check (its draws do not rest on the proxy)."""
    sized_batch: bool = False
    """The warm-up may set its ``batch_size`` (``test._replace(batch_size=...)``) when it chose the test itself and the
    move is global (``warmup.batch_choice`` predicts the normal-mean bound of the penalty test's minibatch)."""
    rows_ahead: Callable[[Any, jax.Array, int, Draw | None], jax.Array] | None = None
    """``rows_ahead(test, key, n_data, draw)``: the rows a bound-based step with test key ``key`` reads first, named
    before it runs from the key and the bounds' state-free ``draw`` (``Estimator.row_draw``) alone, a fixed number
    (``thinning.ROWS_AHEAD``) of them; an out-of-core run reads them ahead (``samplers.planned_runner``). None: the
    test's ``first_rows`` names them."""
    records: tuple[str, ...] | None = None
    """The records of ``OPTIONAL_RECORDS`` the test fills (the others stay 0 in every step): ``summary()`` reports only
    these; ``None`` (a type with no row): not declared, every record is reported."""


OPTIONAL_RECORDS = (
    "epsilon",
    "residual_sd",
    "pvalue_threshold",
    "half_width",
    "expected_batch_size",
    "fallback",
    "bound_exceeded",
)
"""The per-step records that only some tests fill (``accepted``, ``batch_size``, ``hidden_data``, ``s2`` and
``delta_star`` are every test's)."""
MINIBATCH_CLT = ("epsilon", "residual_sd")
"""What MHminibatch and the penalty test fill: the CLT error bound on the minibatch mean and the terms' s.d."""
BOUNDED = ("expected_batch_size", "fallback", "bound_exceeded")
"""What the bound-based exact tests (Scalable MH, MH-SS, TunaMH) fill."""


class RegisteredTest(NamedTuple):
    """A test known by name: its class, its builders and its contract."""

    name: str
    """The name ``test="..."`` and ``--test`` take."""
    kind: type
    """The class its builders return: ``contract(test)`` looks the row up by ``type(test)``."""
    build: Callable[[], AcceptanceTest]
    """The test with its default settings (``warmup(test="name")``)."""
    from_options: Callable[[int, float], AcceptanceTest]
    """``(m, sigma) -> test`` from the ``sample`` command's ``--batch-size`` and ``--sigma`` (a test without them ignores them)."""
    contract: Contract = Contract()
    """What it needs from the warm-up (rows of the same ``kind`` declare the same)."""


def bounded(ahead: Callable[[Any, jax.Array, int, Draw | None], jax.Array]) -> Contract:
    """The contract of a bound-based exact test whose first rows ``ahead`` names."""
    return Contract(reads_bounds=True, records=BOUNDED, rows_ahead=ahead)


def defaults(build: Callable[[], AcceptanceTest]) -> Callable[[int, float], AcceptanceTest]:
    """``from_options`` of a test with neither a minibatch size nor a noise level: its defaults, whatever ``(m, sigma)``."""
    return lambda m, sigma: build()


TESTS: dict[str, RegisteredTest] = {
    t.name: t
    for t in (
        RegisteredTest(
            "mhminibatch",
            MHMinibatch,
            lambda: mh_minibatch(batch_size=50),
            lambda m, sigma: mh_minibatch(batch_size=m, sigma=sigma),
            Contract(records=MINIBATCH_CLT),
        ),
        RegisteredTest(
            "penalty",
            PenaltyTest,
            penalty_test,
            lambda m, sigma: penalty_test(batch_size=m, sigma_max=sigma),
            contract=Contract(sized_batch=True, records=MINIBATCH_CLT),
        ),
        RegisteredTest("smh", ScalableMH, scalable_mh, defaults(scalable_mh), contract=bounded(smh_rows_ahead)),
        RegisteredTest("mhss", MHSS, mhss, defaults(mhss), contract=bounded(mhss_rows_ahead)),
        RegisteredTest("tunamh", MHSS, tunamh, defaults(tunamh), contract=bounded(mhss_rows_ahead)),
        RegisteredTest(
            "austere",
            AustereMH,
            austere_mh,
            lambda m, sigma: austere_mh(batch_size=m),
            Contract(records=("residual_sd", "pvalue_threshold")),
        ),
        RegisteredTest(
            "mhsublhd",
            MHSubLhd,
            mh_sublhd,
            lambda m, sigma: mh_sublhd(batch_size=m),
            Contract(records=("residual_sd", "half_width")),
        ),
        RegisteredTest(
            "naive",
            NaiveMinibatch,
            naive_minibatch,
            lambda m, sigma: naive_minibatch(batch_size=m),
            Contract(records=("residual_sd",)),
        ),
        RegisteredTest("barker", BarkerTest, BarkerTest, defaults(BarkerTest), Contract(records=())),
        RegisteredTest("metropolis", MetropolisTest, MetropolisTest, defaults(MetropolisTest), Contract(records=())),
    )
}
"""Name -> its row; a new test is its module, its tests and one row here."""


def registered(name: str) -> RegisteredTest:
    """The row of ``name``; an unknown name is an error listing the known ones."""
    return TESTS[check_choice(name, "test", tuple(TESTS))]


def named_test(test: AcceptanceTest | str) -> AcceptanceTest:
    """``test`` itself, or the test of that name with its default settings."""
    return registered(test).build() if isinstance(test, str) else test


def contract(test: AcceptanceTest) -> Contract:
    """What ``test`` declares it needs: the contract of its type's row (nothing, ``Contract()``, for a type with none)."""
    rows = [t.contract for t in TESTS.values() if type(test) is t.kind]
    return rows[0] if rows else Contract()


def decision_rule(test: Any) -> str:
    """The warm-up's rule for targets and moves: ``"barker"`` for a test that declares Barker's rule, else ``"metropolis"``."""
    return "barker" if test.decision_rule == "barker" else "metropolis"
