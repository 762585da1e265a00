"""``warmup.glmm_location``: step 4 of the Gibbs sweep with the effects partly centred in location (issue 31).

The weights against their definition, the map ``(x, a) -> (x, u)`` against its Jacobian ``prod e^{v s}`` (autodiff of
the whole map, its determinant in float64) and the shift it should be, the globals move with location weights in
``(0, 1)`` against its exact conditional (a 3-D grid written here from the model's densities, not the code's), and
every weight 0 against the sweep as it was (the same draws on fixed seeds). The whole sampler with the weights on is
checked against the Gaussian GLMM's exact posterior by ``test_gibbs_route``'s slow test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import logsumexp
from test_gibbs_route import gaussian_summaries, intercept_design
from test_group_gibbs import slope_design

from minibatch_mcmc.models.glmm import dimension, glmm_model
from minibatch_mcmc.warmup import group_gibbs as gg
from minibatch_mcmc.warmup.gibbs_route import problem_for
from minibatch_mcmc.warmup.glmm_location import location_weights


def float64_rows(data: dict) -> dict:
    """The rows with float columns in float64 (under ``jax.enable_x64``)."""
    return {k: jnp.asarray(v, jnp.float64) if v.dtype.kind == "f" else jnp.asarray(v) for k, v in data.items()}


def test_location_weights_are_the_datas_share_on_paired_columns():
    """``w = 1 - v`` on each location pair's effect column and 0 on a column no fixed column pairs with, for one chain
    and for a leading chains axis alike: a weight of ``v`` itself, or on the wrong column, fails."""
    v = np.random.default_rng(0).uniform(0.05, 0.95, (2, 5, 3))
    got = location_weights(((0, 0, 0), (2, 0, 2)), (jnp.asarray(v),))[0]
    np.testing.assert_allclose(got[..., 0], 1.0 - v[..., 0], rtol=1e-6)
    np.testing.assert_array_equal(got[..., 1], 0.0)
    np.testing.assert_allclose(got[..., 2], 1.0 - v[..., 2], rtol=1e-6)
    one = location_weights(((0, 0, 0),), (jnp.asarray(v[0]),))[0]
    np.testing.assert_allclose(one, np.asarray(got)[0] * [1, 0, 0], rtol=1e-6)


def test_the_held_coordinates_are_a_shift_with_jacobian_prod_e_vs():
    """With ``a = (u + w beta_j) e^{-v s}`` held (random ``v``, ``w`` in (0, 1) on a random-slope design whose intercept
    and ``x1`` both pair): ``with_globals`` inverts ``standardised``; moving ``beta_j`` by ``d`` moves ``u_{g l}`` by
    ``-w_g d`` (so ``w = 1`` keeps ``beta_j + u_g`` and ``w = 0`` keeps ``u_g``); and the map ``(x, a) -> (x, u)`` has
    ``log |det J| = sum_g v_g s`` (float64 autodiff of the whole map): a shift that depended on ``a``, or a scaling
    left out, fails."""
    with jax.enable_x64(True):
        model, data = glmm_model(slope_design([3, 8, 20]))
        problem = problem_for(model, data)
        layout, pairs = problem.layout, problem.shifts
        assert pairs == ((0, 0, 0), (1, 0, 1))
        rng = np.random.default_rng(1)
        state = gg.from_flat(layout, jnp.asarray(rng.normal(0.0, 0.5, dimension(layout))))
        v = rng.uniform(0.05, 0.95, (3, 2))
        w = np.array([[0.0, 0.3], [0.6, 0.9], [1.0, 0.5]])
        spread, location = (jnp.asarray(v),), (jnp.asarray(w),)
        a = gg.standardised(state, spread, pairs, location)
        x = gg.globals_vector(state)
        back = gg.with_globals(layout, state, x, a, spread, pairs, location)
        np.testing.assert_allclose(back.us[0], state.us[0], rtol=1e-12, atol=1e-12)
        d = np.array([0.3, -0.2])
        moved = gg.with_globals(layout, state, x.at[:2].add(d), a, spread, pairs, location)
        np.testing.assert_allclose(moved.us[0] - state.us[0], -w * d[None, :], atol=1e-12)

        def whole(flat):
            at = gg.with_globals(
                layout, state, flat[: x.size], (flat[x.size :].reshape(3, 2),), spread, pairs, location
            )
            return jnp.concatenate([gg.globals_vector(at), at.us[0].reshape(-1)])

        jac = jax.jacfwd(whole)(jnp.concatenate([x, a[0].reshape(-1)]))
        _, logdet = np.linalg.slogdet(np.asarray(jac))
        assert logdet == pytest.approx(float(np.sum(v * np.asarray(state.log_sds[0])[None, :])), abs=1e-10)


def gaussian_conditional(
    design, theta: np.ndarray, v: np.ndarray, w: np.ndarray, count: int, num: int = 61
) -> tuple[dict, np.ndarray]:
    """Means and s.d.s of ``(mu, log sd, log sigma)`` given ``a = (u + w mu) e^{-v log sd}`` held (``theta``'s), for
    ``y ~ 1 + (1 | g)`` Gaussian with ``models.glmm``'s default priors (as ``test_gibbs_route.gaussian_reference``
    writes them), in float64 on a grid of ``num^3`` points spanning 8 Laplace s.d.s each way of the conditional's mode:
    the target ``p(x, u(x, a)) prod e^{v log sd}``; and ``count`` independent draws from it (a grid point drawn by its
    mass, then uniform within its cell: an s.d. inflated by well under 1%)."""
    m_y, s_y, n, ybar, within = gaussian_summaries(design)
    levels = n.size
    mu0, s0, t0 = theta[0], theta[1 + levels], theta[2 + levels]
    a = (theta[1 : 1 + levels] + w * mu0) * np.exp(-v * s0)
    half_t = stats.t(3, 0.0, 2.5 * s_y)

    def log_target(mu, s, t):
        u = a * np.exp(v * s[..., None]) - w * mu[..., None]
        r = ybar - mu[..., None] - u
        var = np.exp(2 * t[..., None])
        loglik = -0.5 * np.sum((within + n * r**2) / var + n * np.log(2 * np.pi * var), -1)
        return (
            loglik
            + np.sum(stats.norm.logpdf(u, 0.0, np.exp(s[..., None])), -1)
            + np.sum(v) * s
            + stats.norm.logpdf(mu, m_y, 10 * s_y)
            + half_t.logpdf(np.exp(s))
            + s
            + half_t.logpdf(np.exp(t))
            + t
        )

    def neg(p):
        return -float(log_target(*np.asarray(p, np.float64)))

    mode = optimize.minimize(neg, [mu0, s0, t0], method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12}).x
    hess = np.zeros((3, 3))
    h = 1e-4
    for i in range(3):
        for j in range(3):
            e_i, e_j = np.eye(3)[i] * h, np.eye(3)[j] * h
            hess[i, j] = (
                neg(mode + e_i + e_j) - neg(mode + e_i - e_j) - neg(mode - e_i + e_j) + neg(mode - e_i - e_j)
            ) / (4 * h * h)
    half = 8.0 * np.sqrt(np.diag(np.linalg.inv(hess)))
    axes = [np.linspace(m - k, m + k, num) for m, k in zip(mode, half)]
    mu, s, t = np.meshgrid(*axes, indexing="ij")
    logp = log_target(mu, s, t)
    p = np.exp(logp - logsumexp(logp))
    out = {}
    for name, val in (("mu", mu), ("log_sd", s), ("log_sigma", t)):
        mean = np.sum(p * val)
        out[name] = (mean, np.sqrt(np.sum(p * (val - mean) ** 2)))
    rng = np.random.default_rng(12)
    cells = rng.choice(p.size, count, p=p.ravel() / p.sum())
    points = np.stack([g.ravel()[cells] for g in (mu, s, t)], axis=1)
    width = np.array([ax[1] - ax[0] for ax in axes])
    return out, points + rng.uniform(-0.5, 0.5, points.shape) * width


def test_globals_move_with_location_weights_keeps_its_exact_conditional():
    """With ``a = (u + w mu) e^{-v log sd}`` held (a Gaussian random intercept, levels of 2 to 400 rows, ``v`` and
    ``w = 1 - v`` from the levels' information, so weights from near 0 to near 1), 8,000 chains started at independent
    exact draws of the conditional of ``(mu, log sd, log sigma)`` (``gaussian_conditional``) stay there after 10
    globals moves (``rho = 0.3``; most chains move): each mean within 4 Monte Carlo standard errors and each s.d. within
    4 standard errors of an s.d. (0.8% of it at 8,000 draws, normal tails: 3.2%), so a Jacobian left out, a shift of the
    wrong sign in either direction of the map or a 5% s.d. error fails."""
    sizes = [2, 3, 5, 8, 13, 20, 40, 400]
    design = intercept_design(sizes, family="gaussian", seed=3, sd=0.5)
    with jax.enable_x64(True):
        model, data = glmm_model(design, "gaussian")
        problem = problem_for(model, data)
        rows = float64_rows(data)
        n = np.asarray(sizes, float)
        ybar = np.bincount(design.factors[0].codes, design.y) / n
        mu, sd, sigma = float(np.mean(design.y)), 0.5, 1.0
        v = 1.0 / (1.0 + n * sd**2 / sigma**2)
        theta = np.concatenate([[mu], (1.0 - v) * (ybar - mu), [np.log(sd), np.log(sigma)]])
        want, exact = gaussian_conditional(design, theta, v, 1.0 - v, 8000)
        held = ((1.0 - v) * (ybar - mu) + (1.0 - v) * mu) * np.exp(-v * np.log(sd))  # a, the test's own formula
        starts = gg.GibbsState(
            jnp.asarray(exact[:, :1]),
            (
                jnp.asarray(
                    held[None, :, None] * np.exp(v[None, :, None] * exact[:, 1:2, None])
                    - (1.0 - v)[None, :, None] * exact[:, :1, None]
                ),
            ),
            (jnp.asarray(exact[:, 1:2]),),
            jnp.asarray(exact[:, 2:]),
        )
        spread = (jnp.asarray(v[:, None]),)
        location = location_weights(problem.shifts, spread)
        assert problem.shifts == ((0, 0, 0),)

        @jax.jit
        def run(key):
            def one(k, state):
                def step(s, kk):
                    return gg.globals_step(problem, kk, s, 0.3, rows, spread, False, location)[0], None

                return gg.globals_vector(jax.lax.scan(step, state, jax.random.split(k, 10))[0])

            return jax.vmap(one)(jax.random.split(key, 8000), starts)

        draws = np.asarray(run(jax.random.PRNGKey(11)))
    assert np.mean(draws[:, 0] != exact[:, 0]) > 0.5
    for c, name in enumerate(("mu", "log_sd", "log_sigma")):
        mean, sd_ = want[name]
        got = draws[:, c]
        assert abs(got.mean() - mean) < 4 * sd_ / np.sqrt(got.size), (name, got.mean(), mean, sd_)
        assert abs(got.std() - sd_) < 4 * sd_ / np.sqrt(2 * got.size), (name, got.std(), sd_)


def test_zero_location_weights_give_the_sweep_as_it_was():
    """Every location weight 0 (``location_weights`` of all-1 spread weights) gives the same three sweeps of two chains
    as no location weights at all (the sweep before this module): the same MH decisions and the same draws to float32
    rounding on fixed seeds, so the new terms vanish at ``w = 0`` rather than changing the move."""
    model, data = glmm_model(slope_design([3, 8, 20], seed=2))
    problem = problem_for(model, data)
    layout = problem.layout
    rows = jax.tree_util.tree_map(jnp.asarray, data)
    rng = np.random.default_rng(6)
    states = jax.vmap(lambda t: gg.from_flat(layout, t))(jnp.asarray(rng.normal(0.0, 0.4, (2, dimension(layout)))))
    spread = (jnp.asarray(rng.uniform(0.05, 0.95, (2, 3, 2)), jnp.float32),)
    zeros = tuple(jnp.zeros_like(w) for w in location_weights(problem.shifts, spread))
    assert float(jnp.max(location_weights(problem.shifts, gg.unit_spread(layout))[0])) == 0.0

    def sweeps(location):
        def one(key, state, sp, loc):
            out, moved = [], []
            for k in jax.random.split(key, 3):
                state, st = gg.sweep(problem, k, state, jnp.array([0.2, 0.3]), rows, sp, False, loc)
                out.append(gg.globals_vector(state))
                moved.append(st.globals_)
            return jnp.stack(out), jnp.stack(moved), state.us[0]

        keys = jax.random.split(jax.random.PRNGKey(4), 2)
        return jax.jit(jax.vmap(one))(keys, states, spread, location)

    old, new = sweeps(()), sweeps(zeros)
    np.testing.assert_array_equal(new[1], old[1])
    for a, b in zip((new[0], new[2]), (old[0], old[2])):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
