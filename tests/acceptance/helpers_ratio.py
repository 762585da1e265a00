"""Synthetic ratio populations: ``Statistics`` whose per-datum log ratios are the data themselves."""

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import Statistics
from minibatch_mcmc.compiling import use_compilation_cache


def population(n: int, delta: float, sd_lambda: float, seed: int, skew: bool = False) -> tuple[np.ndarray, float]:
    """Per-datum log ratios ``r`` (so ``Lambda_i = n r_i``) with full-data ``Delta = sum r + psi`` and ``sd(Lambda_i)``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    if skew:
        z = rng.exponential(size=n) - 1.0
    z = (z - z.mean()) / z.std()
    r = z * sd_lambda / n
    psi = 0.3
    r = r + (delta - psi) / n
    return r.astype(np.float32), psi


FULL_OPTIMISATION = {"xla_backend_optimization_level": 3}
"""XLA's default backend optimisation, for a program whose run costs more than its compilation: ``make test`` compiles
at level 0 (``TEST_XLA_FLAGS``), where 20,000 MHSubLhd decisions on N = 2000 run 6.2 CPU s instead of 0.6 (the
compilation takes 3.7 CPU s instead of 2.6). Per-compilation options override ``XLA_FLAGS``; XLA's CPU backend uses
no fast-math at either level, so the decisions are the same and the floats agree to rounding."""


def compile_program(fn, *args, optimise: bool = False):
    """``jax.jit(fn)`` compiled for ``args``, at XLA's default optimisation when ``optimise`` (else as ``XLA_FLAGS`` says)."""
    use_compilation_cache()
    return jax.jit(fn).lower(*args).compile(FULL_OPTIMISATION if optimise else None)


def acceptance_draws(
    test, r: np.ndarray, psi: float, draws: int, seed: int, temperature: float = 1.0, optimise: bool = False
):
    """``draws`` independent decisions of ``test`` on the population ``r``: (accepted, batch_size, delta_star).

    The population, ``psi`` and the temperature are arguments of the compiled program, not constants in it, so the
    cases of a test (one ``test`` setting, one ``n`` and ``draws``) compile one program: the persistent compilation
    cache (tests/conftest.py) reads it back for the next case instead of compiling it again. ``optimise``: compiled
    at XLA's default optimisation (``FULL_OPTIMISATION``), for many draws of a test that reads much of the data."""
    n = r.shape[0]

    def run(keys, data, psi, temperature):
        def one(k):
            stats = Statistics(log_ratio=lambda b: b, data=data, n_data=n, psi=psi, temperature=temperature)
            out = test.decide(k, stats)
            return out.accepted, out.batch_size, out.delta_star

        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.key(seed), draws)
    args = (keys, jnp.asarray(r), jnp.float32(psi), jnp.float32(temperature))
    acc, bs, ds = compile_program(run, *args, optimise=optimise)(*args)
    return np.asarray(acc), np.asarray(bs), np.asarray(ds)


def exact_delta(r: np.ndarray, psi: float, temperature: float = 1.0) -> float:
    """Full-data ``Delta`` in float64."""
    return float(np.sum(r.astype(np.float64)) / temperature + psi)


def austere_error_bound(
    r: np.ndarray, psi: float, m: int, eps: float, temperature: float = 1.0, skew: bool = False, grid: int = 100_000
) -> float:
    """Bound on ``|P(accept) - min(1, e^Delta)|`` of AustereMH(m, eps) on ``r``, independent of the library's design.

    For a given ``u`` the decision is wrong only if some stage ``j`` (``n_j = j m < N`` points) stops on the wrong
    side of ``mu_0 = (log u - psi)/N``. Under the CLT, with ``se_j = sigma_l / sqrt(n_j) sqrt(1 - (n_j - 1)/(N - 1))``
    and ``c_j`` the Student-t ``1 - eps`` quantile (``n_j - 1`` dof), that has probability about
    ``Phi_bar(c_j + |mu - mu_0| / se_j)``; a union bound over the stages, capped at 1, and the average over ``u``
    bound the error. ``skew=True`` adds the first Edgeworth term of a studentised mean,
    ``|gamma| / (6 sqrt(n_j)) (2 x^2 + 1) phi(x)`` with ``gamma`` the population's skewness, for populations where
    the plain CLT tail is too light.
    """
    from scipy import stats as sps

    n = r.shape[0]
    l = r.astype(np.float64) / temperature
    mu, sd = l.mean(), l.std()
    gamma = abs(float(np.mean((l - mu) ** 3))) / sd**3 if skew else 0.0
    sizes = np.arange(1, -(-n // m) + 1) * m
    sizes = sizes[sizes < n]
    se = sd / np.sqrt(sizes) * np.sqrt(1.0 - (sizes - 1.0) / (n - 1.0))
    crit = sps.t.isf(eps, sizes - 1)
    u = (np.arange(grid) + 0.5) / grid
    gap = np.abs(mu - (np.log(u) - psi) / n)
    total = np.zeros(grid)
    for c, s, b in zip(crit, se, sizes):
        x = c + gap / s
        total += sps.norm.sf(x) + gamma / (6.0 * np.sqrt(b)) * (2.0 * x * x + 1.0) * sps.norm.pdf(x)
    return float(np.mean(np.minimum(total, 1.0)))
