"""AustereMH's error per decision: the vectorised simulation, the design for an error asked, the start-of-run warning."""

import math
import re
import time
import warnings

import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.acceptance import AccuracyWarning, austere_mh, austere_mh_for_error
from minibatch_mcmc.acceptance.austere import MAX_DECISION_ERROR, warn_if_untrustworthy
from minibatch_mcmc.acceptance.austere_design import CHECK_PATHS, simulate_design, simulate_stops, worst_case_error

ISSUE_N, ISSUE_M, ISSUE_EPS = 100_000, 100, 0.005


def test_two_stage_error_and_data_match_the_normal_formulas():
    """N = 2m: one look, with ``t_1`` exactly N(mu_std, 1). Catches a wrong tau, drift or halving (to ~4 s.e.)."""
    m, eps, paths = 200, 0.05, 40_000
    crit = stats.t.ppf(1 - eps, m - 1)
    stops, frac = simulate_stops(2 * m, m, [eps], [0.0, 1.5], paths, seed=3)
    p_stop = 2 * stats.norm.sf(crit)
    assert abs(stops[0] / paths - p_stop) < 4 * math.sqrt(p_stop * (1 - p_stop) / paths)
    for k, mu in enumerate((0.0, 1.5)):
        p = stats.norm.sf(crit - mu) + stats.norm.cdf(-crit - mu)
        assert abs(frac[0, k] - (1 - p / 2)) < 4 * math.sqrt(p * (1 - p) / paths) / 2


def test_many_stages_agree_with_the_stage_by_stage_simulation():
    """1000 stages: the half-the-stops estimate and the data fraction agree with ``simulate_design``'s sign count
    (independent paths) within 4 combined s.e.; catches a reversed stage order or a missed stage."""
    n, m, eps, paths = 100_000, 100, [1e-3, 5e-3], 4000
    stops, frac = simulate_stops(n, m, eps, [2.0], paths, seed=1)
    wrong, frac_old = simulate_design(n, m, eps, [0.0, 2.0], n_paths=paths, seed=2)
    for e in range(2):
        err = stops[e] / paths / 2
        se = math.sqrt(err * (1 - err) / paths) + math.sqrt(wrong[e, 0] * (1 - wrong[e, 0]) / paths)
        assert abs(err - wrong[e, 0]) < 4 * se, (err, wrong[e, 0])
        assert abs(frac[e, 0] - frac_old[e, 1]) < 0.02


def test_worst_case_error_is_quick_and_cached():
    """The start-of-run check at 10^4 stages: under a second of CPU cold (about 0.2 s unloaded), instant when cached."""
    worst_case_error.cache_clear()
    began = time.process_time()
    first = worst_case_error(10**6, 100, 0.005)
    cold = time.process_time() - began
    began = time.process_time()
    again = worst_case_error(10**6, 100, 0.005)
    assert again == first and time.process_time() - began < 1e-2 and cold < 1.0, cold
    assert first.n_paths == CHECK_PATHS and first.error <= first.upper


def test_the_issues_settings_warn_with_the_numbers():
    """m=100, eps=0.005, N=1e5 (1000 stages): the message names the settings, the measured error and a fix."""
    measured = worst_case_error(ISSUE_N, ISSUE_M, ISSUE_EPS)
    assert measured.error > 5 * MAX_DECISION_ERROR  # the issue's finding: far above the level
    with pytest.warns(AccuracyWarning) as caught:
        austere_mh(ISSUE_M, ISSUE_EPS).validate(ISSUE_N)
    text = str(caught[0].message)
    assert f"m={ISSUE_M}, epsilon={ISSUE_EPS:g} at N={ISSUE_N}" in text and f"{measured.error:.3g}" in text
    fix = re.search(r"picks m=(\d+), epsilon=([\d.e-]+)", text)
    assert fix, text
    assert worst_case_error(ISSUE_N, int(fix[1]), float(fix[2])).error <= MAX_DECISION_ERROR


def test_a_designs_own_output_does_not_warn():
    """``austere_mh_for_error`` certifies its error (upper bound <= asked) and the independent check agrees."""
    test = austere_mh_for_error(ISSUE_N, MAX_DECISION_ERROR)
    chosen = test.designed_for
    assert chosen.error_upper <= MAX_DECISION_ERROR and (test.batch_size, test.epsilon) == (
        chosen.batch_size,
        chosen.epsilon,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        test.validate(ISSUE_N)
        warn_if_untrustworthy(ISSUE_N, test.batch_size, test.epsilon)  # re-measured on other paths
    assert test.worst_case_error(ISSUE_N) == chosen.worst_error


def test_a_budget_of_wrong_decisions_is_an_error_per_decision():
    """One wrong decision expected over 100 steps is an error of 0.01 per decision: the same design."""
    by_budget = austere_mh_for_error(ISSUE_N, budget=1.0, num_steps=100, batch_sizes=(1000,))
    assert by_budget == austere_mh_for_error(ISSUE_N, 0.01, batch_sizes=(1000,))


def test_an_unreachable_error_names_the_way_out():
    with pytest.raises(ValueError, match=r"error=0\.001 at N=100000 \(best reachable: .*larger m.*exact test"):
        austere_mh_for_error(ISSUE_N, 1e-3, batch_sizes=(50,), epsilons=(0.05, 0.1), n_paths=1000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"error": 0.01, "budget": 1.0}, "exactly one"),
        ({"budget": 1.0}, "num_steps=None"),
        ({"error": 0.6}, "error=0.6"),
    ],
)
def test_bad_error_requests_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        austere_mh_for_error(1000, **kwargs)


def test_more_stages_more_error():
    """Per-stage epsilon fixed, the worst-case error rises with N/m (steps of several s.e.); one look errs as the normal tail."""
    errs = [worst_case_error(n, 100, 0.005).error for n in (1000, 10_000, 100_000)]
    assert errs[0] < errs[1] < errs[2]
    assert np.isclose(
        worst_case_error(200, 100, 0.005).error, 0.5 * 2 * stats.norm.sf(stats.t.ppf(0.995, 99)), atol=0.01
    )


def test_a_huge_number_of_stages_is_checked_on_a_subset_as_a_lower_bound():
    """N/m = 10^6 stages: the check looks at CHECK_STAGES of them (fast) and says "at least"; the subset's stops
    are a subset of the full schedule's, so the bound is no larger than the error at 10^4 stages' neighbours."""
    began = time.process_time()
    with pytest.warns(
        AccuracyWarning, match=r"worst-case per-decision error at least 0\.\d+.*austere_mh_for_error\(100000000"
    ):
        warn_if_untrustworthy(10**8, 100, 0.005)
    assert time.process_time() - began < 5.0
