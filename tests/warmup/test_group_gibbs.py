"""``warmup.group_gibbs``: the level-by-level Gibbs sweep for GLMMs with many groups (issue 31), against exact answers.

The proposal's density against scipy, the globals move's gradient and Hessian (hand-assembled from per-row derivatives
in ``(eta, phi)``) against autodiff of the whole target, and each level's effects move against 2-D quadrature of the
level's exact conditional (a non-Gaussian one: bernoulli, 3 to 40 rows) all fail on a wrong log-determinant, a wrong
reverse proposal, a chain-rule term left out or a level's rows summed into another's. The slow test runs the whole
sampler on a Gaussian GLMM, whose posterior reduces to a 3-D integral by integrating the effects out exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from minibatch_mcmc.models.glmm import dimension, glmm_model, linear_predictor
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor
from minibatch_mcmc.warmup import group_gibbs as gg
from minibatch_mcmc.warmup.gibbs_route import problem_for


def slope_design(sizes: list[int], seed: int = 0, family: str = "bernoulli") -> GLMMDesign:
    """``y ~ x1 + (x1 | g)`` with the given rows per level (bernoulli, or gaussian responses for continuous families)."""
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    n = codes.size
    x = np.c_[np.ones(n), rng.normal(size=n)]
    eta = (
        -0.3
        + 0.5 * x[:, 1]
        + rng.normal(0.0, 0.7, len(sizes))[codes]
        + rng.normal(0.0, 0.4, len(sizes))[codes] * x[:, 1]
    )
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float) if family == "bernoulli" else eta + rng.standard_t(4, n)
    factor = GroupFactor("g", codes, x.copy(), tuple(f"s{k}" for k in range(len(sizes))), ("1", "x1"))
    return GLMMDesign(y=y, x=x, fixed=("Intercept", "x1"), factors=(factor,))


def test_newton_proposal_density_is_the_normal_it_draws_from():
    """``newton_draw`` draws ``N(m + rho (x - m), (1 - rho^2) P^-1)``, ``m = x + P^-1 grad``, and ``newton_log_q`` is that
    normal's log density up to ``-(k/2) log(2 pi (1 - rho^2))``: scipy's density at 5 points, and the mean and covariance
    of 20,000 draws within 5 Monte Carlo standard errors (a wrong Cholesky side or ``rho`` scaling moves them by more)."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, 2))
    prec = a @ a.T + np.eye(2)
    grad, x, rho = np.array([0.7, -1.2]), np.array([0.3, 0.1]), 0.4
    fit = gg.Fit(jnp.asarray(grad), jnp.asarray(prec))
    cov = (1 - rho**2) * np.linalg.inv(prec)
    m = x + np.linalg.solve(prec, grad)
    centre = m + rho * (x - m)
    for to in rng.normal(size=(5, 2)):
        got = float(gg.newton_log_q(jnp.asarray(to), jnp.asarray(x), fit, rho)) - np.log(2 * np.pi * (1 - rho**2))
        assert got == pytest.approx(stats.multivariate_normal(centre, cov).logpdf(to), abs=1e-5)
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: gg.newton_draw(k, jnp.asarray(x), fit, rho)))(keys), np.float64)
    se = np.sqrt(np.diag(cov) / len(draws))
    assert np.all(np.abs(draws.mean(0) - centre) < 5 * se)
    assert np.all(
        np.abs(np.cov(draws.T) - cov) < 5 * np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / len(draws))
    )


