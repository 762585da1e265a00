import functools
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import BarkerTest, random_walk, sample
from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
from minibatch_mcmc.samplers import driver
from minibatch_mcmc.samplers.progress import SamplingBar, largest_divisor_at_most

RECS = {"accepted": np.ones((10, 2), bool), "batch_size": np.full((10, 2), 50)}


@pytest.fixture(scope="module")
def mixture_data():
    return make_mixture_data(jax.random.key(0), 5_000)


def run(data, **kw):
    args = dict(
        proposal=random_walk(cov=0.15 * np.eye(2)),
        test=BarkerTest(),
        num_samples=40,
        temperature=200.0,
        block_size=40,
        num_chains=2,
        key=3,
    )
    args.update(kw)
    return sample(gaussian_mixture(), data, jnp.zeros(2), **args)


def test_bar_ends_at_the_total_stays_and_pieces_keep_the_draws(mixture_data, monkeypatch):
    """The last line drawn shows 40/40 and is kept (the old bar, leave=False, erased it at 1750/2000); blocks
    split into one-step pieces (interval 0) give the same draws as whole blocks without a bar."""
    whole = run(mixture_data, progress=False)
    out = io.StringIO()
    monkeypatch.setattr(driver, "SamplingBar", functools.partial(SamplingBar, interval=0.0, payback=0.0, file=out))
    pieces = run(mixture_data, progress=True)
    np.testing.assert_array_equal(np.asarray(whole.positions), np.asarray(pieces.positions))
    for k in whole.records:
        np.testing.assert_array_equal(whole.records[k], pieces.records[k])
    text = out.getvalue()
    assert text.endswith("\n")
    last = text.rstrip("\n").split("\r")[-1]
    assert "40/40" in last and "startup=" in last


def test_rate_clock_starts_after_the_first_piece():
    """The compiling first piece is shown as startup and left out of the rate's count and clock."""
    out = io.StringIO()
    bar = SamplingBar(True, 100, 0, "MH", file=out)
    bar.advance(RECS, 10, 7.5)
    assert bar.bar.initial == 10 and bar.step_seconds is None
    bar.advance(RECS, 10, 0.01)
    assert bar.step_seconds == pytest.approx(1e-3)
    bar.close()
    assert "startup=7.5s" in out.getvalue() and "100/100" not in out.getvalue() and "20/100" in out.getvalue()


def test_piece_length():
    """Slow blocks are cut into equal pieces of about ``interval`` seconds, unless a compilation would not pay."""
    bar = SamplingBar(True, 10_000, 0, "MH", interval=0.5, file=io.StringIO())
    assert bar.piece(250, 0) == 250  # nothing measured yet
    bar.startup, bar.step_seconds = 1.0, 0.01  # 250 steps take 2.5 s
    assert bar.piece(250, 0) == 50
    assert bar.piece(150, 0) == 50
    assert bar.piece(250, 9_700) == 250  # 3 s left: below 4 startups
    bar.step_seconds = 0.001
    assert bar.piece(250, 0) == 250
    assert largest_divisor_at_most(7, 3) == 1 and largest_divisor_at_most(5000, 333) == 250
    assert SamplingBar(False, 10, 0, "MH").piece(250, 0) == 250


def test_bar_into_a_log_writes_each_line_once(capsys):
    """Shown on a stderr that is no terminal (captured here, as a log file): no redrawn bar (its every redraw would be
    written again), a line at each tenth of the run and the last, each once; a run ending between tenths logs its end."""
    bar = SamplingBar(True, 100, 0, "MH")
    for _ in range(20):
        bar.advance(RECS, 5, 0.01)
    bar.close()
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err and len(lines) == 10 and len(set(lines)) == 10, lines
    assert lines[-1].startswith("MH: 100/100 steps, accept 1.00, batch 50") and lines[0].startswith("MH: 10/100 steps")
    bar = SamplingBar(True, 100, 0, "MH")
    bar.advance(RECS, 7, 0.01)
    bar.close()
    assert capsys.readouterr().err.splitlines() == ["MH: 7/100 steps, accept 1.00, batch 50, startup 0.0s"]
