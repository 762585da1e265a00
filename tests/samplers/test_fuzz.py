"""Fuzz (hypothesis): model x start shape/dtype x settings. Every ``sample`` call either returns finite,
correctly shaped draws or raises a ValueError/TypeError from our code (the traceback's last frame inside
src/minibatch_mcmc, not inside jax); each call is timed and the process's peak memory bounded (issue 13)."""

import functools
import resource
import time
import traceback
import warnings
from pathlib import Path

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibatch_mcmc import random_walk, sample
from minibatch_mcmc.acceptance import BarkerTest, mh_minibatch
from minibatch_mcmc.models import gaussian_mean, gaussian_mixture, logistic_regression, make_logistic_data, tied_mixture

N, STEPS = 200, 3
CALL_SECONDS = 60.0
"""A call slower than this counts as a hang (compilation included)."""
PEAK_MEMORY_BYTES = 6 * 2**30
"""Stated bound on the test process's peak resident memory."""
PACKAGE = str(Path(__import__("minibatch_mcmc").__file__).resolve().parent)

MODEL_NAMES = ("gaussian_mean", "logistic", "mixture", "tied_mixture")


@functools.cache
def models() -> dict[str, tuple]:
    """Each model with its parameter's shape and data, built on first use (not in every worker's collection)."""
    rng = np.random.default_rng(0)
    return {
        "mixture": (gaussian_mixture(), (2,), rng.normal(size=N).astype(np.float32)),
        "gaussian_mean": (gaussian_mean(), (2,), rng.normal(size=(N, 2)).astype(np.float32)),
        "logistic": (logistic_regression(1.0), (3,), make_logistic_data(jax.random.key(0), N, 3)[0]),
        "tied_mixture": (tied_mixture(3), (3,), rng.normal(size=N).astype(np.float32)),
    }


OUTCOMES: list[str] = []


def _last_frame(err: BaseException) -> str:
    """File of the innermost frame of ``err``'s traceback."""
    return str(Path(traceback.extract_tb(err.__traceback__)[-1].filename).resolve())


@settings(max_examples=18, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(MODEL_NAMES),
    shape=st.sampled_from(["model", "model", (), (1,), (3,), (2, 2)]),
    dtype=st.sampled_from([np.float32, np.float32, np.float64, np.int32]),
    test=st.sampled_from(["barker", "mh"]),
    batch=st.sampled_from([20, 2, 1, N + 1]),
    sigma=st.sampled_from([1.0, 0.7, 1.5, 0.05, 1.8]),
    chains=st.sampled_from([2, 1, 0]),
    temperature=st.sampled_from([1.0, 3.0, 0.0, float("nan")]),
)
def test_sample_runs_or_refuses_cleanly(name, shape, dtype, test, batch, sigma, chains, temperature):
    model, good, data = models()[name]
    shape = good if shape == "model" else shape
    start = np.zeros(shape, dtype)
    began = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            acc = BarkerTest() if test == "barker" else mh_minibatch(batch, sigma=sigma)
        res = sample(
            model,
            data,
            start,
            proposal=random_walk(scale=0.1),
            test=acc,
            num_samples=STEPS,
            num_chains=chains,
            temperature=temperature,
            key=1,
            progress=False,
        )
    except (ValueError, TypeError) as err:
        frame = _last_frame(err)
        assert frame.startswith(PACKAGE) and "/jax/" not in frame, (frame, err)
        assert str(err), "an empty message"
        OUTCOMES.append("refused")
    else:
        assert shape == good and chains >= 1 and temperature > 0, (shape, chains, temperature)
        draws = np.asarray(res.positions)
        assert draws.shape == (chains, STEPS) + good and np.all(np.isfinite(draws)), draws.shape
        OUTCOMES.append("ran")
    assert time.perf_counter() - began < CALL_SECONDS
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < PEAK_MEMORY_BYTES


def test_the_fuzz_both_ran_and_refused():
    assert set(MODEL_NAMES) == set(models())  # a model missing from MODEL_NAMES would never be drawn
    if not OUTCOMES:  # run alone
        test_sample_runs_or_refuses_cleanly()
    assert OUTCOMES.count("ran") >= 3 and OUTCOMES.count("refused") >= 3, OUTCOMES
