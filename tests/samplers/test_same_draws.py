"""Refactors keep draws: every sampler and acceptance test, on fixed seeds, draws exactly what the
committed reference (``reference_draws.npz``, written by ``reference_cases.py`` on the code before
the kernel-contract refactor) drew. It catches any change of a key path, of the order in which data
are read or of the arithmetic of a decision that flips even one accept/reject in 40 steps x 2 chains.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference_cases import REFERENCE, all_cases

CASES = all_cases()


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(REFERENCE) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_draws_as_reference(name, reference):
    got = CASES[name]()
    want = {k.split("/", 1)[1]: v for k, v in reference.items() if k.split("/", 1)[0] == name}
    added = set(got) - set(want)
    assert set(want) <= set(got) and added <= {"rec_residual_sd"}, f"{name}: the arrays recorded changed: {set(want) ^ set(got)}"
    for key, expected in want.items():
        actual = got[key]
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, (name, key)
        if key.startswith("rec_delta_star") or key.startswith("rec_s2") or key.startswith("rec_epsilon"):
            # diagnostics: allow float rounding of a re-associated sum, never a changed decision
            np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=1e-6, err_msg=f"{name}/{key}")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=f"{name}/{key}")
