"""control_variates.glmm_sums: the per-row quadratic the GLMM proxy's residuals subtract against float64 numpy, and the
ridge pairs whose fixed move the known sum carries on the level effects (`on_ridge`) against float64."""

import jax
import jax.numpy as jnp
import numpy as np
from helpers_glmm import crossed, grouped_design

from minibatch_mcmc.control_variates.glmm import glmm_proxy
from minibatch_mcmc.control_variates.glmm_sums import on_ridge, row_quadratic
from minibatch_mcmc.models.glmm import dimension, glmm_model


def test_row_quadratic_jitted_over_moves():
    """``row_quadratic`` jitted and vmapped over 12 moves of 10^4 rows (a symmetric ``(eta, phi)`` Hessian per row, two
    ``phi``) equals ``a delta + b . dphi + step' H step / 2`` from numpy in float64 to 1e-5 (float32 rounding of O(1)
    terms). Catches jax 0.10.2's CPU miscompile of the earlier form, ``sum(grad * step) + einsum(step, H, step) / 2`` on
    a per-row step ``(delta, dphi broadcast)``: jitted and vmapped over four or more moves it was O(1) off at these
    inputs, while each term alone, the vmapped form unjitted and the jitted form looped were right to rounding (issue
    31: a Student-t GLMM's influence probes along ``phi`` off by a fraction of a nat a row, a capped stratum, a biased
    ``sigma``)."""
    rng = np.random.default_rng(0)
    n, moves = 10_000, 12
    grad = rng.normal(size=(n, 3))
    h = rng.normal(size=(n, 3, 3))
    hess = 0.5 * (h + np.swapaxes(h, 1, 2))
    x = rng.normal(size=n)
    v = 0.1 * rng.normal(size=(moves, 3))
    g32, h32, x32 = (jnp.asarray(a, jnp.float32) for a in (grad, hess, x))
    got = jax.jit(jax.vmap(lambda m: row_quadratic(g32, h32, x32 * m[0], m[1:])))(jnp.asarray(v, jnp.float32))
    v = np.asarray(np.float32(v), np.float64)
    want = []
    for m in v:
        step = np.c_[np.asarray(x32, np.float64) * m[0], np.broadcast_to(m[1:], (n, 2))]
        g, hh = np.asarray(g32, np.float64), np.asarray(h32, np.float64)
        want.append(np.sum(g * step, axis=1) + 0.5 * np.einsum("bi,bij,bj->b", step, hh, step))
    np.testing.assert_allclose(np.asarray(got, np.float64), np.stack(want), rtol=0, atol=1e-5)


def ridge_case(n: int = 100_000):
    """A centred bernoulli random-intercept GLMM (20 levels of unequal size) in float32 and float64, a centre, and ten
    pairs of moves mostly along the intercept-effect ridge (``beta_0 + s``, every ``u_g - s``, ``s`` of s.d. 0.3)."""
    model, data = glmm_model(grouped_design("bernoulli", n, 20, 3), "bernoulli", centred=True)
    layout = model.glmm.layout
    rng = np.random.default_rng(0)
    centre = np.float32(rng.normal(0.0, 0.1, dimension(layout)))
    along = np.zeros(centre.size)
    along[0], along[layout.fixed : layout.fixed + 20] = 1.0, -1.0
    moves = [
        tuple(np.float32(centre + 0.3 * rng.normal() * along + 0.01 * rng.normal(size=centre.size)) for _ in "ab")
        for _ in range(10)
    ]
    return model, data, centre, moves


def in_float64(data: dict) -> dict:
    """``data`` with its floating columns in float64 (call inside ``jax.enable_x64``)."""
    floats = {k: np.issubdtype(np.asarray(v).dtype, np.floating) for k, v in data.items()}
    return {k: jnp.asarray(v, jnp.float64) if floats[k] else jnp.asarray(v) for k, v in data.items()}


def abs_form(proxy, v, w) -> float:
    """``L(|v|) + B(|v|, |w|) / 2`` with every coefficient's absolute value: the size of the terms the known sum adds."""
    a = jnp.abs
    absolute = proxy._replace(
        **{k: a(getattr(proxy, k)) for k in ("gx", "hxx", "mx", "gphi", "kphi")},
        **{k: tuple(map(a, getattr(proxy, k))) for k in ("gz", "hzx", "hzz", "mz")},
        pairs=tuple(p._replace(hzz=a(p.hzz)) for p in proxy.pairs),
    )
    v, w = jax.tree_util.tree_map(a, v), jax.tree_util.tree_map(a, w)
    return float(absolute.linear(v) + 0.5 * absolute.bilinear(v, w))


