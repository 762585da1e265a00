"""The setting checks: accepted values come back cleaned, rejected ones raise with the name and the value."""

import numpy as np
import pytest

from minibatch_mcmc.checks import check_bool, check_choice, check_int, check_probability, check_real


def test_accepts_and_cleans():
    assert check_int(np.int64(3), "m", low=2) == 3 and type(check_int(np.int64(3), "m", low=2)) is int
    assert check_real(2, "x", 0.0, low_open=True) == 2.0
    assert check_probability(0.5, "delta") == 0.5
    assert check_bool(np.bool_(True), "flag") is True
    assert check_choice("loop", "layout", ("loop", "padded")) == "loop"


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: check_int(True, "batch_size", low=2), "batch_size=True must be an integer >= 2"),
        (lambda: check_int(2.0, "num_chains", low=1), "num_chains=2.0 must be a positive integer"),
        (lambda: check_int(5, "k", 1, 4), "k=5 must be an integer in [1, 4]"),
        (
            lambda: check_real(float("nan"), "sigma", 0.0, 1.8, low_open=True, high_open=True),
            "sigma=nan must be a number in (0, 1.8)",
        ),
        (
            lambda: check_real(1.0, "gamma", 1.0, low_open=True, why="growth factor"),
            "gamma=1.0 must be a finite number > 1 (growth factor)",
        ),
        (lambda: check_probability(1.0, "delta"), "delta=1.0 must be a number in (0, 1)"),
        (
            lambda: check_real(0.0, "delta", 0.0, 1.0, low_open=True, allowed="a number in the open interval (0, 1)"),
            "delta=0.0 must be a number in the open interval (0, 1)",
        ),
        (lambda: check_bool(1, "resume"), "resume=1 must be True or False"),
        (lambda: check_choice("x", "layout", ("loop", "padded")), "layout='x' must be one of 'loop', 'padded'"),
    ],
)
def test_rejects_with_name_and_value(call, words):
    with pytest.raises(ValueError) as err:
        call()
    assert words in str(err.value)
