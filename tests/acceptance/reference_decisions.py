"""Independent float64 NumPy re-implementations of every acceptance test's decision rule, from the papers.

Only the *randomness* comes from the library (which rows a key reads, in which order, and its uniforms):
``draw_inputs`` rebuilds them from the public key-to-randomness helpers. Everything else (running means,
variances, finite-population corrections, p-values, thresholds, stopping rules) is recomputed here in float64
from the papers' descriptions, so a reference and the library can only agree if the library follows the paper.

Each reference returns a ``Reference`` of per-draw arrays: the decision, the number of rows used, the estimate
``delta_star`` of ``Delta``, and ``margin``: the smallest distance, over every comparison the reference made
for that draw (stopping rules and the final decision), between the compared quantity and its threshold, in
units where float32 rounding of the library's computation is about ``1e-6`` or less. A draw whose margin is
below the test's tolerance is a near-tie: the float32 library may decide either way there.

``mutation`` switches swap one ingredient for a plausible wrong one (a Barker threshold for the Metropolis one,
a normal p-value for Student-t, no finite-population correction, ...): the tests check that each such mutant
disagrees with the library on many draws, i.e. that the comparison has the power to see the mistake.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from minibatch_mcmc.acceptance.base import Statistics, uniform_from_bits
from minibatch_mcmc.acceptance.correction import correction_from_uniforms
from minibatch_mcmc.acceptance.mhminibatch import random_inputs
from minibatch_mcmc.data.indexing import permuted_index


class Inputs(NamedTuple):
    """The randomness of one batch of decisions: row order ``(draws, N)`` and uniforms ``(draws, k)`` as float64."""

    order: np.ndarray
    uniforms: np.ndarray


class Reference(NamedTuple):
    """A reference's per-draw decision, rows used, ``delta_star`` and smallest relative margin to a threshold."""

    accepted: np.ndarray
    batch_size: np.ndarray
    delta_star: np.ndarray
    margin: np.ndarray


def keys_for(seed: int, draws: int) -> jax.Array:
    """The keys ``helpers_ratio.acceptance_draws(..., draws, seed)`` and ``run_decisions`` use."""
    return jax.random.split(jax.random.key(seed), draws)


def _five_words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Round keys and uniform of AustereMH, MHSubLhd and the naive test: five uint32 words of the key."""
    bits = jax.random.bits(key, (5,), dtype=jnp.uint32)
    return bits[:4], uniform_from_bits(bits[4:], jnp.float32)


def _eight_words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Round keys and the four uniforms of MHminibatch."""
    round_keys, bits = random_inputs(key)
    return round_keys, uniform_from_bits(bits, jnp.float32)


def draw_inputs(keys: jax.Array, n: int, layout: str, length: int | None = None) -> Inputs:
    """The first ``length`` rows (default all ``n``) each key reads and its float32 uniforms, for ``layout``
    ``"five"`` (AustereMH, MHSubLhd, naive, MINT) or ``"eight"`` (MHminibatch)."""
    split = _five_words if layout == "five" else _eight_words
    length = n if length is None else length
    pos = jnp.arange(length, dtype=jnp.int32)

    @jax.jit
    def one(k):
        round_keys, u = split(k)
        return permuted_index(k, pos, n, round_keys), u

    order, u = jax.vmap(one)(keys)
    return Inputs(np.asarray(order), np.asarray(u, dtype=np.float64))


def correction_draws(keys: jax.Array, sampler) -> np.ndarray:
    """``X_corr`` per key: the library's alias sampler applied to the key's uniforms ``u[1], u[2]`` (randomness)."""

    @jax.jit
    def one(k):
        u = _eight_words(k)[1]
        return correction_from_uniforms(u[1], u[2], sampler)

    return np.asarray(jax.vmap(one)(keys), dtype=np.float64)


def run_decisions(test, r32: np.ndarray, psi: float, keys: jax.Array, temperature: float = 1.0):
    """The library's ``TestOutcome`` for each key on the ratio population ``r32`` (one compile per test and size)."""
    return _decide(test, r32.shape[0])(jnp.asarray(r32), jnp.float32(psi), jnp.float32(temperature), keys)


_COMPILED: dict = {}


