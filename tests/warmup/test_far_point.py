"""The lean mode search confirms a subsample's 'log-likelihood keeps rising' on the full data without a pass of its own:
the Newton passes read the log-likelihood at the far points along the previous pass's least-curved direction."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.warmup import lean, subsample_newton

sys.path.insert(0, str(Path(__file__).parents[1] / "control_variates"))
from helpers_rare import PRIOR_SCALE, rare_category_data  # noqa: E402


@pytest.mark.slow
def test_a_rare_category_costs_no_confirmation_pass(monkeypatch):
    """A rare category (20 of 100,020 rows, 19 successes) that the search's subsample all but misses: the subsample sees
    the log-likelihood rising without bound along the rare coefficient (asserted: ``rising_direction`` proposes it), the
    full data refute it (no mode error), and every full pass the search read was a Newton pass (one per trial plus the
    first); before, the refutation read one more pass over all rows (issue 32's groups case: 4.75 passes, now 3.75).
    ~30 s (a mode search over 100,020 rows)."""
    proposed, trials = [], []
    original_rising, original_gain = lean.rising_direction, lean.gain

    def rising(*args, **kwargs):
        out = original_rising(*args, **kwargs)
        proposed.append(out is not None)
        return out

    def gain(*args):
        trials.append(1)
        return original_gain(*args)

    monkeypatch.setattr(lean, "rising_direction", rising)
    monkeypatch.setattr(lean, "gain", gain)
    data, _ = rare_category_data()
    found = lean.lean_mode(
        logistic_regression(prior_scale=PRIOR_SCALE),
        as_data_source(data),
        jnp.zeros(2),
        key=jax.random.key(0),
        probe_key=jax.random.key(1),
    )
    assert proposed == [True], "the subsample must propose a rising direction for the test to have power"
    assert found.rising is None and found.mode.converged
    assert found.newton_passes == len(trials) + 1, (found.newton_passes, len(trials))
    assert subsample_newton.RISE_SDS[-1] > 0
