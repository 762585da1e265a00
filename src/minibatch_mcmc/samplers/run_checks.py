"""Checks of a finished run's records: warnings for a run that returned like any other but is not what it seems.

Three kinds: chains that accepted (almost) nothing, so their "draws" are their starts; an exact bound-based test that
fell back to the full-data test on most steps; and a run whose test read far more rows per step than it promised
(its first minibatch, or the Poisson mean a bound-based test expects). Each warning names what it measured and what
to do. ``sample`` calls ``warn_run`` once the draws are joined.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest

LOW_ACCEPTANCE = 0.01
"""Acceptance rate of a chain below which it is reported. A tuned run aims at 0.16 to 0.57 (``warmup.TARGET_ACCEPT``)
and the untuned global moves measured 0.3 and above on the reference cases; a chain at a true rate of 0.1 stays
below 0.01 over ``MIN_STEPS`` steps with probability below 1e-3 (binomial: at most one acceptance in 100)."""
MIN_STEPS = 100
"""Steps a chain needs before its acceptance rate is judged."""
MOSTLY_FALLBACK = 0.5
"""Share of steps on which an exact bound-based test fell back to the full-data test above which the run is reported."""
COST_FACTOR = 10.0
"""Mean rows read per step, as a multiple of what the test promised, above which the run is reported: the penalty
test and MHminibatch grow their minibatch only while its variance is too large, which on the reference cases and
tuned fits cost at most a few times the first minibatch."""
SHOWN = 8
"""Chains named in a message, at most."""


def promised_rows(test: AcceptanceTest, n: int) -> int:
    """The rows of the test's first minibatch (``first_rows``, from its shape alone: nothing is compiled); 0 for a test
    that reads none first (full-data and bound-based tests)."""
    return int(jax.eval_shape(lambda: test.first_rows(jax.random.key(0), n)).shape[0])


def low_acceptance(accepted: np.ndarray) -> str | None:
    """The warning for chains whose acceptance rate is below ``LOW_ACCEPTANCE`` over at least ``MIN_STEPS`` steps."""
    steps = accepted.shape[1]
    rates = accepted.mean(axis=1) if steps else np.zeros(0)
    low = np.flatnonzero(rates < LOW_ACCEPTANCE) if steps >= MIN_STEPS else np.zeros(0, int)
    if not low.size:
        return None
    named = ", ".join(f"chain {c}: {rates[c]:.3g}" for c in low[:SHOWN]) + (" ..." if low.size > SHOWN else "")
    return (
        f"{low.size} of {accepted.shape[0]} chains accepted less than {LOW_ACCEPTANCE:.0%} of their {steps} proposals "
        f"({named}): their draws are (almost) their starting points, not the posterior. Likely causes: a log_lik that is "
        "not a pure function of (theta, batch) (e.g. random numbers drawn with numpy, fixed when JAX traces it), a log "
        "density that is -inf or NaN where the chain proposes, or a proposal step size far too large (tune it, or let "
        "warmup/auto_sample tune it)"
    )


def mostly_fallback(fallback: np.ndarray, name: str, n: int) -> str | None:
    """The warning for an exact bound-based test that fell back to the full-data test on most steps."""
    share = float(fallback.mean()) if fallback.size else 0.0
    if share <= MOSTLY_FALLBACK:
        return None
    return (
        f"{name} fell back to the exact full-data test on {int(fallback.sum())} of {fallback.size} steps ({share:.0%}): "
        f"its per-datum bounds expected more rows than its limit there, so those steps read all N = {n} rows and the run "
        "cost about as much as full-data MH. Use a better proxy (a centre nearer the chains, order=2), smaller proposal "
        "steps, or the penalty test (test='penalty'), which reads a minibatch whatever the bounds"
    )


def over_cost(records: dict, name: str, n: int, promised: int) -> str | None:
    """The warning for a run whose mean rows per step exceed ``COST_FACTOR`` times what the test promised."""
    rows = np.asarray(records["batch_size"], np.float64)
    fallback = np.asarray(records["fallback"], bool)
    expected = np.asarray(records["expected_batch_size"], np.float64)
    if promised == 0 and np.any(~fallback & (expected > 0)):
        promised_mean = float(expected[~fallback].mean())
        what, why = (
            "the Poisson mean its bounds expected on its thinned steps",
            (
                f"{fallback.mean():.0%} of its steps fell back to the full-data test (all N rows), its bounds expecting more rows "
                "than its limit where the chains went. Use a better proxy (a centre nearer the chains), smaller proposal steps, "
                "or the penalty test (test='penalty')"
            ),
        )
    elif promised > 0:
        promised_mean, what = float(promised), "its first minibatch"
        why = (
            "its minibatch estimate was too noisy where the chains went, so it read on. Use a better proxy "
            "(control_variates.taylor_proxy, or auto_sample's warm-up), smaller proposal steps, or a larger first minibatch"
        )
    else:  # a full-data test promises all N rows
        return None
    mean = float(rows.mean()) if rows.size else 0.0
    if mean <= COST_FACTOR * max(promised_mean, 1.0):
        return None
    return (
        f"{name} read {mean:.4g} rows per step on average ({mean / n:.1%} of N = {n}), {mean / promised_mean:.3g}x "
        f"{what} ({promised_mean:.4g} rows): {why}"
    )


def warn_run(records: dict, test: AcceptanceTest, n: int) -> None:
    """Warn, once each, about chains that accepted almost nothing, mostly-fallback exact tests and over-cost runs."""
    messages = [
        low_acceptance(np.asarray(records["accepted"], bool)),
        mostly_fallback(np.asarray(records["fallback"], bool), test.name, n),
    ]
    if messages[1] is None:  # a mostly-fallback run is over cost for that reason, said once
        messages.append(over_cost(records, test.name, n, promised_rows(test, n)))
    for message in messages:
        if message is not None:
            warnings.warn(message, stacklevel=3)