def _decide(test, n: int):
    """A jitted, vmapped ``test.decide`` with the data, ``psi`` and ``K`` traced."""
    slot = (id(test), n)  # tests holding device arrays (MHminibatch's sampler) are not hashable
    if slot not in _COMPILED:

        @jax.jit
        def run(data, psi, temperature, keys):
            def one(k):
                return test.decide(k, Statistics(lambda b: b, data, n, psi, temperature))

            return jax.vmap(one)(keys)

        _COMPILED[slot] = (test, run)  # keep the test alive so its id is not reused
    return _COMPILED[slot][1]


def _prefix_moments(values: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample variance (ddof 1) of the first ``b`` entries of each row, for each ``b`` in ``sizes``."""
    centre = values.mean()
    z = values - centre
    c1 = np.cumsum(z, axis=1)[:, sizes - 1]
    c2 = np.cumsum(z * z, axis=1)[:, sizes - 1]
    b = sizes.astype(np.float64)
    mean = c1 / b
    var = np.maximum(c2 - c1 * c1 / b, 0.0) / np.maximum(b - 1.0, 1.0)
    return centre + mean, var


def _rel(a, b):
    """``|a - b|`` relative to the larger magnitude (at least 1e-30)."""
    return np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)


def mhminibatch_reference(
    r: np.ndarray,
    psi: float,
    inputs: Inputs,
    x_corr: np.ndarray,
    m: int,
    sigma: float,
    temperature: float = 1.0,
    mutation: str = "",
) -> Reference:
    """Seita et al. (2017) Algorithm 1: grow by ``m`` while ``s^2 >= sigma^2``, then ``delta* + X_nc + X_corr > 0``.

    ``mutation``: ``"no_fpc"`` drops the finite-population factor ``1 - b/N`` of ``s^2``; ``"no_xnc"`` leaves out
    the top-up noise ``X_nc``.
    """
    n = r.shape[0]
    lam = (n / temperature) * r[inputs.order]
    sizes = np.unique(np.minimum(np.arange(1, -(-n // m) + 1) * m, n))
    mean, var = _prefix_moments(lam, sizes)
    fpc = 1.0 if mutation == "no_fpc" else 1.0 - sizes / n
    s2 = var / sizes * fpc
    grow = (s2 >= sigma**2) & (sizes < n)
    stop = np.argmin(grow, axis=1)  # first stage that does not grow (the last stage never grows)
    rows = np.arange(lam.shape[0])
    margin = np.where(np.arange(sizes.size)[None, :] <= stop[:, None], _rel(s2, sigma**2), np.inf).min(axis=1)
    b, d_star, s2_b = sizes[stop], mean[rows, stop] + psi, s2[rows, stop]
    u = inputs.uniforms
    x_nc = special.ndtri(u[:, 0]) * np.sqrt(np.maximum(sigma**2 - s2_b, 0.0))
    if mutation == "no_xnc":
        x_nc = 0.0 * x_nc
    x_log = np.log(u[:, 3]) - np.log1p(-u[:, 3])
    stat = np.where(b >= n, d_star + x_log, d_star + x_nc + x_corr)
    scale = np.max(np.abs(lam), axis=1) + np.abs(x_nc) + np.abs(x_corr) + np.abs(x_log) + abs(psi)
    margin = np.minimum(margin, np.abs(stat) / scale)
    return Reference(stat > 0, b, d_star, margin)


def austere_reference(
    r: np.ndarray, psi: float, inputs: Inputs, m: int, eps: float, temperature: float = 1.0, mutation: str = ""
) -> Reference:
    """Korattikara et al. (2014) Algorithm 2: the sequential Student-t test of ``mean l > mu_0 = (log u - psi)/N``.

    After each minibatch of ``m`` (without replacement) ``t = (l_bar - mu_0) / s`` with
    ``s = s_l / sqrt(n) sqrt(1 - (n - 1)/(N - 1))``; stop when ``1 - F_{n-1}(|t|) < eps`` or ``n = N``.
    ``mutation``: ``"barker"`` (threshold ``log(u/(1-u))``), ``"normal"`` (normal p-value), ``"no_fpc"``.
    """
    n = r.shape[0]
    l = r[inputs.order] / temperature
    sizes = np.unique(np.minimum(np.arange(1, -(-n // m) + 1) * m, n))
    mean, var = _prefix_moments(l, sizes)
    u = inputs.uniforms[:, 0]
    log_u = np.log(u) - np.log1p(-u) if mutation == "barker" else np.log(u)
    mu0 = (log_u - psi) / n
    fpc = 1.0 if mutation == "no_fpc" else 1.0 - (sizes - 1.0) / (n - 1.0)
    s = np.sqrt(var / sizes * fpc)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (mean - mu0[:, None]) / s
    dist = stats.norm if mutation == "normal" else stats.t(np.maximum(sizes - 1, 1))
    pval = np.where(sizes >= n, 0.0, dist.sf(np.abs(t)))
    done = (pval < eps) | (sizes >= n)
    stop = np.argmax(done, axis=1)
    rows = np.arange(l.shape[0])
    # p-value vs eps ties, in log p: the library's float32 incomplete beta is good to a few 1e-3 relative there
    # (tests/acceptance/test_austere.py), so a p-value within 0.5% of eps counts as a tie (scaled to margin 1e-6)
    tie_p = np.where(
        (np.arange(sizes.size)[None, :] <= stop[:, None]) & (sizes < n),
        np.abs(np.log(np.maximum(pval, 1e-300) / eps)),
        np.inf,
    )
    b, l_bar = sizes[stop], mean[rows, stop]
    scale = np.max(np.abs(l), axis=1) + np.abs(mu0)
    margin = np.minimum(tie_p.min(axis=1) * 2e-4, np.abs(l_bar - mu0) / scale)
    return Reference(l_bar > mu0, b, n * l_bar + psi, margin)


def mhsublhd_stages(m: int, gamma: float, n: int) -> np.ndarray:
    """Bardenet et al.'s look schedule ``b_1 = m``, ``b_{k+1} = min(N, ceil(gamma b_k))`` (at least one more row)."""
    sizes = [min(m, n)]
    while sizes[-1] < n:
        sizes.append(min(n, max(int(np.ceil(gamma * sizes[-1])), sizes[-1] + 1)))
    return np.asarray(sizes)


def mhsublhd_reference(
    r: np.ndarray,
    psi: float,
    inputs: Inputs,
    m: int,
    gamma: float,
    p: float,
    delta: float,
    finite_population: bool = False,
    mutation: str = "",
) -> Reference:
    """Bardenet, Doucet and Holmes (2014): stop at the first look where ``|l_bar - mu_0| > c_t`` (empirical Bernstein,
    ``delta_k = (p-1) delta / (p k^p)``, ``C = max_i |l_i|``), or the Bernstein-Serfling width if ``finite_population``.

    ``mutation``: ``"barker"`` (threshold ``log(u/(1-u))``), ``"no_range"`` (drops the ``C`` term of ``c_t``).
    """
    n = r.shape[0]
    l = r[inputs.order]
    sizes = mhsublhd_stages(m, gamma, n)
    mean, var = _prefix_moments(l, sizes)
    u = inputs.uniforms[:, 0]
    log_u = np.log(u) - np.log1p(-u) if mutation == "barker" else np.log(u)
    mu0 = (log_u - psi) / n
    c = np.max(np.abs(r))
    k = np.arange(1, sizes.size + 1, dtype=np.float64)
    delta_k = (p - 1.0) * delta / (p * k**p)
    t = sizes.astype(np.float64)
    c_term = 0.0 if mutation == "no_range" else 1.0
    if finite_population:
        log_term = np.log(10.0 / delta_k)
        rho = np.where(t <= 0.5 * n, 1.0 - (t - 1.0) / n, (1.0 - t / n) * (1.0 + 1.0 / t))
        kappa = 7.0 / 3.0 + 3.0 / np.sqrt(2.0)
        width = np.sqrt(var) * np.sqrt(2.0 * rho * log_term / t) + c_term * kappa * 2.0 * c * log_term / t
    else:
        log_term = np.log(3.0 / delta_k)
        width = np.sqrt(var) * np.sqrt(2.0 * log_term / t) + c_term * 6.0 * c * log_term / t
    gap = np.abs(mean - mu0[:, None])
    done = (gap > width) | (sizes >= n)
    stop = np.argmax(done, axis=1)
    rows = np.arange(l.shape[0])
    tie = np.where((np.arange(sizes.size)[None, :] <= stop[:, None]) & (sizes < n), _rel(gap, width), np.inf).min(
        axis=1
    )
    l_bar = mean[rows, stop]
    scale = c + np.abs(mu0)
    margin = np.minimum(tie, np.abs(l_bar - mu0) / scale)
    return Reference(l_bar > mu0, sizes[stop], n * l_bar + psi, margin)


def naive_reference(r: np.ndarray, psi: float, inputs: Inputs, m: int, scale: float, mutation: str = "") -> Reference:
    """Plug-in Metropolis test on one minibatch: accept iff ``log u < scale * mean_batch(r) + psi``.

    ``scale = N / K`` for the naive test, ``n^lambda / K`` for MINT (Li and Wong). ``mutation="barker"`` uses
    ``log(u/(1-u))``.
    """
    l_bar = r[inputs.order[:, :m]].mean(axis=1)
    d_star = scale * l_bar + psi
    u = inputs.uniforms[:, 0]
    log_u = np.log(u) - np.log1p(-u) if mutation == "barker" else np.log(u)
    margin = np.abs(d_star - log_u) / (scale * np.max(np.abs(r)) + abs(psi) + np.abs(log_u))
    return Reference(log_u < d_star, np.full(l_bar.shape, m), d_star, margin)


def exact_reference(r: np.ndarray, psi: float, keys: jax.Array, rule: str, temperature: float = 1.0) -> Reference:
    """The full-data Metropolis (``log u < Delta``) or Barker (``Delta + X_log > 0``) decision on each key's draw."""
    n = r.shape[0]
    delta = float(np.sum(r) / temperature + psi)
    if rule == "metropolis":
        u = np.asarray(
            jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32, minval=jnp.finfo(jnp.float32).tiny))(keys),
            np.float64,
        )
        stat = delta - np.log(u)
    else:
        stat = delta + np.asarray(jax.vmap(lambda k: jax.random.logistic(k, (), jnp.float32))(keys), np.float64)
    scale = np.max(np.abs(r)) * n / temperature + abs(psi) + np.abs(stat - delta)
    return Reference(stat > 0, np.full(stat.shape, n), np.full(stat.shape, delta), np.abs(stat) / scale)


