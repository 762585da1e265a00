"""Langevin (SGLD) proposals: the reverse-proposal density, the kernel's gradient minibatch, every acceptance test.

The sampler checks use the conjugate Gaussian mean model, where three stationary laws are known
exactly: the posterior (any MH-corrected chain), and for uncorrected SGLD the Gaussian AR(1) law
of ``theta' - mu = (1 - alpha A / 2)(theta - mu) + sqrt(alpha) z + (alpha / 2) eta`` with ``A`` the
posterior precision and ``eta`` the minibatch-gradient noise, whose variance does not depend on
``theta`` in this model: ``Var = (alpha + alpha^2 Var(eta) / 4) / (1 - (1 - alpha A / 2)^2)``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches
from reference_cases import flat_draws
from scipy import stats

from minibatch_mcmc.acceptance import (
    BarkerTest,
    MetropolisTest,
    austere_mh,
    mh_minibatch,
    mh_sublhd,
    mint,
    no_test,
)
from minibatch_mcmc.data.indexing import chunk_indices
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean
from minibatch_mcmc.proposals import Proposal, langevin, langevin_log_q_ratio, random_walk
from minibatch_mcmc.proposals.langevin import tempered_langevin
from minibatch_mcmc.samplers import build_kernel, sample
from minibatch_mcmc.samplers.kernel import gradient_data_used, minibatch_grad_log_target

N, D, K = 4096, 2, 40.0  # N a power of two: the minibatch permutation needs no cycle walking
SETTINGS = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)
GRAD_BATCH = 40
CHAINS, DRAWS, BURN = 4, 1500, 200


@pytest.fixture(scope="module")
def problem():
    """One data set for every sampler test: ``N`` points in ``D`` dimensions at temperature ``K``."""
    rng = np.random.default_rng(7)
    x = rng.normal([0.8, -0.4], 1.0, size=(N, D)).astype(np.float32)
    mean, var = exact_posterior(x, K, SETTINGS)
    precision = 1.0 / var
    alpha = 1.0 / precision  # alpha * A = 1: a large step, where SGLD's bias is plain to see
    return x, mean, var, alpha


def _run(x, start, proposal, test, temperature=K, key=11):
    return sample(
        gaussian_mean(SETTINGS),
        x,
        start,
        proposal=proposal,
        test=test,
        num_samples=DRAWS,
        num_chains=CHAINS,
        temperature=temperature,
        key=key,
        progress=False,
        block_size=DRAWS,
    )


# ------------------------------------------------------------------------------------------------
# the proposal density
# ------------------------------------------------------------------------------------------------


def _scipy_log_q_ratio(theta, new, grad, grad_new, alpha, p):
    fwd = stats.norm.logpdf(new, loc=theta + 0.5 * alpha * p * grad, scale=np.sqrt(alpha * p)).sum()
    rev = stats.norm.logpdf(theta, loc=new + 0.5 * alpha * p * grad_new, scale=np.sqrt(alpha * p)).sum()
    return rev - fwd


@pytest.mark.parametrize("precond", [None, np.array([0.5, 2.0, 1.5])])
def test_log_q_ratio_matches_scipy_densities(precond):
    """The proposal's ``log q(theta|theta') - log q(theta'|theta)`` against two scipy Gaussian densities."""
    alpha = 0.3
    a = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, -0.2], [0.0, -0.2, 0.5]])
    b = np.array([0.5, -1.0, 2.0])
    grad_fn = lambda th: b - jnp.asarray(a, jnp.float32) @ th  # gradient of a Gaussian log density
    prop = langevin(alpha, preconditioner=precond)
    p = np.ones(3) if precond is None else precond
    theta = jnp.array([0.3, -0.7, 1.1], jnp.float32)
    for k in range(3):
        new, lq = prop.sample(jax.random.key(k), theta, grad_fn)
        th, nw = np.asarray(theta, np.float64), np.asarray(new, np.float64)
        ref = _scipy_log_q_ratio(th, nw, b - a @ th, b - a @ nw, alpha, p)
        np.testing.assert_allclose(float(lq), ref, rtol=1e-4, atol=1e-4)
        direct = langevin_log_q_ratio(
            jnp.asarray(th), jnp.asarray(nw), jnp.asarray(b - a @ th), jnp.asarray(b - a @ nw), alpha, p
        )
        np.testing.assert_allclose(float(direct), ref, rtol=1e-5, atol=1e-5)


