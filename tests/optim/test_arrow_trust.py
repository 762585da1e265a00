"""Trust-region steps on an arrow-shaped Hessian (``optim.arrow_trust``): the level-block/Schur route against the same
method on the dense factor and against the dense Newton step and inverse written out here in float64."""

import numpy as np
import pytest

from minibatch_mcmc.optim.arrow_trust import (
    concave_factor,
    dense_arrow,
    glmm_arrow,
    inverse_diagonal,
    length_in,
    trust_step,
)
from minibatch_mcmc.optim.block_newton import ArrowIndex
from minibatch_mcmc.optim.trust_region import eigen_step


def arrow_matrix(levels: int = 40, k: int = 2, m: int = 4, seed: int = 0) -> tuple[np.ndarray, ArrowIndex]:
    """A positive definite arrow ``-H`` (levels interleaved with the globals in the flat order, as a GLMM's are not, so a
    wrong index mapping shows) and its index."""
    rng = np.random.default_rng(seed)
    d = levels * k + m
    order = rng.permutation(d)
    idx = ArrowIndex(order[: levels * k].reshape(levels, k), np.sort(order[levels * k :]))
    neg = np.zeros((d, d))
    for lv in idx.levels:
        x = rng.normal(size=(k, k))
        neg[np.ix_(lv, lv)] = x @ x.T + 0.5 * np.eye(k)
        b = rng.normal(0.0, 0.3, (k, m))
        neg[np.ix_(lv, idx.globals_)], neg[np.ix_(idx.globals_, lv)] = b, b.T
    y = rng.normal(size=(m, m))
    neg[np.ix_(idx.globals_, idx.globals_)] = y @ y.T + 30.0 * np.eye(m)
    return neg, idx


@pytest.mark.parametrize("radius", [100.0, 0.7])
def test_concave_step_equals_the_dense_newton_step(radius):
    """Concave, inside the region (``radius = 100``: the full Newton step ``(-H)^{-1} g``) and on its boundary
    (``radius = 0.7``, in Laplace s.d.s ``||L'd||``): the arrow route's step equals the dense route's and the exact step
    in the ``-H`` metric to rounding, with the decrement ``sqrt(g'(-H)^{-1} g)``. Catches a wrong Schur complement, a
    transposed cross block or a level mapped to the wrong coordinates."""
    neg, idx = arrow_matrix()
    g = np.random.default_rng(1).normal(size=neg.shape[0])
    arrow, dense = trust_step(g, -neg, radius, idx), trust_step(g, -neg, radius, dense_arrow(neg.shape[0]))
    newton = np.linalg.solve(neg, g)
    dec = float(np.sqrt(g @ newton))
    want = newton * min(1.0, radius / dec)
    for s in (arrow, dense):
        np.testing.assert_allclose(s.step, want, rtol=1e-10, atol=1e-12 * np.max(np.abs(want)))
        assert s.concave and abs(s.decrement - dec) <= 1e-10 * dec
        assert abs(s.length - min(radius, dec)) <= 1e-10 * radius
        assert abs(s.predicted - (g @ want - 0.5 * want @ neg @ want)) <= 1e-9 * abs(s.predicted)
    assert abs(length_in(-neg, idx)(want) - np.sqrt(want @ neg @ want)) <= 1e-10 * radius


@pytest.mark.parametrize("radius", [0.3, 4.0])
def test_non_concave_point_takes_the_dense_eigenbasis_step(radius):
    """Not concave (two negative curvatures, one on a level and one on a global, as at a non-centred ridge): the arrow
    factor is refused and the step is ``trust_region.eigen_step``'s ``|H|`` eigenbasis step, to rounding. Catches an
    arrow factor taken of an indefinite matrix (its Newton step would head for a saddle) or a wrong fallback."""
    neg, idx = arrow_matrix(seed=2)
    neg[idx.levels[3, 0], idx.levels[3, 0]] -= 6.0
    neg[idx.globals_[1], idx.globals_[1]] -= 80.0
    assert np.linalg.eigvalsh(neg)[0] < 0
    g = np.random.default_rng(3).normal(size=neg.shape[0])
    assert concave_factor(-neg, idx) is None
    got, want = trust_step(g, -neg, radius, idx), eigen_step(g, -neg, radius)
    np.testing.assert_allclose(got.step, want.step, rtol=1e-12, atol=1e-12 * np.max(np.abs(want.step)))
    assert not got.concave and (got.length, got.decrement) == (want.length, want.decrement)


