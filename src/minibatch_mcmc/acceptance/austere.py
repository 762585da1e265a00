"""AustereMH (Korattikara, Chen and Welling 2014; sequential-tests paper, Section 3.1, Algorithm 2).

The Metropolis test ``log u < Delta`` is rewritten as ``mu > mu_0`` with
``mu = mean_i l_i``, ``l_i = log p(x_i|theta')/K - log p(x_i|theta)/K`` and
``mu_0 = (log u - psi) / N``. Minibatches of ``m`` points are drawn without replacement; after
each one the Student-t statistic ``t = (l_bar - mu_0) / s`` with the finite-population corrected
``s = s_l / sqrt(n) * sqrt(1 - (n - 1)/(N - 1))`` is formed, and the test stops when the p-value
``1 - F_{n-1}(|t|)`` drops below ``epsilon`` (deciding ``l_bar > mu_0``) or the data run out
(then ``s = 0`` and the decision is the exact Metropolis one).

Two variants, named as in Seita et al. (2017):

* **AustereMH(c)** (conservative): one ``(m, epsilon)`` for the whole run, chosen beforehand by
  :func:`design_conservative` from the worst-case error (``mu_std -> 0``) and the data use expected
  under pilot values of ``mu_std``.
* **AustereMH(nc)**: every step computes ``mu`` and ``sigma_l`` from the full data (counted as
  hidden data), hence ``mu_std = (mu - mu_0) sqrt(N) / sigma_l``, and picks the ``(m, epsilon)`` of a
  precomputed :class:`AustereDesign` that uses the least data while meeting the error bound at that
  ``mu_std``.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, check_batch_fits, data_free_delta, uniform_from_bits, untempered
from minibatch_mcmc.acceptance.streaming import StreamingSums, add_rows, decision_dtype, init_sums, mean_and_variance, read_terms
from minibatch_mcmc.checks import check_int, check_probability, check_real
from minibatch_mcmc.data.indexing import MAX_DATA, chunk_indices
from minibatch_mcmc.data.passes import full_data_sum

EPSILON_GRID = (0.001, 0.005, 0.01, 0.05, 0.1, 0.2)
"""Per-test thresholds searched by the design (Seita et al. Appendix B.2.1)."""
BATCH_GRID = (50, 100, 150, 200, 250, 300, 350, 400, 450, 500)
"""Minibatch sizes searched by the design."""


# --------------------------------------------------------------------------------------------
# Design: error and data use of the sequential test as functions of mu_std
# --------------------------------------------------------------------------------------------


class DesignTable(NamedTuple):
    """Simulated error and expected data fraction of the test for each ``(m, epsilon, mu_std)``."""

    n_data: int
    batch_sizes: np.ndarray
    epsilons: np.ndarray
    mu_std: np.ndarray
    error: np.ndarray
    """Probability of a decision other than the exact test's, shape ``(len(m), len(eps), len(mu_std))``."""
    data_fraction: np.ndarray
    """Expected fraction of the ``N`` points used, same shape."""


