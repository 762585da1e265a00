"""optim.block_newton: the arrow Hessian, mode and Laplace fit of a one-factor GLMM against the dense float64 ones
(G = 50), and at d > 4096 the Laplace algebra against a Gaussian model's exact conditional posterior from scipy.sparse."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models.glmm import dimension, glmm_model, initial_theta
from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor
from minibatch_mcmc.optim.block_newton import (
    ArrowBlocks,
    ArrowIndex,
    apply_factor,
    arrow_index,
    block_mode,
    derivative_pass,
    factorise,
    marginal_variances,
    solve,
)
from minibatch_mcmc.optim.mode import POLISH_DECREMENT, laplace_covariance


def design(family: str, levels: int, rows: int, slope: bool, seed: int = 0, sd: float = 0.6) -> GLMMDesign:
    """An intercept, one covariate and a random intercept (and slope) over ``levels`` levels of unequal size."""
    rng = np.random.default_rng(seed)
    codes = np.concatenate([np.arange(levels), rng.integers(0, levels, rows - levels)])
    x = np.c_[np.ones(rows), rng.normal(size=rows)]
    z = np.c_[np.ones(rows), x[:, 1]] if slope else np.ones((rows, 1))
    u = rng.normal(0.0, sd, (levels, z.shape[1]))
    eta = x @ np.array([-0.3, 0.5]) + np.sum(z * u[codes], axis=1)
    y = {
        "poisson": lambda: rng.poisson(np.exp(eta)),
        "bernoulli": lambda: rng.random(rows) < 1 / (1 + np.exp(-eta)),
        "gaussian": lambda: eta + rng.normal(0.0, 0.8, rows),
    }[family]().astype(np.float64)
    terms = ("1", "x1") if slope else ("1",)
    return GLMMDesign(
        y=y,
        x=x,
        fixed=("Intercept", "x1"),
        factors=(GroupFactor("g", codes, z, tuple(str(i) for i in range(levels)), terms),),
    )


def dense_hessian(model, data, theta) -> np.ndarray:
    """The full ``d x d`` Hessian of the log posterior by ``jax.hessian`` (float64)."""
    rows = {k: jnp.asarray(v) for k, v in data.items()}
    return np.asarray(jax.hessian(lambda t: model.log_prior(t) + jnp.sum(model.log_lik(t, rows)))(theta))


def dense_of(index: ArrowIndex, blocks: ArrowBlocks) -> np.ndarray:
    """``A`` as a dense matrix from its blocks."""
    d = index.levels.size + index.globals_.size
    a = np.zeros((d, d))
    for g, lv in enumerate(index.levels):
        a[np.ix_(lv, lv)] = blocks.a_levels[g]
        a[np.ix_(lv, index.globals_)] = blocks.cross[g]
        a[np.ix_(index.globals_, lv)] = blocks.cross[g].T
    a[np.ix_(index.globals_, index.globals_)] = blocks.a_globals
    return a


@pytest.mark.slow
@pytest.mark.parametrize("family,centred", [("poisson", False), ("bernoulli", "auto")])
def test_blocks_mode_and_covariance_match_dense(family, centred):
    """G = 50 levels with a random intercept and slope (d = 106), float64: the arrow blocks equal the dense Hessian at a
    random point to 1e-9 relative and every entry outside the arrow is 0 there (a tangent that mixed two levels, or a
    block read transposed, would be off by O(1)); the block Newton mode is where the dense gradient vanishes (its dense
    Newton step below the stopping rule's POLISH_DECREMENT = 1e-3 Laplace s.d.s) and its Laplace covariance (``L L'``, ``marginal_variances``) equals the inverse
    of the dense negative Hessian there to 1e-8 relative (a wrong Schur complement or a missing ``M_g`` term would
    change the covariance of every level by the global part, ~1e-2 of it)."""
    with jax.enable_x64(True):
        model, data = glmm_model(design(family, 50, 1000, True), family, centred=centred)
        index = arrow_index(model)
        d = dimension(model.glmm.layout)
        theta = jnp.asarray(np.random.default_rng(3).normal(0.0, 0.3, d))
        _, grad, blocks = derivative_pass(model, index, 1.0, 1000)(theta, as_data_source(data))
        h = dense_hessian(model, data, theta)
        a = dense_of(index, blocks)
        assert np.max(np.abs(a + h)) <= 1e-9 * np.max(np.abs(h))
        found = block_mode(model, data, initial_theta(model).astype(jnp.float64))
        assert found.converged and found.steps < 50
        h = dense_hessian(model, data, jnp.asarray(found.theta_hat))
        cov = laplace_covariance(h)
        rows = {k: jnp.asarray(v) for k, v in data.items()}
        g = np.asarray(
            jax.grad(lambda t: model.log_prior(t) + jnp.sum(model.log_lik(t, rows)))(jnp.asarray(found.theta_hat))
        )
        step = cov @ g
        assert np.max(np.abs(step) / np.sqrt(np.diag(cov))) < POLISH_DECREMENT
        np.testing.assert_allclose(np.abs(found.gradient), np.abs(g), atol=1e-8 * (1 + np.max(np.abs(g))) + 1e-6)
        ell = apply_factor(found.factor, np.eye(d))  # row i is L e_i, so ell' ell... : L = ell.T
        np.testing.assert_allclose(ell.T @ ell, cov, rtol=1e-8, atol=1e-10 * np.max(np.abs(cov)))
        np.testing.assert_allclose(marginal_variances(found.factor), np.diag(cov), rtol=1e-8)
        r = np.random.default_rng(4).normal(size=d)
        np.testing.assert_allclose(solve(found.factor, r), cov @ r, rtol=1e-7, atol=1e-9 * np.max(np.abs(cov @ r)))


def test_refuses_two_factors():
    """A GLMM with two grouping factors (crossed levels couple: no arrow) gets one error naming the factors."""
    d = design("poisson", 10, 200, False)
    f = d.factors[0]
    d = d._replace(factors=(f, f._replace(name="h")))
    model, _ = glmm_model(d, "poisson", centred=True)
    with pytest.raises(ValueError, match="one grouping factor; this GLMM has 2 \\(g, h\\)"):
        arrow_index(model)


def exact_conditional(
    x: np.ndarray,
    codes: np.ndarray,
    y: np.ndarray,
    sigma: float,
    sd: float,
    beta_scale: np.ndarray,
    beta_loc: np.ndarray,
    levels: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and marginal variances of ``(beta, u)`` given ``sigma`` and ``sd`` in the Gaussian model, by scipy.sparse:
    precision ``W' W / sigma^2 + diag(prior)``, ``W = [X, one-hot(codes)]``, its LU solved for the mean and for every
    column of the identity (in blocks) for the diagonal of the inverse."""
    n, p = x.shape
    w = sp.hstack([sp.csc_matrix(x), sp.csc_matrix((np.ones(n), (np.arange(n), codes)), shape=(n, levels))]).tocsc()
    prior = np.r_[1.0 / beta_scale**2, np.full(levels, 1.0 / sd**2)]
    precision = (w.T @ w / sigma**2 + sp.diags(prior)).tocsc()
    lu = splu(precision)
    mean = lu.solve(w.T @ y / sigma**2 + np.r_[beta_loc / beta_scale**2, np.zeros(levels)])
    d = p + levels
    diag = np.empty(d)
    for start in range(0, d, 1000):
        cols = np.arange(start, min(d, start + 1000))
        e = np.zeros((d, cols.size))
        e[cols, np.arange(cols.size)] = 1.0
        diag[cols] = lu.solve(e)[cols, np.arange(cols.size)]
    return mean, diag


