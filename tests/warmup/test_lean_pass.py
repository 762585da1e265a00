"""The lean warm-up's chunk pass (``warmup.lean_pass``) on the GLMs, whose sums come from the family's derivatives in
``eta`` and whose probe residuals are the family's remainder in ``delta eta``: each against the same quantity computed
independently in float64 by autodiff of the model's own log-likelihood."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.control_variates.influence import probe_points
from minibatch_mcmc.models import logistic_regression, poisson_regression, probit_regression, student_t_regression
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.models.l1_regression import L1RegressionSettings, l1_regression
from minibatch_mcmc.warmup.lean_pass import chunk_pass, glm_rows, stream

ROWS, D = 512, 3
EPS32 = float(np.finfo(np.float32).eps)
MODELS = {
    "logistic": lambda: logistic_regression(),
    "probit": lambda: probit_regression(),
    "poisson_offset": lambda: poisson_regression(offset=True),
    "gaussian": lambda: l1_regression(L1RegressionSettings(lam=2.0)),
    "student_t": lambda: student_t_regression(nu=4.0, sigma=0.7),
}


def data(name: str) -> dict:
    """``ROWS`` rows of the model's data: covariates ``N(0, 1)``, responses of its kind (and a Poisson offset)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, D)).astype(np.float32)
    if name in ("logistic", "probit"):
        y = (rng.random(ROWS) < 0.4).astype(np.int32)
    elif name == "poisson_offset":
        y = rng.poisson(2.0, ROWS).astype(np.int32)
    else:
        y = rng.standard_normal(ROWS).astype(np.float32)
    out = {"x": x, "y": y}
    if name == "poisson_offset":
        out["offset"] = rng.uniform(-0.5, 0.5, ROWS).astype(np.float32)
    return out


@functools.lru_cache
def reference_program(model):
    """The float64 reference of ``float64_reference`` as one compiled program for ``model`` (op by op, each operation
    compiled apart, it cost more than the pass it checks)."""

    def row(theta, one):
        return model.log_lik(theta, jax.tree_util.tree_map(lambda a: a[None], one))[0]

    @jax.jit
    def reference(r, w, c64, steps):
        values = jax.vmap(lambda one: row(c64, one))(r)
        grads = jax.vmap(lambda one: jax.grad(row)(c64, one))(r)
        hessians = jax.vmap(lambda one: jax.hessian(row)(c64, one))(r)
        at = jax.vmap(lambda p: jax.vmap(lambda one: row(c64 + p, one))(r))(steps)
        resid = at - values[None] - steps @ grads.T - 0.5 * jnp.einsum("pa,iab,pb->pi", steps, hessians, steps)
        return {
            "value": jnp.sum(w * values),
            "grad": w @ grads,
            "hess": jnp.einsum("i,iab->ab", w, hessians),
            "resid": resid,
            "terms": jnp.abs(at - values[None]) + jnp.abs(steps @ grads.T),
            "abs_value": jnp.sum(jnp.abs(values)),
            "abs_grad": jnp.abs(grads).sum(0),
            "abs_hess": jnp.abs(hessians).sum(0),
        }

    return reference


def float64_reference(model, rows: dict, weight: np.ndarray, c: np.ndarray, points: np.ndarray) -> dict:
    """Float64 autodiff of the model's log-likelihood: the weighted sums, their gradient and Hessian at ``c``, each row's
    residual ``l_i(p) - l_i(c) - g_i . d - d' H_i d / 2`` at each point (``d = p - c``), and the abs-sums bounding the
    float32 rounding of each sum."""
    with jax.enable_x64(True):
        r = {k: jnp.asarray(v, jnp.float64 if v.dtype.kind == "f" else v.dtype) for k, v in rows.items()}
        w, c64 = jnp.asarray(weight, jnp.float64), jnp.asarray(c, jnp.float64)
        got = reference_program(model)(r, w, c64, jnp.asarray(points, jnp.float64) - c64[None])
        return {k: float(v) if v.ndim == 0 else np.asarray(v) for k, v in got.items()}


def check_family(name: str) -> None:
    """``test_glm_pass_against_float64_autodiff`` for one family."""
    model = MODELS[name]()
    rows = data(name)
    assert glm_rows(model, rows, D)
    c = np.array([0.3, -0.2, 0.1], np.float32)
    weight = np.ones(ROWS, np.float32)
    weight[:7] = 0.0  # rows an overlapping last chunk repeats weigh 0
    part = chunk_pass(model, lambda x: x, 2)
    for scale in (0.002, 0.1):  # the series branch (every |delta eta| < 0.1), then the closed form's
        points = np.asarray(probe_points(jnp.asarray(c), scale * np.eye(D)))
        sums, (resid, _), _ = part(rows, weight, jnp.asarray(c), jnp.asarray(points), jnp.stack([jnp.asarray(c)] * 2))
        ref = float64_reference(model, rows, weight, c, points)
        tol = 32 * EPS32
        assert abs(float(sums["value"]) - ref["value"]) <= tol * ref["abs_value"]
        for k in ("grad", "hess"):
            err = np.abs(np.asarray(sums[k], np.float64) - ref[k])
            np.testing.assert_array_less(err, tol * ref[f"abs_{k}"] + 1e-30)
        # the closed form subtracts the Taylor terms from f(eta + delta) - f(eta): float32 rounding of their size
        slack = 16 * EPS32 * ref["terms"] if scale > 0.01 else 0.0
        err = np.abs(np.asarray(resid, np.float64) - ref["resid"])
        np.testing.assert_array_less(err, 1e-3 * np.abs(ref["resid"]) + slack + 1e-14)  # 1e-14: float64 rounding


