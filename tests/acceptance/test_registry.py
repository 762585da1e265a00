"""The one table of acceptance tests by name (``acceptance.registry``): every row builds its test, which implements the
whole ``AcceptanceTest`` protocol and declares its contract by its type; an unknown name is an error naming the rows."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from minibatch_mcmc.acceptance import MINT, mint, no_test, penalty_test, scalable_mh, tunamh
from minibatch_mcmc.acceptance.base import DECISION_RULES, AcceptanceTest
from minibatch_mcmc.acceptance.registry import TESTS, Contract, contract, named_test, registered
from minibatch_mcmc.warmup.exact_choice import needs_bounds

KNOWN = "'mhminibatch', 'penalty', 'smh', 'mhss', 'tunamh', 'austere', 'mhsublhd', 'naive', 'barker', 'metropolis'"
"""The registered names, in order, written out (not read from the table under test)."""
PROTOCOL = ("name", "decision_rule", "decide", "validate", "temperature_factor", "first_rows")
"""What ``AcceptanceTest`` declares, written out: a member added to the protocol and not here fails below."""


def test_an_unknown_name_is_an_error_naming_the_tests():
    with pytest.raises(ValueError, match=f"test='nonsense' must be one of {KNOWN}$"):
        named_test("nonsense")
    with pytest.raises(ValueError, match=f"test='smhh' must be one of {KNOWN}$"):
        registered("smhh")


def test_protocol_is_the_one_written_here():
    declared = set(AcceptanceTest.__annotations__) | {
        k for k, v in vars(AcceptanceTest).items() if callable(v) and not k.startswith("_")
    }
    assert declared == set(PROTOCOL)


@pytest.mark.filterwarnings("ignore::minibatch_mcmc.acceptance.AccuracyWarning")  # austere at m = 20, N = 1000
@pytest.mark.parametrize("name", list(TESTS))
def test_every_row_builds_its_test_with_the_whole_protocol(name):
    """Both builders give the row's class, with every protocol member (a rule of ``DECISION_RULES``, hooks that run at
    N = 1000), and the test's type leads back to the row's contract; rows of one class declare the same."""
    row = TESTS[name]
    for test in (row.build(), row.from_options(20, 0.5), named_test(name)):
        assert type(test) is row.kind and contract(test) == row.contract
        assert all(hasattr(test, member) for member in PROTOCOL)
        assert isinstance(test.name, str) and test.decision_rule in DECISION_RULES
        test.validate(1000)
        assert test.temperature_factor(1000) == 1.0  # no registered test tempers the likelihood itself (MINT would)
        rows = np.asarray(test.first_rows(jax.random.key(0), 1000))
        assert rows.dtype == np.int32 and np.all((rows >= 0) & (rows < 1000))
    assert all(t.contract == row.contract for t in TESTS.values() if t.kind is row.kind)


def test_contract_follows_the_type_not_the_name():
    """A test built by hand with other settings declares its class's contract; a renamed test keeps it (the name
    decided before the registry: a penalty test named "smh" was given bounds, a Scalable MH renamed was not); a class
    with no row (MINT, no test) declares nothing."""
    assert needs_bounds(scalable_mh(chunk_size=16)) and needs_bounds(tunamh(chi=2.0))
    assert needs_bounds(scalable_mh()._replace(name="my_smh"))
    assert not needs_bounds(penalty_test()._replace(name="smh"))
    assert contract(penalty_test(batch_size=80)) == Contract(sized_batch=True, records=("epsilon", "residual_sd"))
    assert [name for name, t in TESTS.items() if t.contract.sized_batch] == ["penalty"]
    assert (
        contract(no_test()) == Contract()
        and contract(mint(0.5, 0.25)) == Contract()
        and MINT not in {t.kind for t in TESTS.values()}
    )
