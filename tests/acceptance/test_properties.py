"""Property-based test (hypothesis): every acceptance test, on random ratio populations, sizes and settings,
terminates, counts the data it touches, never returns NaN, and decides exactly when it used all N points."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minibatch_mcmc.acceptance import austere_mh_adaptive, mh_minibatch, mh_sublhd
from minibatch_mcmc.acceptance.austere_design import design_adaptive, design_table
from minibatch_mcmc.acceptance.base import DECISION_RULES, Statistics, uniform_from_bits
from minibatch_mcmc.acceptance.mhsublhd import threshold_uniform
from minibatch_mcmc.acceptance.registry import TESTS

SIZES = (2, 61, 5000)
"""Data sizes (bucketed: one compile per test and size)."""

_TOUCHED: list[np.ndarray] = []


def _record(idx) -> None:
    _TOUCHED.append(np.asarray(idx).copy())


@functools.lru_cache(maxsize=None)
def _nc_design():
    table = design_table(200, [0.0, 0.5, 2.0, 8.0], batch_sizes=(2, 4), epsilons=(0.01, 0.1), n_paths=200)
    return design_adaptive(table, 0.05)


def _range_bound(stats):
    return jnp.max(jnp.abs(stats.data["value"]))  # read directly: not counted as touched rows


VARIANTS = {
    "mhminibatch_0.5": lambda n: mh_minibatch(min(20, n), sigma=0.5),
    "mhminibatch_1.0_delta": lambda n: mh_minibatch(min(50, n), sigma=1.0, delta=0.2),
    "mhminibatch_1.5": lambda n: mh_minibatch(min(5, n), sigma=1.5),
    "austere_nc": lambda n: austere_mh_adaptive(_nc_design()),
    "mhsublhd_fp_range": lambda n: mh_sublhd(
        min(10, n), gamma=2.0, delta=0.1, range_bound=_range_bound, finite_population=True
    ),
}
"""Settings beyond the registered tests' own."""


def _as_sampled(row):
    return lambda n: row.from_options(min(20, n), 1.0)


BUILDERS = {**{name: _as_sampled(t) for name, t in TESTS.items() if not t.contract.reads_bounds}, **VARIANTS}
"""Every registered test (``acceptance.registry.TESTS``) as the ``sample`` command builds it at ``m = min(20, N)``,
``sigma = 1``, but the exact tests that read per-datum bounds (tested with them in tests/acceptance/test_smh.py and
test_mhss.py), and the variants."""
HIDDEN = {"austere_nc": 2, "mhsublhd": 1}
"""Tests with a full-data pass besides the minibatch: hidden data per decision, in units of N."""


@functools.lru_cache(maxsize=None)
def _decider(name: str, n: int):
    test = BUILDERS[name](n)

    @jax.jit
    def decide(key, values, psi, temperature):
        data = {"value": values, "index": jnp.arange(n, dtype=jnp.int32)}

        def log_ratio(rows):
            jax.debug.callback(_record, rows["index"])
            return rows["value"]

        return test.decide(key, Statistics(log_ratio, data, n, psi, temperature))

    return decide