def test_langevin_draws_have_the_drift_and_covariance():
    """``theta' ~ N(theta + alpha/2 P g(theta), alpha P)``: empirical mean and variance within 4 s.e."""
    alpha, p, g = 0.04, np.array([1.0, 3.0]), np.array([2.0, -5.0])
    prop = langevin(alpha, preconditioner=p)
    theta = jnp.array([1.0, -1.0])
    keys = jax.random.split(jax.random.key(3), 20000)
    draw = jax.jit(jax.vmap(lambda k: prop.sample(k, theta, lambda th: jnp.asarray(g, th.dtype))))  # one program
    new, _ = draw(keys)
    new = np.asarray(new, np.float64)
    mean, var = np.asarray(theta) + 0.5 * alpha * p * g, alpha * p
    se_mean, se_var = np.sqrt(var / new.shape[0]), var * np.sqrt(2.0 / new.shape[0])
    assert np.all(np.abs(new.mean(0) - mean) < 4 * se_mean)
    assert np.all(np.abs(new.var(0) - var) < 4 * se_var)


def test_langevin_on_a_pytree_parameter():
    prop = langevin(0.1)
    theta = {"a": jnp.zeros(2), "b": jnp.ones((2, 2))}
    grad_fn = lambda th: jax.tree_util.tree_map(lambda v: -v, th)
    new, lq = prop.sample(jax.random.key(0), theta, grad_fn)
    assert new["a"].shape == (2,) and new["b"].shape == (2, 2) and np.isfinite(float(lq))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": -1e-3}, "step_size"),
        ({"step_size": float("nan")}, "step_size"),
        ({"step_size": float("inf")}, "step_size"),
        ({"step_size": True}, "step_size"),
        ({"step_size": 1e-3, "batch_size": -1}, "batch_size"),
        ({"step_size": 1e-3, "batch_size": 2.5}, "batch_size"),
        ({"step_size": 1e-3, "batch_size": True}, "batch_size"),
        ({"step_size": 1e-3, "preconditioner": np.array([1.0, -1.0])}, "preconditioner"),
        ({"step_size": 1e-3, "preconditioner": np.ones((2, 2))}, "preconditioner"),
        ({"step_size": 1e-3, "preconditioner": np.array([1.0, np.inf])}, "preconditioner"),
    ],
)
def test_bad_settings_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        langevin(**kwargs)


def test_tempered_langevin_drift_is_the_tempered_gradient():
    model = gaussian_mean(SETTINGS)
    theta = jnp.array([0.3, -0.2])
    lik_grad = jnp.array([5.0, -2.0])  # stands for grad (N / b) sum log p on the gradient minibatch

    def grad_log_target(th):  # what the kernel supplies: prior gradient + likelihood gradient
        return jax.grad(model.log_prior)(th) + lik_grad

    key, alpha, t = jax.random.key(3), 0.01, 4.0
    new, log_q = tempered_langevin(model.log_prior, jnp.float32(alpha), 100, temperature_factor=t).sample(
        key, theta, grad_log_target
    )
    drift = jax.grad(model.log_prior)(theta) + lik_grad / t
    expected = theta + 0.5 * alpha * drift + np.sqrt(alpha) * jax.random.normal(key, (2,))
    np.testing.assert_allclose(new, expected, rtol=1e-6)
    drift_new = jax.grad(model.log_prior)(new) + lik_grad / t
    fwd = new - theta - 0.5 * alpha * drift
    rev = theta - new - 0.5 * alpha * drift_new
    assert float(log_q) == pytest.approx(float((fwd @ fwd - rev @ rev) / (2 * alpha)), rel=1e-5)


