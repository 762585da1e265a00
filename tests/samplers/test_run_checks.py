"""Warnings after sampling for a run that returned like any other but is not what it seems: chains that accepted
(almost) nothing, an exact test that fell back to the full-data test on most steps, and a test that read far more rows
per step than it promised. Before, each returned silently (acceptance 0.0 on every chain; ``test="smh"`` at d = 200
on the full-data test at 1200 of 1200 steps)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import models
from minibatch_mcmc.acceptance import MetropolisTest, penalty_test, scalable_mh
from minibatch_mcmc.compiling import FAST_COMPILE
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import RunOptions
from minibatch_mcmc.samplers.driver import sample_compiled

X = (np.random.default_rng(0).standard_normal((400, 2)) + 1.0).astype(np.float32)


def run(scale, **kw):
    """Three chains of the Gaussian mean model (posterior s.d. 0.05) with a random walk of s.d. ``scale``; the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sample_compiled(
            models.gaussian_mean(),
            X,
            jnp.ones(2),
            proposal=random_walk(scale=scale),
            test=MetropolisTest(),
            num_samples=200,
            num_chains=3,
            key=1,
            run=RunOptions(progress=False),
            compiler_options=FAST_COMPILE,
            **kw,
        )
    return result, [str(w.message) for w in caught]


def test_chains_that_accept_nothing_warn_and_a_tuned_run_does_not():
    """A step 600 posterior s.d.s long (scale 30) accepts 0 of 200 on every chain: one warning naming the chains, their
    rates and the causes (a log_lik drawing numpy random numbers, a step far too large). The same run with a step
    near the optimal 2.4/sqrt(d) s.d.s (0.08: acceptance about 0.3) warns nothing."""
    bad, said = run(30.0)
    assert float(bad.records["accepted"].mean()) == 0.0
    low = [s for s in said if "accepted less than 1%" in s]
    assert len(low) == 1 and "3 of 3 chains" in low[0] and "chain 2: 0" in low[0], said
    assert "numpy" in low[0] and "step size far too large" in low[0]
    good, said = run(0.08)
    assert 0.15 < float(good.records["accepted"].mean()) < 0.6 and said == [], said


def test_low_acceptance_threshold_names_only_the_stuck_chain():
    """Chain 1 at 1 acceptance in 200 (0.005) is named; chain 0 at 0.1 (below any tuned target) is not; under ``MIN_STEPS``
    steps nothing is judged."""
    from minibatch_mcmc.samplers.run_checks import LOW_ACCEPTANCE, MIN_STEPS, low_acceptance

    acc = np.zeros((2, 200), bool)
    acc[0, ::10], acc[1, 0] = True, True
    message = low_acceptance(acc)
    assert "1 of 2 chains" in message and "chain 1: 0.005" in message and "chain 0" not in message
    assert low_acceptance(acc[:, : MIN_STEPS - 1]) is None
    assert LOW_ACCEPTANCE * MIN_STEPS <= 1  # at most one acceptance in the shortest judged run


def records(batch, expected=None, fallback=None):
    batch = np.asarray(batch, np.int32)
    return {
        "batch_size": batch,
        "expected_batch_size": np.zeros(batch.shape) if expected is None else np.asarray(expected),
        "fallback": np.zeros(batch.shape, bool) if fallback is None else np.asarray(fallback),
    }


def test_over_cost_against_the_first_minibatch_and_the_poisson_mean():
    """The penalty test promises its first minibatch (``first_rows``: 50 rows by default); a run reading 11x that per step
    warns with the measured multiple, one reading 9x does not. An exact test promises the Poisson mean on its thinned
    steps: 20 expected, 12% of the steps on all 10,000 rows (mean 1217 rows) warns; a full-data test promises nothing."""
    from minibatch_mcmc.samplers.run_checks import COST_FACTOR, over_cost, promised_rows

    test = penalty_test()
    assert promised_rows(test, 10_000) == 50 and promised_rows(scalable_mh(), 10_000) == 0
    assert promised_rows(MetropolisTest(), 10_000) == 0
    message = over_cost(records(np.full((2, 100), 550)), "penalty", 10_000, 50)
    assert message is not None and "550 rows per step" in message and "11x its first minibatch (50 rows)" in message
    assert over_cost(records(np.full((2, 100), 450)), "penalty", 10_000, 50) is None
    fallback = np.zeros((1, 100), bool)
    fallback[0, :12] = True
    rows = np.where(fallback, 10_000, 20)
    message = over_cost(records(rows, np.where(fallback, 0.0, 20.0), fallback), "smh", 10_000, 0)
    assert message is not None and "Poisson mean" in message and "1218 rows per step" in message, message
    assert "12% of its steps fell back" in message and "60.9x" in message
    assert over_cost(records(np.full((1, 100), 10_000)), "metropolis", 10_000, 0) is None
    assert COST_FACTOR == 10.0


@pytest.mark.slow
def test_smh_mostly_on_the_full_data_test_warns():
    """(~25 s on the 2-core machine: the GLM proxy and the thinned loop compile.) Scalable MH capped at 2 expected rows on
    a logistic regression (N = 300, d = 2; the bounds expect more than 2 on most moves) fell back on 71% of steps: one
    warning with the share, naming a better proxy, smaller steps and the penalty test."""
    from minibatch_mcmc.control_variates.glm import model_glm_proxy

    data, _ = models.make_logistic_data(jax.random.key(0), 300, 2)
    model = models.logistic_regression(prior_scale=5.0)
    est = model_glm_proxy(model, data, jnp.zeros(2), order=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sample_compiled(
            model,
            data,
            jnp.zeros(2),
            proposal=random_walk(scale=0.1),
            test=scalable_mh(max_expected=2.0),
            estimator=est,
            num_samples=120,
            num_chains=2,
            run=RunOptions(progress=False),
            compiler_options=FAST_COMPILE,
        )
    share = float(result.records["fallback"].mean())
    said = [str(w.message) for w in caught if "fell back" in str(w.message)]
    assert share > 0.5 and len(said) == 1, (share, said)
    assert f"({share:.0%})" in said[0] and "penalty test" in said[0] and "smaller proposal steps" in said[0]