@pytest.mark.slow
def test_gaussian_conditional_posterior_at_d_over_4096():
    """G = 5,000 levels of 20 rows on average (d = 5,005, above ``MAX_DENSE_DIM``), Gaussian family, centred: at the block Newton mode the fixed
    and group effects are the exact Gaussian posterior mean given the mode's ``sd`` and ``sigma`` (scipy.sparse, to 1e-4
    posterior s.d.s), and the arrow algebra restricted to ``(beta, u)`` (the conditional given the hyper-parameters)
    gives that posterior's marginal variances to 1e-8 relative; 4,000 draws ``L z`` of it have s.d.s whose mean ratio
    to the exact ones is 1 within 0.3% (its Monte Carlo s.e. is 1 / sqrt(2 * 4000 * 5002) = 0.016%; a 5% s.d. error is
    ~300 s.e.s) and no coordinate's s.d. more than 5.5 s.e.s off (each s.e. 1.1%; a 5% error in one block of levels is
    4.5 s.e.s per level and caught by the mean over the block), means within 5.5 s.e.s."""
    with jax.enable_x64(True):
        levels = 5000
        des = design("gaussian", levels, 100000, False, seed=5)
        model, data = glmm_model(des, "gaussian", centred=True, sample_as_written=True)
        index = arrow_index(model)
        assert index.levels.size + index.globals_.size > 4096
        found = block_mode(model, data, initial_theta(model).astype(jnp.float64))
        assert found.converged
        theta = found.theta_hat
        sd, sigma = float(np.exp(theta[2 + levels])), float(np.exp(theta[3 + levels]))
        x = np.asarray(data["x"], np.float64)
        # the fixed effects' prior precision, from the model's own log prior (its only term in beta is the normal prior)
        hp = np.asarray(jax.hessian(model.log_prior)(jnp.asarray(theta)))
        prior_prec = -np.diag(hp)[:2]
        gp = np.asarray(jax.grad(model.log_prior)(jnp.asarray(theta)))[:2]
        beta_loc = theta[:2] + gp / prior_prec
        mean, diag = exact_conditional(
            x,
            np.asarray(data["g_0"]),
            np.asarray(data["y"], np.float64),
            sigma,
            sd,
            1.0 / np.sqrt(prior_prec),
            beta_loc,
            levels,
        )
        cond_index = ArrowIndex(index.levels, index.globals_[:2])
        b = found.blocks
        cond, concave = factorise(cond_index, ArrowBlocks(b.a_levels, b.cross[:, :, :2], b.a_globals[:2, :2]))
        assert concave
        keep = np.r_[np.arange(2), 2 + np.arange(levels)]
        np.testing.assert_allclose(theta[keep], mean, atol=1e-4 * np.sqrt(diag).min())
        sub = np.r_[index.globals_[:2], index.levels[:, 0]]
        var = marginal_variances(cond)[sub]
        np.testing.assert_allclose(var, diag, rtol=1e-8)
        draws = apply_factor(
            cond, np.random.default_rng(6).standard_normal((4000, index.levels.size + index.globals_.size))
        )[:, sub]
        ratio = draws.std(axis=0) / np.sqrt(diag)
        assert abs(ratio.mean() - 1.0) < 0.003
        assert np.max(np.abs(ratio - 1.0) * np.sqrt(2 * 4000)) < 5.5
        assert np.max(np.abs(draws.mean(axis=0)) / np.sqrt(diag / 4000)) < 5.5