def test_tempered_langevin_at_t_one_is_langevin_with_a_traced_step():
    """``tempered_langevin`` shares ``langevin``'s move: at ``T = 1`` the same key gives the same draw."""
    model = gaussian_mean(SETTINGS)
    theta = jnp.array([0.3, -0.2])

    def grad_log_target(th):
        return jax.grad(model.log_prior)(th) + jnp.array([5.0, -2.0])

    key = jax.random.key(5)
    step = jnp.asarray(0.01, theta.dtype)  # one value in both, float32 or (under JAX_ENABLE_X64) float64
    plain = jax.jit(lambda: langevin(float(step)).sample(key, theta, grad_log_target))()
    traced = jax.jit(lambda a: tempered_langevin(model.log_prior, a, 0).sample(key, theta, grad_log_target))(step)
    np.testing.assert_array_equal(plain[0], traced[0])
    np.testing.assert_allclose(plain[1], traced[1], rtol=1e-6)  # a constant vs a traced step: constant folding
    with pytest.raises(ValueError, match="temperature_factor"):
        tempered_langevin(model.log_prior, 0.01, 0, temperature_factor=0.0)


def test_preconditioner_length_mismatch_is_reported():
    prop = langevin(0.1, preconditioner=np.ones(3))
    with pytest.raises(ValueError, match="3 entries but the parameter has 2"):
        prop.sample(jax.random.key(0), jnp.zeros(2), lambda th: th)


def test_kernel_rejects_bad_gradient_batch_size():
    bad = Proposal(sample=lambda k, th, g: (th, 0.0), symmetric=False, name="bad", gradient_batch_size=-3)
    with pytest.raises(ValueError, match="gradient_batch_size=-3"):
        build_kernel(gaussian_mean(SETTINGS), bad, MetropolisTest(), 100)


# ------------------------------------------------------------------------------------------------
# the kernel's gradient minibatch
# ------------------------------------------------------------------------------------------------


def test_gradient_data_used():
    assert gradient_data_used(random_walk(scale=0.1), 1000) == 0
    assert gradient_data_used(langevin(1e-3), 1000) == 1000
    assert gradient_data_used(langevin(1e-3, batch_size=50), 1000) == 50
    assert gradient_data_used(langevin(1e-3, batch_size=5000), 1000) == 1000


def _gaussian_mean_grad(theta, rows, n, b, temperature):
    """Analytic ``grad log p0 + (N / (b K)) sum_rows grad log p(x|theta)`` for the conjugate model."""
    mu0, tau, s = SETTINGS
    return -(theta - mu0) / tau**2 + (n / b) * (rows - theta).sum(0) / (temperature * s**2)


def test_minibatch_gradient_full_and_on_one_minibatch(problem):
    """``batch_size=0``: the full-data gradient; else ``N / b`` times the sum over ``b`` distinct points of the key's permutation."""
    x = problem[0]
    model, theta = gaussian_mean(SETTINGS), jnp.array([0.3, 0.1], jnp.float32)

    @jax.jit
    def both(key, th):  # one program for the two gradients and the minibatch's rows (not op by op)
        full = minibatch_grad_log_target(model, jax.random.key(0), x, N, 0, jnp.float32(K))(th)
        one = minibatch_grad_log_target(model, key, x, N, GRAD_BATCH, jnp.float32(K))(th)
        return full, one, chunk_indices(key, jnp.zeros((), jnp.int32), GRAD_BATCH, N)[0]

    key = jax.random.key(5)
    full, one, idx = both(key, theta)
    ref = _gaussian_mean_grad(np.asarray(theta, np.float64), x.astype(np.float64), N, N, K)
    np.testing.assert_allclose(np.asarray(full), ref, rtol=1e-4)
    assert np.unique(np.asarray(idx)).size == GRAD_BATCH
    ref_one = _gaussian_mean_grad(
        np.asarray(theta, np.float64), x[np.asarray(idx)].astype(np.float64), N, GRAD_BATCH, K
    )
    np.testing.assert_allclose(np.asarray(one), ref_one, rtol=1e-4, atol=1e-3)