def ratio_population(
    kind: str, n: int, delta: float, sd_lambda: float, seed: int = 0, psi: float = 0.3
) -> tuple[np.ndarray, float]:
    """Per-datum log ratios (float32) of a given shape with full-data ``Delta`` and ``sd(N r_i) = sd_lambda``.

    ``kind``: ``normal``, ``exponential`` (skewness 2), ``lognormal`` (sigma 1: skewness 6.2), ``t3`` (Student-t,
    3 dof: infinite fourth moment), ``l1`` (the shape of the L1-regression example's per-datum terms
    ``lam x_i (theta' - theta) (y_i - x_i (theta + theta')/2)``, ``x ~ U(0, 1)``, ``y = 0.5 x + N(0, 1/3)``).
    """
    rng = np.random.default_rng(seed)
    if kind == "normal":
        z = rng.standard_normal(n)
    elif kind == "exponential":
        z = rng.exponential(size=n)
    elif kind == "lognormal":
        z = rng.lognormal(0.0, 1.0, n)
    elif kind == "t3":
        z = rng.standard_t(3, n)
    elif kind == "l1":
        x = rng.uniform(0.0, 1.0, n)
        y = 0.5 * x + rng.normal(0.0, np.sqrt(1.0 / 3.0), n)
        theta, theta_new = 0.45, 0.46
        z = 3.0 * x * (theta_new - theta) * (y - x * (theta + theta_new) / 2.0)
    else:
        raise ValueError(f"unknown population kind {kind!r}")
    z = (z - z.mean()) / z.std()
    r = z * sd_lambda / n + (delta - psi) / n
    return r.astype(np.float32), psi


def population_moments(r: np.ndarray) -> tuple[float, float, float]:
    """Standard deviation, standardised third absolute moment ``E|Z|^3`` and ``E|Z|`` of a finite population."""
    z = r - r.mean()
    sd = float(np.sqrt(np.mean(z * z)))
    return sd, float(np.mean(np.abs(z) ** 3)) / sd**3, float(np.mean(np.abs(z))) / sd