def test_inverse_diagonal_against_the_dense_inverse():
    """``diag((-H)^{-1})`` from the arrow factor equals numpy's dense inverse's diagonal to rounding: the Laplace
    variances of every coordinate, levels and globals. Catches a missing Schur term in the levels' variances."""
    neg, idx = arrow_matrix(levels=25, k=3, m=5, seed=6)
    np.testing.assert_allclose(inverse_diagonal(concave_factor(-neg, idx)), np.diag(np.linalg.inv(neg)), rtol=1e-11)


@pytest.mark.slow
def test_glmm_arrow_covers_a_glmm_hessian():
    """On a two-factor GLMM's surrogate Hessian (jax.hessian of the log posterior at a random point), every non-zero
    entry lies on the arrow ``glmm_arrow`` gives (the larger factor's levels, the other factor global), so the arrow
    route drops nothing. Catches an index off by a block (another factor's effects or the log s.d.s taken as levels)."""
    import jax
    import jax.numpy as jnp

    from minibatch_mcmc.models.glmm import glmm_model
    from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor

    rng = np.random.default_rng(7)
    n = 300
    x = np.c_[np.ones(n), rng.normal(size=n)]
    f1, f2 = rng.integers(0, 12, n), rng.integers(0, 4, n)
    design = GLMMDesign(
        y=(rng.random(n) < 0.5).astype(float),
        x=x,
        fixed=("Intercept", "x1"),
        factors=(
            GroupFactor("h", f2, np.ones((n, 1)), tuple(range(4)), ("1",)),
            GroupFactor("g", f1, x, tuple(range(12)), ("1", "x1")),
        ),
    )
    model, data = glmm_model(design, "bernoulli", centred=False)
    arrays = {k: jnp.asarray(v) for k, v in data.items()}
    idx = glmm_arrow(model.glmm.layout)
    d = idx.levels.size + idx.globals_.size
    assert idx.levels.shape == (12, 2)
    theta = jnp.asarray(rng.normal(0.0, 0.3, d), jnp.float32)
    h = np.asarray(jax.jit(jax.hessian(lambda t: model.log_prior(t) + jnp.sum(model.log_lik(t, arrays))))(theta))
    on = np.zeros((d, d), bool)
    on[np.ix_(idx.globals_, np.arange(d))] = on[np.ix_(np.arange(d), idx.globals_)] = True
    for lv in idx.levels:
        on[np.ix_(lv, lv)] = True
    assert np.all(h[~on] == 0.0) and np.any(h[on] != 0.0)


def test_one_metric_serves_every_step_length_and_decrement(monkeypatch):
    """At a non-concave point the ``|H|`` eigenbasis is computed once (``metric_at``) and every trust-region step, the
    decrement and the lengths taken there from it equal those recomputed from ``H`` each time (``eigen_step``, float64
    rounding): one ``eigh`` for all, where each call made its own before (18 of the mode search's 55 s of ``eigh`` at
    ``N = 1e5``, ``G = 10^3``). Concave, the metric holds the arrow factor and no ``eigh`` is made."""
    import minibatch_mcmc.optim.trust_region as tr
    from minibatch_mcmc.optim.arrow_trust import decrement, metric_at

    neg, idx = arrow_matrix(seed=2)
    neg[idx.levels[3, 0], idx.levels[3, 0]] -= 6.0
    g = np.random.default_rng(3).normal(size=neg.shape[0])
    wants = {r: eigen_step(g, -neg, r) for r in (0.3, 4.0)}
    want_dec, want_len = decrement(g, -neg, idx), length_in(-neg, idx)(g)
    calls = []
    eigh = np.linalg.eigh
    monkeypatch.setattr(tr.np.linalg, "eigh", lambda m: calls.append(1) or eigh(m))
    b = metric_at(-neg, idx)
    for r, want in wants.items():
        got = trust_step(g, b, r, idx)
        np.testing.assert_allclose(got.step, want.step, rtol=1e-12, atol=1e-12 * np.max(np.abs(want.step)))
        assert (got.length, got.decrement, got.predicted) == (want.length, want.decrement, want.predicted)
    assert decrement(g, b, idx) == want_dec and length_in(b, idx)(g) == want_len
    assert len(calls) == 1, len(calls)
    concave, at = arrow_matrix(seed=4)
    assert metric_at(-concave, at).factor is not None and len(calls) == 1
