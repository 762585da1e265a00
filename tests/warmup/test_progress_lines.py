"""Warm-up progress written to a file or pipe (not a terminal): each phase's line once, no carriage-return redraws.

Before, each phase's tqdm line was drawn three to four times (empty, ``running``, the cost, the cost again at close), so
a log file held every warm-up line several times."""

import jax
import jax.numpy as jnp

from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.samplers.phase_cost import PhaseClock
from minibatch_mcmc.warmup import warmup


def test_a_phase_writes_one_line_to_a_file(capsys):
    """One phase, progress on, stderr captured (not a terminal): exactly one line, with the phase's cost."""
    with PhaseClock("mode", 100, progress=True) as clock:
        pass
    clock.cost(50)
    err = capsys.readouterr().err
    assert "\r" not in err and err.count("\n") == 1 and err.startswith("warm-up: mode, 0.50 passes (50 rows)"), repr(
        err
    )


def test_warmup_progress_in_a_log_has_each_line_once(capsys):
    """A small warm-up with ``progress=True`` into captured (non-terminal) streams: no line repeats and none is redrawn."""
    data, _ = make_logistic_data(jax.random.key(0), 2_000, 2)
    warmup(logistic_regression(prior_scale=5.0), data, jnp.zeros(2), key=1, progress=True)
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert "\r" not in out.err and "\r" not in out.out
    phases = [line for line in lines if line.startswith("warm-up:")]
    assert len(phases) >= 3 and len(set(phases)) == len(phases), lines
    assert any(line.startswith("warm-up: mode,") for line in phases), lines