def test_kernel_uses_one_gradient_minibatch_forward_and_reverse(problem):
    """Recompute one kernel step by hand: candidate and ``psi`` use the same minibatch both ways."""
    x, _, _, alpha = problem
    model = gaussian_mean(SETTINGS)
    kern = build_kernel(model, langevin(alpha, batch_size=GRAD_BATCH), no_test(), N)  # no_test records psi
    theta = jnp.array([0.7, -0.3], jnp.float32)
    state, step = kern.init(theta), jax.jit(kern.step)
    for s in range(3):
        key = jax.random.key(100 + s)
        new_state, out = step(key, state, x, jnp.float32(K))
        k_prop, _ = jax.random.split(key)
        idx, _ = chunk_indices(jax.random.fold_in(k_prop, 1), jnp.zeros((), jnp.int32), GRAD_BATCH, N)
        rows = x[np.asarray(idx)].astype(np.float64)
        th = np.asarray(theta, np.float64)
        z = np.asarray(jax.random.normal(k_prop, (D,), jnp.float32), np.float64)
        g = _gaussian_mean_grad(th, rows, N, GRAD_BATCH, K)
        new = th + 0.5 * alpha * g + np.sqrt(alpha) * z
        g_new = _gaussian_mean_grad(new, rows, N, GRAD_BATCH, K)
        prior = stats.norm(SETTINGS.prior_mean, SETTINGS.prior_scale)
        psi = prior.logpdf(new).sum() - prior.logpdf(th).sum() + _scipy_log_q_ratio(th, new, g, g_new, alpha, 1.0)
        np.testing.assert_allclose(np.asarray(new_state.position), new, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(float(out.delta_star), psi, rtol=1e-3, atol=2e-3)
        assert bool(out.accepted) and int(out.batch_size) == 0
        # a different minibatch for the reverse move would change psi by far more than the tolerance
        other = x[np.asarray(chunk_indices(jax.random.key(999), jnp.zeros((), jnp.int32), GRAD_BATCH, N)[0])]
        wrong = _scipy_log_q_ratio(
            th, new, g, _gaussian_mean_grad(new, other.astype(np.float64), N, GRAD_BATCH, K), alpha, 1.0
        )
        assert abs(wrong - _scipy_log_q_ratio(th, new, g, g_new, alpha, 1.0)) > 0.05
        state = new_state
        theta = new_state.position


# ------------------------------------------------------------------------------------------------
# samplers on the conjugate model
# ------------------------------------------------------------------------------------------------


def _sgld_variance(alpha, precision, grad_noise_var):
    """Stationary variance of uncorrected (stochastic-gradient) Langevin on a Gaussian target."""
    rho = 1.0 - 0.5 * alpha * precision
    return (alpha + 0.25 * alpha**2 * grad_noise_var) / (1.0 - rho**2)


def _check(draws, mean, var, min_ess=300, z=4.0):
    chk = check_moments(draws, mean, var)
    assert np.all(chk.ess > min_ess), chk.ess
    assert np.all(np.abs(chk.z_mean()) < z), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < z), (chk.var, chk.exact_var, chk.se_var)
    return chk


