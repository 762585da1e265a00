"""Sequential tests for IRLS (Korattikara et al., Section 2.1, Algorithm 1).

An IRLS iteration replaces ``theta_t`` by the least-squares solution ``u_N = (A_N^T A_N)^{-1} A_N^T b_N`` of a
working regression whose rows ``(a_i, b_i)`` depend on ``theta_t`` and datum ``i``.  The sequential version grows
a minibatch drawn without replacement until the "90-degree test" is confident: with ``mu = ||u_n - theta_t||``,
``u_hat = (u_n - theta_t) / mu`` and the finite-population-corrected covariance of ``u_n``
``Sigma = A_n^{-1} e_n / n * (1 - (n - 1) / (N - 1))`` (``A_n = sum a_i a_i^T``, ``e_n`` the residual sum of
squares), the probability that the minibatch update points more than 90 degrees away from the full-data one is
``delta = Phi(-mu / sigma)`` with ``sigma^2 = u_hat^T Sigma u_hat``; the update is accepted once ``delta < epsilon``,
i.e. ``mu > -sigma * Phi^{-1}(epsilon)``.  With ``epsilon = 0`` every iteration uses all ``N`` points (batch IRLS).

The minibatch grows ``increment`` points at a time after a first block of ``initial_size`` points.  The working
statistics are updated either point by point with the recursive least-squares (Sherman-Morrison) formulas (8a-c),
or, equivalently and faster on a CPU, block by block: ``A_n, B_n`` accumulate with one matrix product per block,
``u_n`` is a Cholesky solve, and ``e_n`` grows by the new block's residuals plus ``(u_n - u_old)^T A_old (u_n - u_old)``
(the exact block form of (8c)).
"""

from __future__ import annotations

import functools
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import norm

from minibatch_mcmc.checks import check_bool, check_choice, check_int, check_positive, check_real
from minibatch_mcmc.data.indexing import permuted_index

WorkingFn = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
LossFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]

UPDATES = ("block", "sherman-morrison")
NUM_PROBES = 8
"""Rademacher probes of the Hutchinson estimate of ``tr(A_n^{-1})`` (block updates with ``debias=True``)."""


class IRLSProblem(NamedTuple):
    """An IRLS-type problem: ``working(theta, x, y) -> (a (n, D), b (n,))`` and the per-datum ``loss`` it minimises."""

    working: WorkingFn
    loss: LossFn
    name: str