def test_known_sum_along_the_ridge_in_float32():
    """The float32 GLMM proxy's known sum (second order, no cubic) over moves along the intercept-effect ridge of a
    centred model at ``N = 10^5`` within ``64 eps_32`` times the size of the terms it adds (``abs_form`` of the moves
    carried on the ridge, ``glmm_sums.on_ridge``: a dot product's forward-error bound, ``64`` for the depth of XLA's
    sums) of the float64 proxy's; the same float32 proxy without its ``ridge`` pair is further off than that bound on
    most moves (its ``hxx`` and ``hzx`` terms are about ``N dbeta_0^2`` each, cancelling): the test sees the ridge's
    rounding, which before ``on_ridge`` put the known sum of a Student-t GLMM tens of millinats off at ``N = 3e5``."""
    model, data, centre, moves = ridge_case()
    p32 = glmm_proxy(model, {k: jnp.asarray(v) for k, v in data.items()}, jnp.asarray(centre), cubic_info=None)
    assert p32.ridge == ((0, 0, 0),)
    with jax.enable_x64(True):
        p64 = glmm_proxy(model, in_float64(data), jnp.asarray(centre, jnp.float64), cubic_info=None)
        eps, far = float(np.finfo(np.float32).eps), 0
        for a, b in moves:
            want = float(p64.known_sum(jnp.asarray(a, jnp.float64), jnp.asarray(b, jnp.float64)))
            v0, v1 = (on_ridge(p64.ridge, p64.deltas(jnp.asarray(t, jnp.float64))) for t in (a, b))
            bound = (
                64
                * eps
                * abs_form(p64, jax.tree_util.tree_map(jnp.subtract, v1, v0), jax.tree_util.tree_map(jnp.add, v1, v0))
            )
            assert abs(float(p32.known_sum(jnp.asarray(a), jnp.asarray(b))) - want) <= bound, (want, bound)
            far += abs(float(p32._replace(ridge=()).known_sum(jnp.asarray(a), jnp.asarray(b))) - want) > bound
    assert far >= 8, far


def test_on_ridge_keeps_every_row_and_the_known_sum():
    """``on_ridge`` leaves every row's ``delta_i`` and, in float64, the known sum unchanged (to 1e-12 relative) on a
    crossed design whose intercept pairs with ``g``'s effect and whose ``x1`` with ``h``'s slope (``ridge_pairs``
    takes each fixed column once: ``h``'s intercept stays unpaired); a pair whose columns differ would move ``delta_i``."""
    design = crossed("bernoulli", 2_000)
    model, data = glmm_model(design, "bernoulli", centred=True)
    with jax.enable_x64(True):
        d64 = in_float64(data)
        rng = np.random.default_rng(1)
        centre = jnp.asarray(rng.normal(0.0, 0.2, dimension(model.glmm.layout)))
        proxy = glmm_proxy(model, d64, centre)
        assert proxy.ridge == ((0, 0, 0), (1, 1, 1))
        a, b = (centre + jnp.asarray(rng.normal(0.0, 0.3, centre.size)) for _ in "ab")
        v = proxy.deltas(b)
        np.testing.assert_allclose(
            proxy.row_delta(on_ridge(proxy.ridge, v), d64), proxy.row_delta(v, d64), rtol=1e-12, atol=1e-12
        )
        got, plain = proxy.known_sum(a, b), proxy._replace(ridge=()).known_sum(a, b)
        np.testing.assert_allclose(float(got), float(plain), rtol=1e-12)
    other = design._replace(x=np.c_[design.x[:, 0], design.x[:, 1] + 1e-3])
    model2, data2 = glmm_model(other, "bernoulli", centred=True)
    assert glmm_proxy(model2, data2, jnp.zeros(dimension(model2.glmm.layout))).ridge == ((0, 0, 0),)


def test_student_t_third_derivative_at_a_near_zero_residual():
    """A Student-t GLMM's per-row third derivative in ``eta`` (``eta_third``, the proxy's cubic sums) at residuals from 0
    to 7.45e-8 to 1 (the row that stopped a warm-up at N = 1e5: its ``t_i`` was ``-inf``, so the sums ``txxx``, ``tzzz``
    at a centre near the mode were not finite) equals the closed form ``2 (nu + 1) r (r^2 - 3 s) / (s + r^2)^3`` (``r = y - eta``,
    ``s = nu sigma^2``) in float64, within 64 float32 epsilons of its terms' size."""
    from minibatch_mcmc.control_variates.glmm_sums import eta_third
    from minibatch_mcmc.models.glmm_families import row_log_density

    phi = jnp.asarray([9.55e-4, 1.1162788], jnp.float32)  # log sigma, and nu's unconstrained value (the failing point)
    r = np.array([0.0, 7.45e-8, -1e-6, 1e-3, 0.3, -1.0, 5.0])
    eta = jnp.zeros(r.size, jnp.float32)
    got = np.asarray(eta_third(lambda e, p, b: row_log_density("student_t", e, p, b), eta, phi, {"y": jnp.asarray(r)}))
    sigma2, nu = np.exp(2 * 9.55e-4), np.exp(np.log1p(np.exp(1.1162788)))  # the family's log nu = softplus(phi_1)
    s, r32 = nu * sigma2, r.astype(np.float32).astype(np.float64)
    want = (nu + 1.0) * 2.0 * r32 * (r32**2 - 3.0 * s) / (s + r32**2) ** 3
    size = (nu + 1.0) * 2.0 * np.abs(r32) * (r32**2 + 3.0 * s) / (s + r32**2) ** 3
    assert np.all(np.isfinite(got)), got
    np.testing.assert_array_less(np.abs(got - want), 64 * np.finfo(np.float32).eps * size + 1e-30)
