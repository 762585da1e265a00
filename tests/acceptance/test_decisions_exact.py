"""Every acceptance test's decisions, draw by draw, against an independent float64 re-implementation of its paper.

The library and the reference (``reference_decisions.py``) see the same rows in the same order and the same
uniforms (rebuilt from the key with the library's public randomness helpers; for MHminibatch ``X_corr`` is the
library's alias sampler applied to the key's two uniforms). Everything else is recomputed in float64 by the
reference. On ``DRAWS`` keys and several ratio populations (Gaussian, exponential and log-normal skew, Student-t
with 3 dof, the L1-regression terms) each decision, batch size and ``delta_star`` must be equal, except on
near-ties: draws where some comparison the reference made (a stopping rule or the final decision) lies within
a relative ``TIE`` (1e-6, a few float32 roundings) of its threshold. Those are counted and bounded by
``MAX_TIES`` (0.5% of the draws; 0-6 of 2000 are seen; AustereMH's p-value ties, within 0.5% of ``eps``, 4%); a
disagreement on any other draw fails the test.

Power: ``test_a_wrong_rule_is_caught`` runs the reference with one ingredient swapped for a plausible mistake and
checks that it disagrees with the library on at least 10 draws that are not near-ties, i.e. the comparison above would fail
had the library made that mistake. Measured on 2000 draws (Gaussian to log-normal populations):
AustereMH with a Barker threshold ~1900 disagreements, with a normal instead of Student-t p-value 22-39, without
the finite-population correction ~900-1300; MHminibatch without the finite-population factor ~1800-2100 (where the
batch grows), without ``X_nc`` ~100-300; MHSubLhd with a Barker threshold ~600-1300, without the range term
~650-900; the naive test with a Barker threshold ~350-500.
"""

import functools

import numpy as np
import pytest
from reference_decisions import (
    austere_reference,
    correction_draws,
    draw_inputs,
    exact_reference,
    keys_for,
    mhminibatch_reference,
    mhsublhd_reference,
    naive_reference,
    ratio_population,
    run_decisions,
)

from minibatch_mcmc.acceptance import (
    BarkerTest,
    MetropolisTest,
    austere_mh,
    mh_minibatch,
    mh_sublhd,
    mint,
    naive_minibatch,
)

N = 2000
DRAWS = 2000
TIE = 1e-6
MAX_TIES = DRAWS // 200
MAX_TIES_PVALUE = DRAWS // 25
"""AustereMH's ties include p-values within 0.5% of eps (its float32 incomplete beta is good to a few 1e-3):
~1% of draws at m = 100 (20 stages), up to ~2% at m = 30 and eps = 0.05 (66 stages) are seen."""
POPULATIONS = ["normal", "exponential", "lognormal", "t3", "l1"]
SETTINGS = [(0.8, 20.0, 1.0), (-0.5, 5.0, 1.0), (-1.2, 60.0, 2.5)]
"""(Delta, sd of N r_i, temperature K): the batch grows to ~8m / stays at m / grows to ~N."""


@functools.lru_cache(maxsize=None)
def _inputs(layout: str):
    """The keys and, for a minibatch test, the row order and uniforms each key gives (computed once per layout)."""
    keys = keys_for(1, DRAWS)
    return keys, (None if layout == "none" else draw_inputs(keys, N, layout))


MHMINIBATCH_SETTINGS = {"mhminibatch": (50, 1.0), "mhminibatch_sigma0.5": (40, 0.5)}
"""The MHminibatch cases: (m, sigma)."""


def _build(name: str, n: int):
    """(library test, reference function of (r, psi, keys, inputs, K, mutation), inputs layout)."""
    if name in MHMINIBATCH_SETTINGS:
        m, sigma = MHMINIBATCH_SETTINGS[name]
        test = mh_minibatch(m, sigma=sigma)

        x_corr = correction_draws(_inputs("eight")[0], test.correction)

        def ref(r, psi, keys, inputs, temp, mutation=""):
            return mhminibatch_reference(r, psi, inputs, x_corr, m, sigma, temp, mutation)

        return test, ref, "eight"
    if name == "austere":
        return (
            austere_mh(100, 0.01),
            (
                lambda r, psi, keys, inputs, temp, mutation="": austere_reference(
                    r, psi, inputs, 100, 0.01, temp, mutation
                )
            ),
            "five",
        )
    if name == "austere_m30":
        return (
            austere_mh(30, 0.05),
            (
                lambda r, psi, keys, inputs, temp, mutation="": austere_reference(
                    r, psi, inputs, 30, 0.05, temp, mutation
                )
            ),
            "five",
        )
    if name == "mhsublhd":
        return (
            mh_sublhd(50, 1.5, 2.0, 0.05),
            lambda r, psi, keys, inputs, temp, mutation="": mhsublhd_reference(
                r / temp, psi, inputs, 50, 1.5, 2.0, 0.05, False, mutation
            ),
            "five",
        )
    if name == "mhsublhd_fp":
        return (
            mh_sublhd(100, 2.0, 1.5, 0.2, finite_population=True),
            lambda r, psi, keys, inputs, temp, mutation="": mhsublhd_reference(
                r / temp, psi, inputs, 100, 2.0, 1.5, 0.2, True, mutation
            ),
            "five",
        )
    if name == "naive":
        return (
            naive_minibatch(100),
            (lambda r, psi, keys, inputs, temp, mutation="": naive_reference(r, psi, inputs, 100, n / temp, mutation)),
            "five",
        )
    if name == "mint":
        # Li and Wong: m = n^tau points, log-likelihood difference of the means scaled by n^lambda
        tau, lam = 0.6, 0.35
        m = int(round(n**tau))
        return (
            mint(tau=tau, lam=lam),
            (
                lambda r, psi, keys, inputs, temp, mutation="": naive_reference(
                    r, psi, inputs, m, n**lam / temp, mutation
                )
            ),
            "five",
        )
    if name in ("metropolis", "barker"):
        test = MetropolisTest() if name == "metropolis" else BarkerTest()
        return test, (lambda r, psi, keys, inputs, temp, mutation="": exact_reference(r, psi, keys, name, temp)), "none"
    raise ValueError(name)


