"""The saved warm-up: restored only with the settings it was found with, never from a corrupt file."""

import numpy as np
import pytest

from minibatch_mcmc.samplers.warmup_file import WARMUP_PICKLE, load_warmup, save_warmup


def test_round_trip_other_settings_and_corruption(tmp_path):
    settings = {"seed": [0, 1], "options": {"order": 2}}
    assert load_warmup(tmp_path, settings) is None
    save_warmup(tmp_path, settings, {"scale": 0.5, "covariance": np.eye(2)})
    back = load_warmup(tmp_path, settings)
    assert back["scale"] == 0.5 and np.array_equal(back["covariance"], np.eye(2))
    with pytest.raises(ValueError, match=r"other settings \(options.order: saved 2, this call 1\)"):
        load_warmup(tmp_path, {"seed": [0, 1], "options": {"order": 1}})
    (tmp_path / WARMUP_PICKLE).write_bytes(b"not the pickle")
    with pytest.raises(ValueError, match="does not match the digest"):
        load_warmup(tmp_path, settings)


def test_unpicklable_warmup_warns_and_writes_nothing(tmp_path):
    with pytest.warns(UserWarning, match="could not be saved"):
        assert save_warmup(tmp_path, {}, {"f": lambda: 0}) is None
    assert load_warmup(tmp_path, {}) is None