@functools.lru_cache(maxsize=None)
def lad_problem(floor: float = 1e-4) -> IRLSProblem:
    """Least absolute deviation regression: ``w_i = |y_i - theta^T x_i|^{-1/2}``, ``a_i = w_i x_i``, ``b_i = w_i y_i``.

    Residuals are floored at ``floor`` so the weights stay finite at points the fit passes through.
    """
    check_positive(floor, "floor")

    def working(theta: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        r = y - x @ theta
        w = jax.lax.rsqrt(jnp.maximum(jnp.abs(r), floor))
        return w[:, None] * x, w * y

    def loss(theta: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.abs(y - x @ theta)

    return IRLSProblem(working=working, loss=loss, name="lad")


@functools.lru_cache(maxsize=None)
def logistic_problem(floor: float = 1e-6) -> IRLSProblem:
    """Logistic regression (labels in {0, 1}): ``r_i = sigmoid(theta^T x_i)``, ``w_i = sqrt(r_i (1 - r_i))``,
    ``a_i = w_i x_i``, ``b_i = w_i x_i^T theta + (y_i - r_i) / w_i``; the loss is the negative log-likelihood.

    ``w_i^2`` is floored at ``floor`` for saturated predictions.
    """
    check_positive(floor, "floor")

    def working(theta: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        z = x @ theta
        r = jax.nn.sigmoid(z)
        w = jnp.sqrt(jnp.maximum(r * (1.0 - r), floor))
        return w[:, None] * x, w * z + (y.astype(z.dtype) - r) / w

    def loss(theta: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        z = x @ theta
        yf = y.astype(z.dtype)
        return -(yf * jax.nn.log_sigmoid(z) + (1.0 - yf) * jax.nn.log_sigmoid(-z))

    return IRLSProblem(working=working, loss=loss, name="logistic")


class SequentialIRLSConfig(NamedTuple):
    """Algorithm 1's settings: threshold ``epsilon``, first test after ``initial_size`` (N0) points, then every
    ``increment`` (N_inc) points; ``None`` sizes mean ``N // 1000`` (the paper's choice), at least ``D + 1``.

    ``debias=True`` (not in the paper) replaces the plug-in ``mu = ||u_n - theta_t||``, whose square overestimates
    ``||u_N - theta_t||^2`` by ``tr(Sigma)`` on average, with ``sqrt(max(||u_n - theta_t||^2 - tr(Sigma), 0))``
    (``tr(A_n^{-1})`` in ``tr(Sigma)`` is exact with Sherman-Morrison updates, a Hutchinson estimate with
    ``NUM_PROBES`` probes with block updates).
    """

    epsilon: float = 0.01
    initial_size: int | None = None
    increment: int | None = None
    update: str = "block"
    debias: bool = False

    def validate(self, n_data: int, dim: int) -> SequentialIRLSConfig:
        """Check the settings against ``N`` and ``D`` and fill in default sizes."""
        check_real(self.epsilon, "epsilon", 0.0, 0.5, high_open=True)
        check_bool(self.debias, "debias")
        check_choice(self.update, "update", UPDATES)
        if n_data <= dim:
            raise ValueError(f"need more data points than parameters: N={n_data}, D={dim}")
        default = max(n_data // 1000, dim + 1)
        n0 = default if self.initial_size is None else self.initial_size
        inc = default if self.increment is None else self.increment
        n0 = check_int(n0, "initial_size", dim + 1, n_data, why="more than D points")
        inc = check_int(inc, "increment", low=1)
        return self._replace(initial_size=n0, increment=min(inc, n_data))


class StepInfo(NamedTuple):
    """One iteration's minibatch size ``n``, ``mu = ||u_n - theta_t||``, ``sigma`` and ``delta = Phi(-mu / sigma)``."""

    batch_size: jax.Array
    mu: jax.Array
    sigma: jax.Array
    delta: jax.Array


def update_distribution(
    a: jax.Array, b: jax.Array, theta: jax.Array, n_data: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(u_n, mu, sigma)`` of eqs. (5) and (7) from ``n`` working rows ``a (n, D)``, ``b (n,)`` of ``N = n_data``."""
    n = a.shape[0]
    gram = a.T @ a
    u = jnp.linalg.solve(gram, a.T @ b)
    e = jnp.sum((b - a @ u) ** 2)
    return (u, *_mu_sigma(u, theta, lambda v: jnp.linalg.solve(gram, v), e, jnp.asarray(n, jnp.int32), n_data))


def _mu_sigma(
    u: jax.Array,
    theta: jax.Array,
    solve: Callable[[jax.Array], jax.Array],
    e: jax.Array,
    n: jax.Array,
    n_data: int,
    trace_inv: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``mu = ||u - theta||`` and ``sigma = sqrt(u_hat^T A_n^{-1} u_hat * e_n / n * (1 - (n-1)/(N-1)))``.

    With ``trace_inv = tr(A_n^{-1})`` the debiased ``mu = sqrt(max(||u - theta||^2 - tr(Sigma), 0))`` is returned.
    """
    d = u - theta
    mu = jnp.linalg.norm(d)
    u_hat = d / jnp.where(mu > 0, mu, 1.0)
    count = jnp.asarray(n, jnp.int32)  # integer so that n == N is exact for any N
    fpc = jnp.maximum(n_data - count, 0).astype(e.dtype) / max(n_data - 1, 1)
    scale = jnp.maximum(e, 0.0) / count.astype(e.dtype) * fpc
    quad = jnp.maximum(u_hat @ solve(u_hat), 0.0)
    if trace_inv is not None:
        mu = jnp.sqrt(jnp.maximum(mu**2 - scale * trace_inv, 0.0))
    return mu, jnp.sqrt(scale * quad)


class _Loop(NamedTuple):
    """While-loop carry: block counter, statistics so far and the latest test."""

    block: jax.Array
    n: jax.Array
    gram: jax.Array  # A_n (block) or A_n^{-1} (sherman-morrison)
    rhs: jax.Array  # B_n (block only)
    u: jax.Array
    e: jax.Array
    mu: jax.Array
    sigma: jax.Array
    done: jax.Array


def make_sequential_step(
    problem: IRLSProblem, config: SequentialIRLSConfig, n_data: int, dim: int
) -> Callable[[jax.Array, dict, jax.Array], tuple[jax.Array, StepInfo]]:
    """A jitted ``step(theta, data, key) -> (theta_next, StepInfo)``: one iteration of Algorithm 1.

    ``data`` is ``{"x": (N, D), "y": (N,)}``; the minibatch is a fresh key-dependent permutation of the data
    (drawn in O(1) per index with :func:`minibatch_mcmc.data.indexing.permuted_index`).
    """
    cfg = config.validate(n_data, dim)
    eps_star = float(norm.ppf(cfg.epsilon)) if cfg.epsilon > 0 else -np.inf
    compiled = _compiled_step(problem, cfg._replace(epsilon=0.0), n_data, dim)
    return functools.partial(compiled, eps_star=jnp.float32(eps_star))


@functools.lru_cache(maxsize=32)
def _compiled_step(
    problem: IRLSProblem, cfg: SequentialIRLSConfig, n_data: int, dim: int
) -> Callable[..., tuple[jax.Array, StepInfo]]:
    """The jitted step for one problem, sizes and update rule, with ``Phi^{-1}(epsilon)`` as an argument."""
    n0, inc = cfg.initial_size, cfg.increment
    num_blocks = -(-(n_data - n0) // inc)
    sherman = cfg.update == "sherman-morrison"

    def rows(theta, data, round_keys, start, size):
        pos = start + jnp.arange(size, dtype=jnp.int32)
        valid = pos < n_data
        idx = permuted_index(None, jnp.where(valid, pos, 0), n_data, round_keys)
        a, b = problem.working(theta, jnp.take(data["x"], idx, axis=0), jnp.take(data["y"], idx, axis=0))
        return a * valid[:, None], b * valid, jnp.sum(valid, dtype=jnp.int32)

    def step(theta: jax.Array, data: dict, key: jax.Array, eps_star: jax.Array) -> tuple[jax.Array, StepInfo]:
        def accept(mu, sigma, n):
            return (n >= n_data) | (mu > -sigma * eps_star)

        round_keys = jax.random.bits(key, (4,), dtype=jnp.uint32)
        probes = jax.random.rademacher(jax.random.fold_in(key, 1), (dim, NUM_PROBES), dtype=theta.dtype)
        a0, b0, _ = rows(theta, data, round_keys, 0, n0)
        gram0 = a0.T @ a0
        chol = jax.scipy.linalg.cho_factor(gram0, lower=True)
        u0 = jax.scipy.linalg.cho_solve(chol, a0.T @ b0)
        e0 = jnp.sum((b0 - a0 @ u0) ** 2)
        n0_ = jnp.asarray(n0, jnp.int32)
        solve0 = lambda v: jax.scipy.linalg.cho_solve(chol, v)  # noqa: E731
        if sherman:
            first = solve0(jnp.eye(dim, dtype=theta.dtype))
            tr0 = jnp.trace(first) if cfg.debias else None
        else:
            first = gram0
            tr0 = jnp.mean(jnp.sum(probes * solve0(probes), axis=0)) if cfg.debias else None
        mu0, sigma0 = _mu_sigma(u0, theta, solve0, e0, n0_, n_data, tr0)
        init = _Loop(jnp.int32(0), n0_, first, a0.T @ b0, u0, e0, mu0, sigma0, accept(mu0, sigma0, n0))

        def body(s: _Loop) -> _Loop:
            a, b, m = rows(theta, data, round_keys, n0 + s.block * inc, inc)
            n = s.n + m
            if sherman:

                def rls(carry, ab):
                    p, u, e = carry
                    ai, bi = ab
                    pa = p @ ai
                    denom = 1.0 + ai @ pa
                    r_old = bi - ai @ u
                    u_new = u + r_old * pa / denom
                    p_new = p - jnp.outer(pa, pa) / denom
                    return (p_new, u_new, e + (bi - ai @ u_new) * r_old), None

                (p, u, e), _ = jax.lax.scan(rls, (s.gram, s.u, s.e), (a, b))
                gram, rhs, solve = p, s.rhs, lambda v: p @ v
                tr = jnp.trace(p) if cfg.debias else None
            else:
                gram, rhs = s.gram + a.T @ a, s.rhs + a.T @ b
                ch = jax.scipy.linalg.cho_factor(gram, lower=True)
                u = jax.scipy.linalg.cho_solve(ch, rhs)
                du = u - s.u
                e = s.e + jnp.sum((b - a @ u) ** 2) + du @ (s.gram @ du)
                solve = lambda v: jax.scipy.linalg.cho_solve(ch, v)  # noqa: E731
                tr = None
                if cfg.debias:
                    # Hutchinson estimate of tr(A_n^{-1}) with the iteration's Rademacher probes (triangular
                    # solves with D right-hand sides are slow on XLA:CPU; a few probes are cheap)
                    tr = jnp.mean(jnp.sum(probes * solve(probes), axis=0))
            mu, sigma = _mu_sigma(u, theta, solve, e, n, n_data, tr)
            return _Loop(s.block + 1, n, gram, rhs, u, e, mu, sigma, accept(mu, sigma, n))

        def cond(s: _Loop) -> jax.Array:
            return (~s.done) & (s.block < num_blocks)

        s = jax.lax.while_loop(cond, body, init)
        delta = jax.scipy.stats.norm.cdf(-s.mu / jnp.where(s.sigma > 0, s.sigma, 1.0))
        delta = jnp.where(s.sigma > 0, delta, 0.0)
        return s.u, StepInfo(s.n, s.mu, s.sigma, delta)

    return jax.jit(step)


@functools.lru_cache(maxsize=None)
def make_batch_step(problem: IRLSProblem) -> Callable[[jax.Array, dict], jax.Array]:
    """A jitted full-data IRLS iteration ``theta -> (A_N^T A_N)^{-1} A_N^T b_N``."""

    def step(theta: jax.Array, data: dict) -> jax.Array:
        a, b = problem.working(theta, data["x"], data["y"])
        chol = jax.scipy.linalg.cho_factor(a.T @ a, lower=True)
        return jax.scipy.linalg.cho_solve(chol, a.T @ b)

    return jax.jit(step)


class IRLSTrace(NamedTuple):
    """Iterates ``thetas (T+1, D)`` (the first is the start), per-iteration minibatch sizes and cumulative seconds."""

    thetas: np.ndarray
    batch_sizes: np.ndarray
    wall_times: np.ndarray
    deltas: np.ndarray


def check_regression_data(data: dict, theta0: jax.Array) -> tuple[int, int]:
    """``(N, D)`` of a ``{"x": (N, D), "y": (N,)}`` data set, checked against ``theta0 (D,)``."""
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise ValueError("data must be a dict with arrays 'x' (N, D) and 'y' (N,)")
    x, y = np.shape(data["x"]), np.shape(data["y"])
    if len(x) != 2 or y != (x[0],):
        raise ValueError(f"data['x'] must be (N, D) and data['y'] (N,); got {x} and {y}")
    if np.shape(theta0) != (x[1],):
        raise ValueError(f"theta0 must have shape ({x[1]},) to match data['x']; got {np.shape(theta0)}")
    return int(x[0]), int(x[1])


def run_irls(
    problem: IRLSProblem,
    data: dict,
    theta0: jax.Array,
    num_iterations: int,
    key: jax.Array | None = None,
    config: SequentialIRLSConfig | None = None,
) -> IRLSTrace:
    """Run ``num_iterations`` of sequential IRLS (``config``, needs ``key``) or batch IRLS (``config=None``).

    The step is compiled before timing; iteration ``t`` uses ``jax.random.fold_in(key, t)``.
    """
    n, dim = check_regression_data(data, theta0)
    check_int(num_iterations, "num_iterations", low=1)
    theta = jnp.asarray(theta0, data["x"].dtype)
    if config is None:
        batch = make_batch_step(problem)

        def step(th, t):
            return batch(th, data), StepInfo(jnp.int32(n), jnp.nan, jnp.nan, jnp.float32(0.0))
    else:
        if key is None:
            raise ValueError("sequential IRLS needs a PRNG key")
        seq = make_sequential_step(problem, config, n, dim)

        def step(th, t):
            return seq(th, data, jax.random.fold_in(key, t))

    jax.block_until_ready(step(theta, 0))  # compile outside the clock
    thetas, sizes, times, deltas = [np.asarray(theta)], [], [], []
    elapsed = 0.0
    for t in range(int(num_iterations)):
        start = time.perf_counter()
        theta, info = jax.block_until_ready(step(theta, t))
        elapsed += time.perf_counter() - start
        thetas.append(np.asarray(theta))
        sizes.append(int(info.batch_size))
        times.append(elapsed)
        deltas.append(float(info.delta))
    return IRLSTrace(np.stack(thetas), np.array(sizes), np.array(times), np.array(deltas))