TESTS = [
    "mhminibatch",
    "mhminibatch_sigma0.5",
    "austere",
    "austere_m30",
    "mhsublhd",
    "mhsublhd_fp",
    "naive",
    "mint",
    "metropolis",
    "barker",
]
_CACHE: dict = {}


def _compare(name: str, kind: str, setting: tuple[float, float, float]):
    """Library outcomes and the reference for one test, population and setting."""
    if name not in _CACHE:
        _CACHE[name] = _build(name, N)
    test, ref, layout = _CACHE[name]
    delta, sd, temp = setting
    r32, psi = ratio_population(kind, N, delta, sd * temp, seed=3)
    keys, inputs = _inputs(layout)
    out = run_decisions(test, r32, psi, keys, temp)
    return out, lambda mutation="": ref(r32.astype(np.float64), psi, keys, inputs, temp, mutation), r32, temp


def assert_same_decisions(out, ref, r32: np.ndarray, temp: float, max_ties: int = MAX_TIES) -> int:
    """Decisions and batch sizes equal except on counted near-ties; ``delta_star`` equal to float32 rounding."""
    acc, bs = np.asarray(out.accepted), np.asarray(out.batch_size)
    ds = np.asarray(out.delta_star, np.float64)
    ties = ref.margin < TIE
    differ = (acc != ref.accepted) | (bs != ref.batch_size)
    assert not np.any(differ & ~ties), (np.flatnonzero(differ & ~ties)[:10], ref.margin[differ & ~ties][:10])
    assert ties.sum() <= max_ties, ties.sum()
    same = bs == ref.batch_size
    scale = 1.0 + N * float(np.max(np.abs(r32))) / temp
    np.testing.assert_allclose(ds[same], ref.delta_star[same], rtol=0, atol=1e-5 * scale)
    return int(ties.sum())


@pytest.mark.parametrize("name", ["mhminibatch", "austere", "mhsublhd", "naive"])
def test_decisions_match_the_reference(name):
    """Each test on a log-normal population (Delta = 0.8, sd(Lambda_i) = 20): same decision, rows and delta_star."""
    out, ref, r32, temp = _compare(name, "lognormal", SETTINGS[0])
    assert_same_decisions(out, ref(), r32, temp, MAX_TIES_PVALUE if name.startswith("austere") else MAX_TIES)


@pytest.mark.slow
@pytest.mark.parametrize("kind", POPULATIONS)
@pytest.mark.parametrize("name", ["mhminibatch", "austere", "mhsublhd", "naive", "mint", "metropolis"])
def test_decisions_match_the_reference_on_every_population(name, kind):
    """Each test on each population shape (Delta = 0.8, sd(Lambda_i) = 20): same decision, rows and delta_star."""
    out, ref, r32, temp = _compare(name, kind, SETTINGS[0])
    assert_same_decisions(out, ref(), r32, temp, MAX_TIES_PVALUE if name.startswith("austere") else MAX_TIES)


@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS[1:], ids=["no-growth", "tempered-large-spread"])
@pytest.mark.parametrize("kind", POPULATIONS)
@pytest.mark.parametrize("name", TESTS)
def test_decisions_match_the_reference_more_settings(name, kind, setting):
    """The same on more settings (no growth; K = 2.5 with a spread that reads ~N rows) and test variants."""
    out, ref, r32, temp = _compare(name, kind, setting)
    assert_same_decisions(out, ref(), r32, temp, MAX_TIES_PVALUE if name.startswith("austere") else MAX_TIES)


@pytest.mark.slow
@pytest.mark.parametrize("kind", POPULATIONS)
@pytest.mark.parametrize("name", ["mhminibatch_sigma0.5", "austere_m30", "mhsublhd_fp", "barker"])
def test_variant_decisions_match_the_reference(name, kind):
    """Test variants (sigma = 0.5, m = 30 at eps = 0.05, the Bernstein-Serfling width, full-data Barker)."""
    out, ref, r32, temp = _compare(name, kind, SETTINGS[0])
    assert_same_decisions(out, ref(), r32, temp, MAX_TIES_PVALUE if name.startswith("austere") else MAX_TIES)


MUTATIONS = [
    ("austere", "barker"),
    ("austere", "normal"),
    ("austere", "no_fpc"),
    ("mhminibatch", "no_fpc"),
    ("mhminibatch", "no_xnc"),
    ("mhsublhd", "barker"),
    ("mhsublhd", "no_range"),
    ("naive", "barker"),
    ("mint", "barker"),
]


@pytest.mark.parametrize(
    "name, mutation", [c if c[0] != "mint" else pytest.param(*c, marks=pytest.mark.slow) for c in MUTATIONS]
)
def test_a_wrong_rule_is_caught(name, mutation):
    """A reference with a plausible mistake disagrees with the library on at least 10 draws that are not near-ties:
    ``assert_same_decisions`` would fail had the library made that mistake (counts in the module docstring)."""
    out, ref, r32, temp = _compare(name, "lognormal", SETTINGS[0])
    wrong = ref(mutation)
    differ = (np.asarray(out.accepted) != wrong.accepted) | (np.asarray(out.batch_size) != wrong.batch_size)
    assert (differ & (wrong.margin >= TIE)).sum() >= 10, differ.sum()