@pytest.mark.slow
def test_arrow_mass_maps_match_the_factor():
    """``control_variates.arrow_hmc``'s jax maps at G = 50 (k = 2, float64): ``L z`` equals ``optim.block_newton``'s
    numpy ``apply_factor`` to 1e-12 and ``L' y`` is its transpose (``<L z, y> = <z, L' y>``); a transposed level block
    or a sign slip in ``M_g`` would break either by O(1)."""
    from minibatch_mcmc.control_variates.arrow_hmc import arrow_mass, lower_apply, lower_transpose_apply

    with jax.enable_x64(True):
        model, data = glmm_model(design("poisson", 50, 1000, True), "poisson", centred=True, sample_as_written=True)
        index = arrow_index(model)
        d = dimension(model.glmm.layout)
        theta = jnp.asarray(np.random.default_rng(7).normal(0.0, 0.3, d))
        _, _, blocks = derivative_pass(model, index, 1.0, 1000)(theta, as_data_source(data))
        factor, _ = factorise(index, blocks)
        mass = arrow_mass(factor)
        rng = np.random.default_rng(8)
        z, y = rng.normal(size=d), rng.normal(size=d)
        lz = np.asarray(lower_apply(mass, jnp.asarray(z)))
        np.testing.assert_allclose(lz, apply_factor(factor, z[None])[0], rtol=1e-12, atol=1e-12 * np.max(np.abs(lz)))
        np.testing.assert_allclose(lz @ y, z @ np.asarray(lower_transpose_apply(mass, jnp.asarray(y))), rtol=1e-10)


def test_warmup_refusal_names_the_arrow_route():
    """Above ``MAX_DENSE_DIM`` parameters the warm-up still refuses a dense Hessian, and for a one-factor GLMM its error
    names ``block_newton`` and ``arrow_hmc`` (the message before this change named only a first-order proxy)."""
    from minibatch_mcmc.warmup import warmup

    model, data = glmm_model(design("poisson", 4200, 8400, False), "poisson", centred=True, sample_as_written=True)
    with pytest.raises(ValueError, match="optim.block_newton.block_mode .*control_variates.arrow_hmc"):
        warmup(model, data, initial_theta(model), proposal="proxy_hmc", key=0)
