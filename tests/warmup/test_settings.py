"""``warmup(..., settings=WarmupSettings(...))``: the knobs as one record, the old keywords still accepted.

Before (issue 30), ``warmup`` took each knob as its own keyword and had no ``settings``; these tests fail there with an
ImportError (no ``WarmupSettings``) or a TypeError (no ``settings`` argument)."""

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import models
from minibatch_mcmc.warmup import WarmupSettings, warmup
from minibatch_mcmc.warmup.context import merged_settings


def test_keywords_replace_fields_of_the_settings():
    """A keyword replaces its field, None keeps the field, and a typo or a non-record is one clear error."""
    base = WarmupSettings(num_windows=3, order=1)
    assert merged_settings(None) == WarmupSettings()
    assert merged_settings(base, num_windows=None, window_size=7) == base._replace(window_size=7)
    with pytest.raises(TypeError, match="num_window.*not warm-up settings"):
        merged_settings(None, num_window=3)
    with pytest.raises(TypeError, match="not a WarmupSettings"):
        merged_settings({"num_windows": 3})


@pytest.mark.slow
def test_settings_and_keywords_give_the_same_warmup():
    """The same knobs given as keywords, or as ``settings`` with one field replaced by a keyword, give the same tuned
    scale, acceptance and centre (one process, same keys: the same computation, so exactly). Had the record's
    ``num_windows=20`` been used instead of the keyword's 2, the scale would differ (2.24 against 3.31 here)."""
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((200, 2)) + 1.0).astype(np.float32)
    a = warmup(
        models.gaussian_mean(),
        data,
        jnp.zeros(2),
        key=0,
        proposal="langevin",
        num_windows=2,
        window_size=10,
        num_starts=0,
    )
    b = warmup(
        models.gaussian_mean(),
        data,
        jnp.zeros(2),
        key=0,
        proposal="langevin",
        settings=WarmupSettings(num_windows=20, window_size=10, num_starts=0),
        num_windows=2,
    )
    assert b.scale == a.scale and b.acceptance == a.acceptance
    np.testing.assert_array_equal(np.asarray(b.centre), np.asarray(a.centre))
