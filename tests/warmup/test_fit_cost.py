"""The whole fit's cost: ``from_numpyro``'s conversion, the warm-up's phases, sampling and the check, in one table."""

from __future__ import annotations

import time

import numpy as np
import pytest

from minibatch_mcmc.samplers.phase_cost import PhaseCost
from minibatch_mcmc.warmup import auto_sample, fit_cost

numpyro = pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402

from minibatch_mcmc.interop import from_numpyro  # noqa: E402


def linreg(x, y=None):
    """Linear regression with an unknown noise scale."""
    w = numpyro.sample("w", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(x @ w, sigma), obs=y)


@pytest.mark.slow
@pytest.mark.filterwarnings(
    "ignore:the draws may follow the Taylor proxy"
)  # 20 draws of a 60-step run: not what is tested
def test_reported_cost_covers_the_wall_clock_of_the_whole_fit():
    """Would catch seconds left out of the report (before: the conversion, the check and sample's work outside its
    ``wall_time`` were reported nowhere, a third of an 87.8 s fit): the table's total covers >= 95% of the wall-clock time of
    ``from_numpyro`` + ``auto_sample``, and no more than it (each phase is a disjoint slice of it). Sampling's rows are the
    penalty test's 50 per step: 2 chains x 60 steps x 50."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + 0.8 * rng.normal(size=1000)).astype(np.float32)
    t0 = time.perf_counter()
    conv = from_numpyro(linreg, x, y)
    result, warm = auto_sample(
        conv.model, conv.data, conv.init, num_samples=60, num_chains=2, num_starts=0, check_draws=20, progress=False
    )
    wall = time.perf_counter() - t0
    cost = fit_cost(conv, warm, result)
    assert list(cost.phases)[0] == "convert" and {"mode", "setup", "sampling", "check"} <= set(cost.phases), cost.phases
    assert conv.cost.data == 1000 and conv.cost.seconds > 0
    assert 0.95 * wall <= cost.seconds <= wall, (cost.seconds, wall)
    assert cost.phases["sampling"].data == 2 * 60 * 50 and cost.phases["sampling"].seconds >= result.wall_time
    assert warm.summary()["fit_seconds"] == pytest.approx(cost.seconds - conv.cost.seconds)
    table = cost.table()
    assert table.splitlines()[-1].split()[0] == "total" and "convert" in table and "check" in table


class SampleFields:
    """A ``SampleResult``'s fields that ``fit_cost`` reads."""

    records = {"batch_size": np.full((2, 10), 50), "hidden_data": np.zeros((2, 10), int)}
    wall_time = 2.5
    n_data = 1000
    exact_rows = 0


def test_fit_cost_of_a_sample_call_adds_its_wall_time_as_sampling():
    """Without ``auto_sample``'s ``sampling`` row, ``result.wall_time`` and its rows (2 x 10 x 50 = 1000: one pass) are the
    sampling row; totals are the phases' sums (NaN passes or compile seconds counted as 0)."""

    class Warm:
        cost = {"mode": PhaseCost(3000, 1.0, 3.0, 0.5), "tuning": PhaseCost(0, 0.25)}

    cost = fit_cost(warm=Warm(), result=SampleFields())
    assert cost.phases["sampling"] == PhaseCost(1000, 2.5, 1.0)
    assert (cost.seconds, cost.rows, cost.passes, cost.compile_seconds) == (3.75, 4000, 4.0, 0.5)