def _population(kind: str, n: int, log_scale: float, loc: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = 10.0**log_scale
    if kind == "normal":
        r = rng.standard_normal(n)
    elif kind == "heavy":
        r = rng.standard_t(1.2, n)  # infinite variance: a few huge ratios
    elif kind == "spikes":
        r = np.where(rng.random(n) < 0.02, rng.standard_normal(n) * 1e3, 0.0)
    else:
        r = np.zeros(n)  # constant population
    return ((r + loc) * scale).astype(np.float32)


def _exact_uniform(name: str, key) -> tuple[str, float]:
    """The threshold the test's exact fallback compares ``Delta`` with: ('metropolis', log u) or ('barker', -x_log)."""
    if name == "metropolis":
        return "metropolis", float(np.log(jax.random.uniform(key, (), jnp.float32, minval=jnp.finfo(jnp.float32).tiny)))
    if name == "barker":
        return "barker", -float(jax.random.logistic(key, (), jnp.float32))
    if name.startswith("mhminibatch"):
        u = float(uniform_from_bits(jax.random.bits(key, (8,), dtype=jnp.uint32)[7], jnp.float32))
        return "barker", -float(np.log(u) - np.log1p(-u))
    if name == "penalty":  # MHminibatch's bit layout: the uniform is the fifth of eight words
        return "metropolis", float(
            np.log(uniform_from_bits(jax.random.bits(key, (8,), dtype=jnp.uint32)[4], jnp.float32))
        )
    if name.startswith("mhsublhd"):
        return "metropolis", float(np.log(threshold_uniform(key)))
    return "metropolis", float(np.log(uniform_from_bits(jax.random.bits(key, (5,), dtype=jnp.uint32)[4], jnp.float32)))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_test_declares_its_rule_and_first_rows(name):
    """Every test says which acceptance probability it targets and which distinct rows it reads first (none: full data)."""
    test = BUILDERS[name](61)
    assert test.decision_rule in DECISION_RULES
    assert test.decision_rule == ("barker" if name == "barker" or name.startswith("mhminibatch") else "metropolis")
    rows = np.asarray(test.first_rows(jax.random.key(3), 61))
    assert rows.dtype == np.int32 and np.unique(rows).size == rows.size and np.all((rows >= 0) & (rows < 61))
    assert (rows.size == 0) == (name in ("metropolis", "barker"))


@pytest.mark.parametrize("name", sorted(BUILDERS))
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.sampled_from(SIZES),
    kind=st.sampled_from(["normal", "heavy", "spikes", "constant"]),
    log_scale=st.floats(-6.0, 3.0),
    loc=st.floats(-3.0, 3.0),
    seed=st.integers(0, 2**31 - 1),
    psi=st.one_of(st.floats(-30.0, 30.0), st.just(-np.inf)),
    log_temperature=st.floats(0.0, 4.0),
)
@example(n=5000, kind="heavy", log_scale=3.0, loc=0.3, seed=1, psi=0.5, log_temperature=0.0)  # reaches N: s2 must be 0
@example(n=2, kind="constant", log_scale=-6.0, loc=1.0, seed=0, psi=0.0, log_temperature=4.0)
def test_acceptance_test_properties(name, n, kind, log_scale, loc, seed, psi, log_temperature):
    values = _population(kind, n, log_scale, loc, seed)
    temperature = np.float32(10.0**log_temperature)
    key = jax.random.key(seed)
    _TOUCHED.clear()
    out = jax.device_get(_decider(name, n)(key, jnp.asarray(values), jnp.float32(psi), jnp.float32(temperature)))
    jax.effects_barrier()
    touched = np.unique(np.concatenate(_TOUCHED)) if _TOUCHED else np.zeros(0, int)

    batch = int(out.batch_size)
    assert 1 <= batch <= n
    assert not out.nonfinite
    for field in ("s2", "epsilon", "pvalue_threshold", "half_width", "delta_star"):
        assert not np.isnan(getattr(out, field)), field
    assert out.s2 >= 0 and out.epsilon >= 0 and out.pvalue_threshold >= 0 and out.half_width >= 0
    # one meaning per column: only the tests that treat the minibatch mean as normal (MHminibatch, penalty) record its
    # CLT bound, only AustereMH a p-value threshold, only MHSubLhd N c_t
    assert (out.epsilon == 0 or name.startswith(("mhminibatch", "penalty"))) and (
        out.pvalue_threshold == 0 or name.startswith("austere")
    )
    assert out.half_width == 0 or name.startswith("mhsublhd")
    if psi == -np.inf:
        assert not out.accepted and out.delta_star == -np.inf
        return
    hidden = HIDDEN.get(name, 0)
    assert int(out.hidden_data) == hidden * n
    if hidden:
        assert touched.size == n  # the full-data pass reads every row
    else:
        assert touched.size == batch  # distinct rows touched = the recorded minibatch size
    if batch == n:
        assert out.s2 == 0  # the without-replacement variance of an estimate from all N points
        total = np.sum(values.astype(np.float64))
        delta = total / np.float64(temperature) + np.float64(psi)
        scale = np.sum(np.abs(values.astype(np.float64))) / np.float64(temperature) + abs(psi)
        tol = 1e-5 * scale + 1e-5
        assert abs(float(out.delta_star) - delta) <= tol, (float(out.delta_star), delta)
        rule, threshold = _exact_uniform(name, key)
        if abs(delta - threshold) > tol:
            assert bool(out.accepted) == (delta > threshold), (rule, delta, threshold)
