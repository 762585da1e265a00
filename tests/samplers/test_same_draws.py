"""Refactors keep draws: every sampler and acceptance test, on fixed seeds, draws what the committed
reference (``reference_draws.npz``, written by ``reference_cases.py``) drew.

Behaviour is compared exactly: every accept/reject decision, batch size, data count, move and ring
slot. Floats (positions, statistics) are compared to a tolerance derived from float32 rounding along
the chain (``draws_tolerance.py`` says how), so the test passes on any CPU, BLAS or XLA build and
still fails on a changed key path, read order or decision arithmetic that flips one accept/reject in
40 steps x 2 chains or moves a position by a fraction of a proposal's scale.
"""

from __future__ import annotations

import numpy as np
import pytest
from draws_tolerance import EPS32, float_tolerance, mismatches
from reference_cases import REFERENCE, all_cases

CASES = all_cases()


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    with np.load(REFERENCE) as f:
        for k in f.files:
            case, key = k.split("/", 1)
            out.setdefault(case, {})[key] = f[k]
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_draws_as_reference(name, reference):
    got = CASES[name]()
    want = reference[name]
    assert set(got) - set(want) <= {"rec_residual_sd"}, f"{name}: new arrays recorded: {set(got) - set(want)}"
    assert not (bad := mismatches(got, want)), f"{name}: " + "; ".join(bad)


def test_comparison_has_power(reference):
    """The comparison passes rounding noise and fails a change of behaviour, on every stored case.

    Rounding: every float moved by 4 ulps (the Stiefel case differed by one between machines) must
    pass. Behaviour: one flipped decision, one batch size off by one, or a float moved by ten times
    the tolerance (1.5e-3 of its array's scale, a thirtieth of MALA's step) must each be reported.
    """
    rng = np.random.default_rng(0)
    for name, want in reference.items():
        noisy = {
            k: (v + 4 * EPS32 * np.abs(v) * rng.choice([-1.0, 1.0], v.shape)).astype(v.dtype)
            if np.issubdtype(v.dtype, np.floating)
            else v
            for k, v in want.items()
        }
        assert not mismatches(noisy, want), name
        for key, v in want.items():
            changed = v.copy()
            if v.dtype == bool:
                changed.flat[0] = not changed.flat[0]
            elif np.issubdtype(v.dtype, np.integer):
                changed.flat[0] += 1
            else:
                changed.flat[np.argmax(np.abs(v))] += 10 * float_tolerance(v)
            assert mismatches({**want, key: changed}, want), f"{name}/{key}: a change was not seen"
