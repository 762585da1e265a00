"""``summary()`` reports only the statistics of the records the run's test fills (its registry contract's ``records``).

Before, every run printed ``mean_epsilon``, ``mean_pvalue_threshold``, ``mean_half_width``, ``fallback_steps`` ... as
zeros for the tests that never fill them (the penalty test showed AustereMH's threshold and Scalable MH's fallbacks)."""

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.acceptance.registry import OPTIONAL_RECORDS, TESTS
from minibatch_mcmc.models import gaussian_mean
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import sample
from minibatch_mcmc.samplers.results import OPTIONAL_KEYS


def test_every_registered_test_declares_its_records():
    """Each row names a subset of the optional records, and each optional record has a summary key."""
    for name, row in TESTS.items():
        assert row.contract.records is not None and set(row.contract.records) <= set(OPTIONAL_RECORDS), name
    assert set(OPTIONAL_KEYS.values()) == set(OPTIONAL_RECORDS)


@pytest.mark.parametrize(
    "name, shown",
    [
        ("penalty", {"mean_epsilon", "mean_residual_sd", "max_residual_sd"}),
        pytest.param("mhminibatch", {"mean_epsilon", "mean_residual_sd", "max_residual_sd"}, marks=pytest.mark.slow),
        pytest.param("mhsublhd", {"mean_half_width", "mean_residual_sd", "max_residual_sd"}, marks=pytest.mark.slow),
        ("metropolis", set()),
    ],
)
def test_summary_shows_only_the_records_the_test_fills(name, shown):
    """The optional keys of a short run's summary are exactly the test's (written out here); the records the contract
    leaves out are zero at every step (the contract drops nothing the test computed) and the ones it names are not
    all zero (it shows nothing the test left empty)."""
    x = np.random.default_rng(0).normal(0.3, 1.0, size=(2000, 1)).astype(np.float32)
    res = sample(
        gaussian_mean(),
        x,
        jnp.asarray(x.mean(0)),
        proposal=random_walk(scale=0.002),
        test=TESTS[name].build(),
        num_samples=30,
        num_chains=2,
        key=1,
        progress=False,
    )
    summary = res.summary(posterior=False)
    assert set(summary) & set(OPTIONAL_KEYS) == shown
    for record in OPTIONAL_RECORDS:
        filled = bool(np.any(np.asarray(res.records[record]) != 0))
        assert filled == (record in {OPTIONAL_KEYS[k] for k in shown}), (name, record)
    assert {"acceptance_rate", "mean_batch_size", "data_per_test"} <= set(summary)
    assert summary["exact_rows_per_test"] == 0  # no stratum (a stratum's rows: the test below)


def test_an_exact_stratum_is_counted_in_the_rows_of_every_step():
    """A run with an exact stratum of 5 rows reports them per test (``exact_rows_per_test``) and in ``sampling_cost``'s
    rows (batch rows + hidden rows + 5 per step, counted here from the records); a run without one reports 0 (above). Before,
    the stratum's rows, read at every test, were in neither: a fit with a 1,000-row stratum and 50-row minibatches
    reported 1/21 of the rows it read."""
    from helpers_cauchy import cauchy_rows_data, cauchy_rows_model

    from minibatch_mcmc.acceptance import mh_minibatch
    from minibatch_mcmc.control_variates import plain
    from minibatch_mcmc.control_variates.stratified import stratify
    from minibatch_mcmc.warmup.fit_cost import sampling_cost

    data, idx = cauchy_rows_data(40, seed=5)
    model = cauchy_rows_model()
    start = jnp.zeros(1, jnp.float32)
    res = sample(
        model,
        data,
        start,
        proposal=random_walk(scale=0.3),
        test=mh_minibatch(batch_size=10),
        estimator=stratify(model, data, plain(), idx),
        num_samples=5,
        key=1,
        progress=False,
    )
    assert idx.size == 5 and res.summary(posterior=False)["exact_rows_per_test"] == 5
    rec = res.records
    assert (
        sampling_cost(res).data == int(rec["batch_size"].sum() + rec["hidden_data"].sum()) + 5 * rec["batch_size"].size
    )