@pytest.mark.parametrize(
    ("family", "partial", "location"),
    [
        ("bernoulli", False, False),
        ("bernoulli", True, False),
        ("bernoulli", True, True),
        pytest.param("student_t", True, True, marks=pytest.mark.slow),  # its two extras: 77 s at load 30
    ],
)
def test_globals_fit_is_the_targets_gradient_and_hessian(family, partial, location):
    """The globals move's gradient and Hessian, assembled from each row's derivatives in ``(eta, phi)`` and the chain
    rule through ``u = e^{v s} a - w beta_j``, equal autodiff of the target in ``(beta, s, phi)`` at fixed ``a`` (prior
    in ``(beta, u, s, phi)``, the ``sum_g v_g s`` Jacobian, all rows' log densities) in float64, random slopes and the
    Student-t's two extras included; with ``partial`` each effect has its own weight ``v`` in (0, 1), so a Jacobian
    left at ``G sum s`` or a second derivative ``z v u`` in place of ``z v^2 u`` fails; with ``location`` each has a
    location weight ``w`` in (0, 1) on both paired columns (intercept and ``x1``), so a ``beta`` column left at ``x_j``
    instead of ``x_j - w z_l``, or a scale column without the ``w beta_j`` of the held effects, fails."""
    with jax.enable_x64(True):
        model, data = glmm_model(slope_design([3, 8, 20], family=family), family)
        problem = problem_for(model, data)
        rows = {k: jnp.asarray(v, jnp.float64) if v.dtype.kind == "f" else jnp.asarray(v) for k, v in data.items()}
        layout = problem.layout
        theta = jnp.asarray(np.random.default_rng(2).normal(0.0, 0.4, dimension(layout)))
        state = gg.from_flat(layout, theta)
        v = np.random.default_rng(3).uniform(0.05, 0.95, (3, 2)) if partial else np.ones((3, 2))
        spread = (jnp.asarray(v),)
        w = (jnp.asarray(np.random.default_rng(4).uniform(0.05, 0.95, (3, 2))),) if location else ()
        standard = gg.standardised(state, spread, problem.shifts, w)

        def target(x):
            at = gg.with_globals(layout, state, x, standard, spread, problem.shifts, w)
            jac = jnp.sum(jnp.asarray(v) * at.log_sds[0][None, :])
            eta = linear_predictor(layout, at.beta, at.us, rows)
            return gg.prior_u(problem, at) + jac + jnp.sum(problem.density(eta, at.phi, rows))

        x = gg.globals_vector(state)
        fit, _ = jax.jit(lambda p: gg.globals_fit(problem, state, rows, spread if partial else (), w)(p))(x)
        want = jax.jit(lambda v: (jax.grad(target)(v), gg.clipped_prec(jax.hessian(target)(v))))(x)
        np.testing.assert_allclose(fit.grad, want[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(fit.prec, want[1], rtol=1e-9, atol=1e-8)


def level_quadrature(model, data, theta: np.ndarray, level: int, half: float = 6.0, num: int = 201) -> tuple:
    """A level's effects' exact conditional given the globals (2-D grid, float64 numpy): means, s.d.s, 4th moments."""
    beta = theta[:2]
    layout = model.glmm.layout
    log_sd = theta[2 + 2 * layout.levels[0] : 4 + 2 * layout.levels[0]]
    rows = data["g_0"] == level
    x, y = data["x"][rows].astype(np.float64), data["y"][rows].astype(np.float64)
    sd = np.exp(log_sd)
    grids = [np.linspace(-half * s, half * s, num) for s in sd]
    a, b = np.meshgrid(*grids, indexing="ij")
    eta = (x @ beta)[None, None, :] + a[..., None] * x[:, 0] + b[..., None] * x[:, 1]
    logp = (
        np.sum(y * eta - np.logaddexp(0.0, eta), axis=-1)
        + stats.norm.logpdf(a, 0, sd[0])
        + stats.norm.logpdf(b, 0, sd[1])
    )
    w = np.exp(logp - logp.max())
    w /= w.sum()
    out = []
    for v in (a, b):
        mean = np.sum(w * v)
        var = np.sum(w * (v - mean) ** 2)
        out.append((mean, np.sqrt(var), np.sum(w * (v - mean) ** 4)))
    return out


def test_each_level_moves_to_its_exact_conditional():
    """With the globals held, 8,000 independent chains of 30 effects moves each (``rho = 0.3``, so the pCN part and the
    reverse proposal count) end at each level's exact conditional (bernoulli ``(x1 | g)``, levels of 3, 10 and 40 rows;
    2-D quadrature): every effect's mean and s.d. within 5 Monte Carlo standard errors (the s.d.'s from the
    quadrature's fourth moment, about 0.8% of the s.d.: a 5% s.d. error fails)."""
    model, data = glmm_model(slope_design([3, 10, 40], seed=4))
    problem = problem_for(model, data)
    layout = problem.layout
    rows = jax.tree_util.tree_map(jnp.asarray, data)
    theta = np.zeros(dimension(layout), np.float32)
    theta[:2] = [-0.2, 0.4]
    theta[-2:] = [np.log(0.8), np.log(0.5)]
    state = gg.from_flat(layout, jnp.asarray(theta))
    chains = 8000

    @jax.jit
    def run(key):
        def one(k):
            def step(s, kk):
                return gg.effects_step(problem, kk, s, 0, 0.3, rows)[0], None

            return jax.lax.scan(step, state, jax.random.split(k, 30))[0].us[0]

        return jax.vmap(one)(jax.random.split(key, chains))

    draws = np.asarray(run(jax.random.PRNGKey(5)), np.float64)  # (chains, levels, 2)
    for level in range(3):
        for c, (mean, sd, m4) in enumerate(level_quadrature(model, data, theta.astype(np.float64), level)):
            got = draws[:, level, c]
            assert abs(got.mean() - mean) < 5 * sd / np.sqrt(chains), (level, c, got.mean(), mean)
            se_sd = np.sqrt((m4 - sd**4) / chains) / (2 * sd)
            assert abs(got.std() - sd) < 5 * se_sd, (level, c, got.std(), sd)


def test_spread_weights_are_the_priors_share_of_each_effects_precision():
    """``spread_weights`` on a Gaussian random intercept, where a level's data information is exactly
    ``n_g / sigma^2``: each weight equals ``1 / (1 + n_g sd^2 / sigma^2)`` (float32 rounding), so a weight built from
    the total precision instead of the data's, or with ``sd`` in place of ``sd^2``, fails."""
    sizes = [1, 4, 30, 200]
    codes = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    y = np.random.default_rng(2).normal(size=codes.size)
    ones = np.ones((codes.size, 1))
    factor = GroupFactor("g", codes, ones, tuple(f"s{k}" for k in range(len(sizes))), ("1",))
    model, data = glmm_model(GLMMDesign(y=y, x=ones, fixed=("Intercept",), factors=(factor,)), "gaussian")
    problem = problem_for(model, data)
    layout = problem.layout
    theta = np.zeros(dimension(layout), np.float32)
    theta[-2:] = [np.log(0.6), np.log(1.5)]  # log sd, log sigma
    state = gg.from_flat(layout, jnp.asarray(theta))
    weights = jax.jit(lambda s, rows: gg.spread_weights(problem, s, rows))  # one program, not op by op
    got = np.asarray(weights(state, jax.tree_util.tree_map(jnp.asarray, data))[0])[:, 0]
    want = 1.0 / (1.0 + np.asarray(sizes) * 0.36 / 2.25)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.slow
def test_globals_change_leaves_the_shared_part_out_of_the_rows_sum():
    """Step 4's log-likelihood change on a float32 Student-t GLMM at ``N = 2e5`` (20 levels, random slopes) within 0.01
    nats r.m.s. of float64 (numpy and scipy at the same float32 states) over 6 posterior-scale moves of the globals
    (s.d. 3e-3): the ``phi``-only part's difference taken once, ``N`` times (``GLMMSpec.shared_density``); taken from each
    row's float32 density, its rounding counts ``N`` times (checked above 0.02 here: ``tests/models/test_glmm_families.py``
    derives both sizes)."""
    model, data = glmm_model(slope_design([10_000] * 20, family="student_t"), "student_t", centred=True)
    problem = problem_for(model, data)
    rows, layout = jax.tree_util.tree_map(jnp.asarray, data), problem.layout
    theta = np.zeros(dimension(layout), np.float32)
    theta[:2], theta[-4:] = [-0.3, 0.5], [np.log(0.7), np.log(0.4), 0.0, np.log(3.0)]
    state = gg.from_flat(layout, jnp.asarray(theta))
    standard = gg.standardised(state, gg.unit_spread(layout))
    at = jax.jit(lambda x: gg.with_globals(layout, state, x, standard))
    x64 = {k: np.asarray(v, np.float64) for k, v in data.items()}

    def reference(s) -> float:
        u = np.asarray(s.us[0], np.float64)[x64["g_0"].astype(int)]
        eta = x64["x"] @ np.asarray(s.beta, np.float64) + np.sum(x64["z_0"] * u, axis=1)
        phi = np.asarray(s.phi, np.float64)
        return float(np.sum(stats.t.logpdf(x64["y"], 1.0 + np.exp(phi[1]), eta, np.exp(phi[0]))))

    rng, x0 = np.random.default_rng(4), np.asarray(gg.globals_vector(state))
    moves = [np.float32(x0 + 3e-3 * rng.standard_normal(x0.size)) for _ in range(7)]
    errors = {}
    for name, p in (("declared", problem), ("row by row", problem._replace(shared_density=None, row_part=None))):
        fit = jax.jit(lambda x, base, p=p: gg.globals_fit(p, state, rows)(x, base)[1])
        errors[name] = [
            float(fit(b, a) - fit(b, b)) - (reference(at(b)) - reference(at(a))) for a, b in zip(moves, moves[1:])
        ]
    rms = {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in errors.items()}
    assert rms["declared"] < 0.01 < 0.02 < rms["row by row"], rms


def test_climbing_brings_a_far_heavy_level_to_its_mode_and_leaves_near_levels_exact():
    """A level of 20,000 logistic rows started 0.5 below its conditional mode (about 70 of its Laplace s.d.s; the
    other 30 levels, of 20 rows, at their simulated effects): the Newton MH move is accepted in none of 40 chains' 12
    tries from there (why the warm-up climbs), while 12 climbing steps bring every one of 40 chains within 3 Laplace s.d.s of the
    mode (float64 Newton on the level's own rows and prior, numpy); the levels not far from their mode get, on the
    same keys, exactly the draws of the Newton MH move. A climb that never fires, or one that moves every level,
    fails."""
    rng = np.random.default_rng(8)
    sizes = [20_000] + [20] * 30
    codes = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    x = np.c_[np.ones(codes.size), rng.normal(size=codes.size)]
    u_true = rng.normal(0.0, 0.5, len(sizes))
    y = (rng.random(codes.size) < 1 / (1 + np.exp(-(-0.5 + 0.5 * x[:, 1] + u_true[codes])))).astype(float)
    factor = GroupFactor("g", codes, np.ones((codes.size, 1)), tuple(f"s{k}" for k in range(len(sizes))), ("1",))
    model, data = glmm_model(GLMMDesign(y=y, x=x, fixed=("Intercept", "x1"), factors=(factor,)))
    problem = problem_for(model, data)
    rows = jax.tree_util.tree_map(jnp.asarray, data)
    beta, sd = np.array([-0.5, 0.5]), 0.5
    off = x[codes == 0] @ beta
    mode = 0.0
    for _ in range(50):  # Newton on the heavy level's conditional
        p = 1 / (1 + np.exp(-(off + mode)))
        prec = np.sum(p * (1 - p)) + 1 / sd**2
        mode += (np.sum(y[codes == 0] - p) - mode / sd**2) / prec
    start = u_true.copy()
    start[0] = mode - 0.5
    state = gg.GibbsState(
        jnp.asarray(beta, jnp.float32),
        (jnp.asarray(start[:, None], jnp.float32),),
        (jnp.asarray([np.log(sd)], jnp.float32),),
        jnp.zeros(0, jnp.float32),
    )

    @jax.jit
    def run(key, climb):
        def one(k):
            def step(s, kk):
                return gg.effects_step(problem, kk, s, 0, 0.0, rows, climb)[0], None

            return jax.lax.scan(step, state, jax.random.split(k, 12))[0]

        return jax.vmap(one)(jax.random.split(key, 40))

    climbed, plain = run(jax.random.PRNGKey(2), True), run(jax.random.PRNGKey(2), False)
    assert np.all(np.asarray(plain.us[0])[:, 0, 0] == np.float32(start[0]))
    assert np.all(np.abs(np.asarray(climbed.us[0])[:, 0, 0] - mode) < 3 / np.sqrt(prec))
    one_step = jax.jit(
        jax.vmap(lambda k, c: gg.effects_step(problem, k, state, 0, 0.0, rows, c)[0].us[0][:, 0], (0, None))
    )
    keys = jax.random.split(jax.random.PRNGKey(5), 40)
    np.testing.assert_array_equal(np.asarray(one_step(keys, True))[:, 1:], np.asarray(one_step(keys, False))[:, 1:])