def simulate_design(
    n_data: int,
    batch_size: int,
    epsilons: Sequence[float],
    mu_std: Sequence[float],
    n_paths: int = 2000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo error and data fraction of the sequential t-test, shape ``(len(epsilons), len(mu_std))``.

    Under the CLT the standardised deviation ``Y_j`` of the running mean of ``n_j`` points drawn
    without replacement is Gaussian with variance ``tau_j = 1/n_j - 1/N`` and Markov in ``j``
    (a Brownian motion run backwards in ``tau``), so the stage-``j`` statistic is
    ``t_j = (mu_std / sqrt(N) + Y_j) / sqrt(tau_j)``. The paths are simulated exactly at the test's
    stages and stopped when ``|t_j|`` exceeds the Student-t quantile; ``mu_std -> 0`` is taken as
    ``+0``, so an early stop on the wrong side (``t < 0``) counts as an error.
    """
    n = int(n_data)
    m = int(batch_size)
    if m < 2 or m > n:
        raise ValueError(f"batch_size m={m} must be in [2, N={n}]")
    eps = np.asarray(epsilons, float)
    mus = np.asarray(mu_std, float)
    if np.any((eps <= 0) | (eps >= 1)):
        raise ValueError(f"epsilons {eps.tolist()} must lie in (0, 1)")
    sizes = np.minimum(np.arange(1, math.ceil(n / m) + 1) * m, n)
    tau = 1.0 / sizes - 1.0 / n
    crit = sps.t.ppf(1.0 - eps[:, None], np.maximum(sizes - 1, 1)[None, :])  # (E, J)
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(n_paths) * math.sqrt(tau[0])
    shift = mus[:, None] / math.sqrt(n)  # (K, 1)
    sign = np.where(mus >= 0, 1.0, -1.0)[None, :, None]
    alive = np.ones((eps.size, mus.size, n_paths), bool)
    wrong = np.zeros((eps.size, mus.size))
    used = np.zeros((eps.size, mus.size))
    for j in range(sizes.size):
        if j > 0:
            r = tau[j] / tau[j - 1]
            y = r * y + math.sqrt(max(tau[j] * (1.0 - r), 0.0)) * rng.standard_normal(n_paths)
        if tau[j] <= 0:
            # all data used: the exact decision, never wrong
            used += alive.sum(-1) * sizes[j]
            alive[:] = False
            break
        t = (shift + y[None, :]) / math.sqrt(tau[j])  # (K, P)
        stop = alive & (np.abs(t)[None] > crit[:, j][:, None, None])
        if stop.any():
            wrong += (stop & (np.sign(t)[None] != sign)).sum(-1)
            used += stop.sum(-1) * sizes[j]
            alive &= ~stop
        if not alive.any():
            break
    return wrong / n_paths, used / (n_paths * n)


def design_table(
    n_data: int,
    mu_std: Sequence[float],
    batch_sizes: Sequence[int] = BATCH_GRID,
    epsilons: Sequence[float] = EPSILON_GRID,
    n_paths: int = 2000,
    seed: int = 0,
) -> DesignTable:
    """:func:`simulate_design` over the ``(m, epsilon)`` grid (sizes larger than ``N`` dropped)."""
    ms = np.asarray([m for m in batch_sizes if 2 <= m <= n_data], int)
    if ms.size == 0:
        raise ValueError(f"no batch size in {list(batch_sizes)} fits N={n_data}")
    err = np.empty((ms.size, len(epsilons), len(mu_std)))
    frac = np.empty_like(err)
    for i, m in enumerate(ms):
        err[i], frac[i] = simulate_design(n_data, int(m), epsilons, mu_std, n_paths, seed + i)
    return DesignTable(int(n_data), ms, np.asarray(epsilons, float), np.asarray(mu_std, float), err, frac)


class DesignChoice(NamedTuple):
    """The chosen ``(m, epsilon)`` with its worst-case error and expected data fraction."""

    batch_size: int
    epsilon: float
    worst_error: float
    data_fraction: float


def _check_error_bound(error_bound: float) -> float:
    """The design's bound on the probability of a wrong decision, in ``(0, 0.5)``."""
    return check_real(error_bound, "error_bound", 0.0, 0.5, low_open=True, high_open=True, why="a coin flip errs with 0.5")


def design_conservative(
    n_data: int,
    error_bound: float,
    pilot_mu_std: Sequence[float] = (1.0,),
    batch_sizes: Sequence[int] = BATCH_GRID,
    epsilons: Sequence[float] = EPSILON_GRID,
    n_paths: int = 2000,
    seed: int = 0,
) -> DesignChoice:
    """AustereMH(c)'s grid search: least expected data use (averaged over ``pilot_mu_std``) s.t. worst error <= bound.

    The worst-case error of the test is at ``mu_std -> 0`` (the exact decision is a coin flip away),
    so the constraint is evaluated there; the data use is averaged over the ``|mu_std|`` values of a
    pilot run (full-data statistics of a few MH steps), as the expected cost of the run.
    """
    _check_error_bound(error_bound)
    pilot = np.abs(np.asarray(pilot_mu_std, float))
    if pilot.size == 0 or not np.all(np.isfinite(pilot)):
        raise ValueError("pilot_mu_std must be a non-empty list of finite values")
    grid = np.r_[0.0, pilot]
    table = design_table(n_data, grid, batch_sizes, epsilons, n_paths, seed)
    worst = table.error[:, :, 0]
    cost = table.data_fraction[:, :, 1:].mean(-1)
    ok = worst <= error_bound
    if not ok.any():
        i, e = np.unravel_index(np.argmin(worst), worst.shape)
    else:
        masked = np.where(ok, cost, np.inf)
        i, e = np.unravel_index(np.argmin(masked), masked.shape)
    return DesignChoice(int(table.batch_sizes[i]), float(table.epsilons[e]), float(worst[i, e]), float(cost[i, e]))


class AustereDesign(NamedTuple):
    """Per-``mu_std`` choice of ``(m, epsilon)`` for AustereMH(nc), as device arrays for lookup in ``jit``."""

    mu_std_grid: jax.Array
    batch_size: jax.Array
    epsilon: jax.Array
    base_chunk: int


def design_adaptive(table: DesignTable, error_bound: float) -> AustereDesign:
    """For each ``|mu_std|`` on the table's grid, the feasible ``(m, epsilon)`` with the least data use."""
    _check_error_bound(error_bound)
    k = table.mu_std.size
    ms, es = np.empty(k, np.int32), np.empty(k, np.float32)
    for j in range(k):
        err, frac = table.error[:, :, j], table.data_fraction[:, :, j]
        masked = np.where(err <= error_bound, frac, np.inf)
        if not np.isfinite(masked).any():
            masked = err  # nothing meets the bound: least error
        i, e = np.unravel_index(np.argmin(masked), masked.shape)
        ms[j], es[j] = table.batch_sizes[i], table.epsilons[e]
    order = np.argsort(table.mu_std)
    base = int(reduce(math.gcd, [int(m) for m in table.batch_sizes]))
    return AustereDesign(jnp.asarray(np.abs(table.mu_std)[order], jnp.float32), jnp.asarray(ms[order]), jnp.asarray(es[order]), base)


# --------------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------------


def student_t_pvalue(t: jax.Array, dof: jax.Array) -> jax.Array:
    """``1 - F_dof(|t|)`` for the Student-t distribution, via the regularised incomplete beta."""
    x = dof / (dof + t * t)
    return 0.5 * jax.scipy.special.betainc(0.5 * dof, 0.5, x)


def _fpc(count: jax.Array, n: int, dtype) -> jax.Array:
    """``1 - (n - 1)/(N - 1)`` from integers: exactly 0 when all ``N`` points are used."""
    return jnp.maximum(n - count, 0).astype(dtype) / max(n - 1, 1)


class AustereMH(NamedTuple):
    """AustereMH with a fixed ``(m, epsilon)`` (conservative) or a per-step design (``design`` given)."""

    batch_size: int
    """``m`` for the conservative test; the chunk size is ``design.base_chunk`` otherwise."""
    epsilon: float
    """p-value threshold of the conservative test (ignored when ``design`` is given)."""
    design: AustereDesign | None = None
    name: str = "austere_mh"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against ``N`` (and, for AustereMH(nc), that the ``2N`` hidden evaluations fit the int32 record)."""
        check_batch_fits(self.batch_size, n_data)
        if self.design is not None and 2 * n_data > MAX_DATA:
            raise ValueError(
                f"AustereMH(nc) records 2N = {2 * n_data} hidden evaluations per step as int32; use N <= {MAX_DATA // 2}"
            )

    temperature_factor = staticmethod(untempered)

    def stage(self, stats: Statistics, per_datum, mu0: jax.Array, dtype) -> tuple[int, jax.Array, jax.Array, jax.Array, jax.Array]:
        """Chunk size, stage size ``m``, threshold ``epsilon``, hidden data and a non-finite flag for this step."""
        n = stats.n_data
        if self.design is None:
            zero = jnp.zeros((), jnp.int32)
            return self.batch_size, jnp.asarray(self.batch_size, jnp.int32), jnp.asarray(self.epsilon, dtype), zero, jnp.zeros((), bool)
        # full-data statistics (the "hidden" data the non-conservative test needs)
        s1, b1 = full_data_sum(per_datum, stats.data, n)
        mu = s1 / n
        s2, b2 = full_data_sum(lambda rows: (per_datum(rows) - mu) ** 2, stats.data, n)
        sd = jnp.sqrt(s2 / jnp.maximum(n - 1, 1))
        mu_std = jnp.abs(mu - mu0) * jnp.sqrt(jnp.float32(n)) / jnp.maximum(sd, jnp.finfo(dtype).tiny)
        grid = self.design.mu_std_grid
        j = jnp.clip(jnp.searchsorted(grid, mu_std), 0, grid.shape[0] - 1)
        # nearest grid value below or above: take the more cautious (smaller mu_std) neighbour
        j = jnp.where((j > 0) & (grid[j] > mu_std), j - 1, j)
        eps = self.design.epsilon[j].astype(dtype)
        return self.design.base_chunk, self.design.batch_size[j], eps, jnp.asarray(2 * n, jnp.int32), b1 | b2

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Sequential t-test of ``mu > mu_0`` on growing minibatches."""
        n = stats.n_data
        bits = jax.random.bits(key, (5,), dtype=jnp.uint32)
        dtype = decision_dtype(stats)
        u = uniform_from_bits(bits[4], dtype)
        mu0 = (jnp.log(u) - data_free_delta(stats)) / n
        temp = stats.temperature

        def per_datum(rows):
            return stats.log_ratio(rows).astype(dtype) / temp

        chunk_m, stage_m, eps, hidden, bad_full = self.stage(stats, per_datum, mu0, dtype)

        def add_chunk(carry: tuple[jax.Array, StreamingSums, jax.Array]) -> tuple[jax.Array, StreamingSums, jax.Array]:
            chunk, st, _ = carry
            idx, valid = chunk_indices(key, chunk, chunk_m, n, bits[:4])
            st = add_rows(st, read_terms(stats, idx, dtype) / temp, valid)
            count = st.count
            # test only at multiples of the stage size m (or when the data run out)
            at_stage = (count % stage_m == 0) | (count >= n)
            nf = count.astype(dtype)
            mean, var = mean_and_variance(st)
            s = jnp.sqrt(var / nf * _fpc(count, n, dtype))
            t = (mean - mu0) / jnp.maximum(s, jnp.finfo(dtype).tiny)
            pval = jnp.where(count >= n, 0.0, student_t_pvalue(t, jnp.maximum(nf - 1.0, 1.0)))
            done = (at_stage & (pval < eps)) | (count >= n) | st.bad
            return chunk + 1, st, done

        st0 = init_sums(dtype)._replace(bad=bad_full)
        i0 = jnp.zeros((), jnp.int32)
        _, st, _ = jax.lax.while_loop(lambda c: ~c[2], add_chunk, add_chunk((i0, st0, jnp.zeros((), bool))))
        nf = st.count.astype(dtype)
        mean, var = mean_and_variance(st)
        fpc = _fpc(st.count, n, dtype)
        prior_ok = stats.psi > -jnp.inf
        bad = st.bad | jnp.isnan(stats.psi)
        big_n = jnp.asarray(n, dtype)
        return TestOutcome(
            accepted=(mean > mu0) & prior_ok & ~bad,
            batch_size=st.count,
            s2=big_n * big_n * (var / nf * fpc),
            epsilon=eps,
            delta_star=jnp.where(prior_ok, big_n * mean + data_free_delta(stats), -jnp.inf),
            nonfinite=bad,
            hidden_data=hidden,
            residual_sd=jnp.sqrt(var) * stats.temperature,
        )


def austere_mh(batch_size: int = 50, epsilon: float = 0.005) -> AustereMH:
    """AustereMH(c): the sequential t-test with a fixed minibatch size ``m`` and threshold ``epsilon``."""
    batch_size = check_int(batch_size, "batch_size m", low=2, why="the t statistic needs two points")
    epsilon = check_probability(epsilon, "epsilon", why="the per-stage error threshold of the t-test")
    return AustereMH(batch_size=batch_size, epsilon=epsilon, name="austere_mh_c")


def austere_mh_adaptive(design: AustereDesign) -> AustereMH:
    """AustereMH(nc): re-optimises ``(m, epsilon)`` every step from full-data ``mu_std`` (hidden data 2N)."""
    return AustereMH(batch_size=int(design.base_chunk), epsilon=float(design.epsilon[0]), design=design, name="austere_mh_nc")


def pilot_mu_std(model, data, proposal, position, key: jax.Array, steps: int = 50, temperature: float = 1.0) -> np.ndarray:
    """``|mu_std|`` of ``steps`` random-walk proposals around ``position`` (full-data statistics, for the design).

    Each proposal gets its own ``u``; the chain moves with the exact Metropolis decision, so the
    values are those a short exact run would meet.
    """
    from minibatch_mcmc.data.arrays import as_data_source

    src = as_data_source(data)
    arrays, n = src.arrays(), src.n

    @jax.jit
    def one(k, theta):
        k1, k2 = jax.random.split(k)
        cand, log_q = proposal.sample(k1, theta)
        psi = model.log_prior(cand) - model.log_prior(theta) + log_q
        l = (model.log_lik(cand, arrays) - model.log_lik(theta, arrays)) / temperature
        mu, sd = jnp.mean(l), jnp.std(l, ddof=1)
        u = jax.random.uniform(k2, minval=1e-12)
        mu0 = (jnp.log(u) - psi) / n
        accept = mu > mu0
        return jnp.abs(mu - mu0) * jnp.sqrt(jnp.float32(n)) / sd, jax.tree_util.tree_map(lambda a, b: jnp.where(accept, a, b), cand, theta)

    out = []
    theta = position
    for k in jax.random.split(key, steps):
        v, theta = one(k, theta)
        out.append(float(v))
    return np.asarray(out)