@pytest.mark.parametrize("batch", [0, GRAD_BATCH], ids=["full-gradient", "minibatch-gradient"])
def test_sgld_bias_and_its_removal_by_metropolis(problem, batch):
    """Plain SGLD hits its own (wrong) AR(1) law exactly; Langevin + Metropolis hits the posterior."""
    x, mean, var, alpha = problem
    precision = 1.0 / var
    grad_noise = 0.0
    if batch:
        scale = N / (K * SETTINGS.noise_scale**2)
        grad_noise = scale**2 * x.astype(np.float64).var(0, ddof=1) / batch * (1.0 - batch / N)
    sgld_var = _sgld_variance(alpha, precision, grad_noise)
    assert np.all(sgld_var > 1.3 * var)  # the bias is large compared with the tolerance below
    start = jnp.asarray(mean, jnp.float32)
    plain = _run(x, start, langevin(alpha, batch_size=batch), no_test())
    assert plain.summary()["acceptance_rate"] == 1.0 and plain.summary()["mean_batch_size"] == 0
    _check(np.asarray(plain.positions)[:, BURN:], mean, sgld_var)
    corrected = _run(x, start, langevin(alpha, batch_size=batch), MetropolisTest())
    _check(np.asarray(corrected.positions)[:, BURN:], mean, var)
    assert 0.2 < corrected.summary()["acceptance_rate"] < 0.99


MH_TESTS = {
    "barker": BarkerTest,
    "mhminibatch": lambda: mh_minibatch(batch_size=100),
    "austere_mh": lambda: austere_mh(batch_size=100, epsilon=0.01),
    "mhsublhd": lambda: mh_sublhd(batch_size=100, gamma=1.5, p=2.0, delta=0.01),
}


@pytest.mark.parametrize("name", list(MH_TESTS))
def test_minibatch_langevin_with_each_corrected_test(problem, name):
    """Minibatch-gradient Langevin + each MH-type test: the exact posterior, with less data where the test allows."""
    x, mean, var, alpha = problem
    res = _run(x, jnp.asarray(mean, jnp.float32), langevin(alpha, batch_size=GRAD_BATCH), MH_TESTS[name]())
    assert np.all(np.isfinite(np.asarray(res.positions)))
    _check(np.asarray(res.positions)[:, BURN:], mean, var)
    s = res.summary()
    assert 0.1 < s["acceptance_rate"] < 0.99
    if name != "barker":
        assert s["mean_batch_size"] < N


def test_langevin_with_mint_targets_the_mint_temperature(problem):
    """MINT + Langevin: finite, ``m`` points per test, and near the tempered posterior at ``K T`` (MINT is approximate).

    The proposal's gradient is of the temperature-``K`` posterior while MINT tempers the likelihood
    further by ``T``: the proposal stays exact (its ``log_q_ratio`` enters ``psi``), only its drift
    aims at the colder posterior. Here the minibatch noise of MINT's scaled difference has variance
    about ``N / (T m K) ~ 0.02``, too small to show at this Monte Carlo error.
    """
    x = problem[0]
    test = mint(batch_size=2048, alpha=0.95)
    t = test.temperature_factor(N)
    mean, var = exact_posterior(x, K * t, SETTINGS)
    # a step sized for the warmer target; the drift (from the colder posterior) then overshoots the mode mildly
    res = _run(x, jnp.asarray(mean, jnp.float32), langevin(0.5 * var, batch_size=GRAD_BATCH), test)
    assert np.all(np.isfinite(np.asarray(res.positions)))
    assert res.summary()["mean_batch_size"] == 2048
    assert 0.1 < res.summary()["acceptance_rate"] < 0.99
    _check(np.asarray(res.positions)[:, BURN:], mean, var)


def test_full_data_gradient_streams_an_out_of_core_source(tmp_path):
    # MALA (full-data gradient) on a memory-mapped file draws exactly what it draws in memory
    from minibatch_mcmc.data import open_npy

    x = np.random.default_rng(0).normal(1.0, 1.0, (3000, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kw = dict(proposal=langevin(1e-4, 0), test=MetropolisTest(), num_samples=50, key=3, progress=False)
    a = sample(gaussian_mean(), x, jnp.zeros(2), **kw)
    b = sample(gaussian_mean(), open_npy(tmp_path / "x.npy"), jnp.zeros(2), **kw)
    assert not (bad := mismatches(flat_draws(b), flat_draws(a), 50, 3000)), (
        bad
    )  # chunked gradient sums: floats to rounding
    assert 0 < a.summary()["acceptance_rate"]