def test_glm_pass_against_float64_autodiff():
    """On the logistic family, a chunk's weighted sums of ``l_i``, its gradient and Hessian (from ``f'`` and ``f''`` in
    ``eta``) equal float64 autodiff of the model's own log-likelihood within float32 rounding of the sums (32 ulps of
    the summed magnitudes: a wrong sign, a missing weight, a family's wrong derivative is off by far more), and every
    row's probe residual equals the float64 one: within 1e-3 of its size where every ``|delta eta|`` is below the
    series limit (residuals ~1e-9 nats; before, they were ``l_i(p) - l_i(c) - q_i`` in float32, rounding noise ~1e-7
    nats that fails this by 100x), and within the float32 rounding of the Taylor terms in the closed-form branch."""
    check_family("logistic")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(MODELS) - {"logistic"}))
def test_glm_pass_against_float64_autodiff_other_families(name):
    """``test_glm_pass_against_float64_autodiff`` on probit, Poisson with an offset, Gaussian and Student-t (~10 s each)."""
    check_family(name)


def test_a_pass_without_probes_sums_the_same():
    """A pass without a bulk level (no probes, its far points at the centre: both skipped) gives the sums of one with
    them and no deviations, its far rises 0; with them, the largest deviation is the row whose float64
    residual is largest (a row 40x out included)."""
    model, rows = logistic_regression(), data("logistic")
    rows["x"][5] *= 40.0
    c = jnp.asarray([0.3, -0.2, 0.1], jnp.float32)
    pts = probe_points(c, 0.05 * np.eye(D))
    part = chunk_pass(model, lambda x: x, 2)
    plain, none = stream(part, rows, ROWS, 128, c, pts, None, 50, 1.0, jnp.stack([c, c]))
    probed, top = stream(part, rows, ROWS, 128, c, pts, np.zeros((pts.shape[0], 1)), 50, 1.0, jnp.stack([c + 1, c - 1]))
    ref = float64_reference(model, rows, np.ones(ROWS), np.asarray(c), np.asarray(pts))
    assert none is None and int(top[1][0]) == int(np.argmax(np.abs(ref["resid"]).max(0)))
    for k in ("value", "grad", "hess"):
        np.testing.assert_array_equal(plain[k], probed[k])
    np.testing.assert_array_equal(plain["far"], [0.0, 0.0])
    assert np.all(probed["far"] < 0.0)


def test_far_rise_on_a_huge_log_likelihood_is_within_rounding():
    """The far points' rise ``sum_i (l_i(far) - l_i(c))`` on a Gaussian model over Cauchy noise (1e5 rows, a
    log-likelihood of about -1e10, where one float32 ulp of the sum is 1,024 nats) against float64: within three
    root-sum-squares of each row's rounding (three half-ulps of its own ``|l_i|`` at each point: ~7,500 nats, dominated
    by the largest row; the code's error was ~160). Would catch the rise read as the difference of two float32 sums, whose rounding (XLA's sums in a
    chunk) reached 2.2e4 nats here and made a Gaussian model's mode a false 'keeps rising' ``NoModeError``."""
    rng = np.random.default_rng(0)
    n = 100_000
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 2))]).astype(np.float32)
    y = (x @ np.array([0.5, -1.0, 2.0]) + rng.standard_cauchy(n)).astype(np.float32)

    def log_lik(theta, rows):
        r = rows["y"] - rows["x"] @ theta
        return -0.5 * r * r

    model = Model(lambda t: jnp.sum(-0.5 * t * t), log_lik, "gaussian_known_noise")
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    h = x64.T @ x64
    mode = np.linalg.solve(h, x64.T @ y64)
    lam, vec = np.linalg.eigh(h)
    step = 64.0 * vec[:, 0] / np.sqrt(lam[0])
    far = np.stack([mode + step, mode - step])
    c = jnp.asarray(mode, jnp.float32)
    c64 = np.asarray(c, np.float64)
    far32 = jnp.asarray(far, jnp.float32)

    def rows_ll(t: np.ndarray) -> np.ndarray:
        return -0.5 * (y64 - x64 @ t) ** 2

    here = rows_ll(c64)
    part = chunk_pass(model, lambda t: t, 2)
    sums, _ = stream(part, {"x": x, "y": y}, n, 16_384, c, probe_points(c, np.zeros((1, 3))), None, 50, 1.0, far32)
    for k in range(2):
        there = rows_ll(np.asarray(far32[k], np.float64))
        exact = float(np.sum(there - here))
        unit = 3.0 * (EPS32 / 2.0) * (np.abs(there) + np.abs(here))  # r = y - x . t, then r * r, at each point
        tol = 3.0 * np.sqrt(np.sum(unit**2))  # three s.d.s of independent per-row roundings
        assert abs(sums["far"][k] - exact) <= tol, (k, sums["far"][k], exact, tol)
        assert exact < -1000.0  # the fall the rise must not hide


def test_head_hands_back_the_first_rows_residuals_and_the_same_sums():
    """With ``head`` a chunk hands back the first ``head`` rows' probe residuals only: bitwise those of a chunk function
    without it, with the same sums, far rises, deviations and prior (would catch a head taken from the wrong rows or
    end, or a deviation reduced over the head alone); and the far rises, which reuse the sums' own ``l_i(c)``, equal
    the float64 ``sum_i w_i (l_i(far) - l_i(c))`` within float32 rounding of the rows' terms."""
    model, rows = logistic_regression(), data("logistic")
    c = jnp.asarray([0.3, -0.2, 0.1], jnp.float32)
    pts = probe_points(c, 0.05 * np.eye(D))
    far = jnp.stack([c + 0.4, c - 0.4])
    weight = np.ones(ROWS, np.float32)
    weight[:7] = 0.0
    args = (rows, weight, c, pts, far)
    full_sums, (full_resid, full_dev), full_prior = chunk_pass(model, lambda x: x, 2)(*args)
    sums, (resid, dev), prior = chunk_pass(model, lambda x: x, 2, head=40)(*args)
    assert resid.shape == (pts.shape[0], 40)
    np.testing.assert_array_equal(np.asarray(resid), np.asarray(full_resid)[:, :40])
    np.testing.assert_array_equal(np.asarray(dev), np.asarray(full_dev))
    for k in full_sums:
        np.testing.assert_array_equal(np.asarray(sums[k]), np.asarray(full_sums[k]))
    for a, b in zip(prior, full_prior):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with jax.enable_x64(True):
        r = {k: jnp.asarray(v, jnp.float64 if v.dtype.kind == "f" else v.dtype) for k, v in rows.items()}
        here = model.log_lik(jnp.asarray(c, jnp.float64), r)
        for k in range(2):
            there = model.log_lik(jnp.asarray(far[k], jnp.float64), r)
            exact = float(jnp.sum(jnp.asarray(weight, jnp.float64) * (there - here)))
            tol = 8 * EPS32 * float(jnp.sum(jnp.abs(there) + jnp.abs(here)))
            assert abs(float(sums["far"][k]) - exact) <= tol, (k, float(sums["far"][k]), exact, tol)


@pytest.mark.parametrize("chunk", [128, 100, ROWS])
def test_stream_sums_each_chunk_once_in_order(chunk):
    """``stream`` (each chunk dispatched before the one before is added) equals the chunks added one by one in float64
    in row order, bitwise, the last chunk's rows already read weighing 0 (128 rows: four chunks; 100: the last one
    overlapping its predecessor by 88 rows; one chunk of all rows), and its largest deviations are the rows' own from
    a chunk function over all rows: would catch a chunk added twice or dropped (the one still pending at the end), an
    overlapping row counted twice, or deviations paired with another chunk's rows."""
    model, rows = logistic_regression(), data("logistic")
    rows["x"][300] *= 40.0
    c = jnp.asarray([0.3, -0.2, 0.1], jnp.float32)
    pts = probe_points(c, 0.05 * np.eye(D))
    far = jnp.stack([c + 0.4, c - 0.4])
    part = chunk_pass(model, lambda x: x, 2, head=16)
    level = np.zeros((pts.shape[0], 1))
    sums, (top_dev, top_idx) = stream(part, rows, ROWS, chunk, c, pts, level, 50, 1.0, far)
    want, dev = None, np.zeros(ROWS)
    for start in list(range(0, ROWS - chunk + 1, chunk)) + ([ROWS - chunk] if ROWS % chunk else []):
        first = start if start % chunk == 0 else ROWS - ROWS % chunk  # the overlapping last chunk: its new rows
        fresh = np.arange(start, start + chunk) >= first
        piece = {k: v[start : start + chunk] for k, v in rows.items()}
        got, (_, d), _ = part(piece, fresh.astype(np.float32), c, pts, far, level)
        flat = np.concatenate(
            [np.atleast_1d(np.asarray(got[k], np.float64)).reshape(-1) for k in ("value", "grad", "hess", "far")]
        )
        want = flat if want is None else want + flat
        dev[start : start + chunk][fresh] = np.asarray(d, np.float64)[fresh]
    got = np.concatenate([np.atleast_1d(sums[k]).reshape(-1) for k in ("value", "grad", "hess", "far")])
    np.testing.assert_array_equal(got, want)
    order = np.argsort(-dev, kind="stable")[:50]
    np.testing.assert_array_equal(np.sort(top_idx), np.sort(order))
    np.testing.assert_array_equal(np.sort(top_dev), np.sort(dev[order]))
    assert int(top_idx[0]) == 300
