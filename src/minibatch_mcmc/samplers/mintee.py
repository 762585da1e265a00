"""MINTEE (Li and Wong, Section 5.2 and Appendix D, Algorithm 2): the equi-energy sampler on a ladder of MINT chains.

Chain ``k = 0..K-1`` targets the tempered, energy-truncated posterior

    pi_k(theta) ∝ p0(theta) exp(-(h(theta) ∨ H_k) / T_k),    h(theta) = -sum_i log p(x_i|theta),

(the prior is not tempered, the library's convention; the paper's flat prior makes this its
``exp(-(h ∨ H_k) / T_k)``). Chain ``k`` estimates energies on ``m_k`` points drawn without
replacement, ``h_k(theta) = -(n / m_k) sum_batch log p(x_i|theta)``, with the geometric batch ladder
``m_k = gamma m_{k+1}`` (``m_k = floor(m_{K-1} gamma^(K-1-k))``, which gives the paper's Table 3 sizes)
and MINT's implied temperatures ``T_k = n^(1 - alpha tau_k) = n / m_k^alpha``. With
``lowest_full_data`` chain 0 uses all ``n`` points at ``T_0 = 1`` (the paper's Table 3); with
``full_data`` every chain uses all ``n`` points: the plain (full-data) EE sampler with the same
temperatures and energy levels, the cost baseline of the paper's ``O(K^2 N n)`` vs ``O(N n)`` claim.

Each sweep updates the chains from the top (``K-1``) down, as in Algorithm 2. A chain either takes
a local MINT step (a Langevin proposal whose gradient and both energies use one fresh minibatch of
``m_k`` points, Metropolis-Hastings on the truncated tempered target) or, with probability ``p_ee``
when the energy ring of the chain above is non-empty, an equi-energy (EE) jump: a past state of
chain ``k+1`` drawn uniformly from the ring ``D_i^(k+1)`` that matches the current state's energy
ring ``i``, its energy refined with the ``m_k - m_{k+1}`` further points of the same without-replacement
permutation, accepted with ``pi_k(theta') pi_{k+1}(theta) / (pi_{k+1}(theta') pi_k(theta))``. By default
(``ee_energy="paired"``) the current state is evaluated on the same minibatches, so the ratio uses
same-minibatch energy differences as MINT's local step does; ``"cached"`` uses the current state's
cached estimate, as Algorithm 2 is written (its EE decisions are then dominated by minibatch noise).
After its burn-in each chain adds its state to its own energy ring every sweep. Rings are
fixed-capacity reservoirs (uniform samples of all the states ever added), so shapes are static and
the whole sweep is one jitted ``lax.scan`` body. Step sizes are adapted into an acceptance band
during each chain's burn-in only and frozen afterwards.

Two layouts run the ladder: ``"loop"`` (default) unrolls the levels in Python inside the jitted
sweep, each with its own static minibatch size, so a sweep evaluates ``sum_k m_k`` points; ``"padded"``
vmaps one level function over the ladder with every minibatch padded (and masked) to ``max_k m_k``,
so a sweep evaluates ``K max_k m_k`` points. ``benchmarks/mintee_cost.py`` measures both.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.acceptance.mint import resolve_mint
from minibatch_mcmc.data.arrays import DataSource, as_data_source, take
from minibatch_mcmc.data.indexing import permuted_index
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.langevin import langevin_log_q_ratio
from minibatch_mcmc.samplers.driver import as_key
from minibatch_mcmc.samplers.results import SampleResult

PyTree = Any

LAYOUTS = ("loop", "padded")
EE_ENERGIES = ("paired", "cached")
MOVE_IDLE, MOVE_MH, MOVE_EE = 0, 1, 2


class MINTEEConfig(NamedTuple):
    """Settings of a MINTEE run (defaults: the paper's Section 5.3 / Table 3 ladder)."""

    num_chains: int = 7
    """Number of chains ``K`` in the ladder (``>= 2``)."""
    smallest_batch: int = 1000
    """Minibatch size ``m_{K-1}`` of the hottest chain (``>= 2``)."""
    gamma: float = 1.4
    """Batch-size ratio ``m_k / m_{k+1} > 1``."""
    alpha: float = 0.995
    """MINT's ``lambda / tau`` in ``(0, 1)``: ``T_k = n^(1 - alpha tau_k)``."""
    lowest_full_data: bool = True
    """Chain 0 uses all ``n`` points at ``T_0 = 1`` (paper's Table 3); else MINT at ``m_0 = m_{K-1} gamma^(K-1)``."""
    full_data: bool = False
    """Every chain uses all ``n`` points (the full-data EE sampler on the same ladder)."""
    p_ee: float = 0.1
    """Probability of attempting an EE jump, in ``[0, 1]``."""
    energy_gap: float = 10.0
    """``c`` in ``H_{k+1} - H_k = c T_k`` when the levels are derived from ``h0``."""
    h0: float | None = None
    """Lowest energy level ``H_0`` (paper: the full-data energy at ``theta*``); used when ``energy_levels`` is None."""
    energy_levels: tuple[float, ...] | None = None
    """Explicit increasing levels ``H_0 < ... < H_{K-1}``, instead of ``h0`` and ``energy_gap``."""
    initial_step: float = 5e-4
    """``epsilon_0``: chain ``k`` starts with Langevin step ``alpha_k = epsilon_0^2 T_k`` (paper: ``5e-4``)."""
    accept_band: tuple[float, float] = (0.2, 0.5)
    """Target band of the local-move acceptance rate during burn-in."""
    adapt_window: int = 30
    """Local moves per adaptation window: outside the band the step is multiplied or divided by 1.3 (by 2 when far out)."""
    burn_in: int = 10_000
    """Sweeps ``B`` of each chain before it fills its energy rings (and its step size is frozen)."""
    ring_capacity: int = 2048
    """Reservoir size per energy ring."""
    stagger: int = 0
    """Sweeps between the starts of chains ``k+1`` and ``k`` (Algorithm 2: ``B + N``; 0: all start together)."""
    ee_energy: str = "paired"
    """``"paired"``: the EE ratio's energies of both states on the same minibatches; ``"cached"``: Algorithm 2 as written."""
    layout: str = "loop"
    """``"loop"`` (levels unrolled, exact batch sizes) or ``"padded"`` (vmapped, batches padded to ``max m_k``)."""


class Ladder(NamedTuple):
    """The resolved ladder: per-chain batch sizes, temperatures and energy levels (index 0 = coldest)."""

    batch_sizes: tuple[int, ...]
    """Points each chain's energy estimate uses (``n`` for full-data chains)."""
    temperatures: tuple[float, ...]
    energy_levels: tuple[float, ...]


class MINTEEState(NamedTuple):
    """All chains of the ladder (leading axis ``K``) and their energy rings (axes ``(K, K, C)``)."""

    position: jax.Array
    """Flattened positions ``(K, d)``."""
    energy: jax.Array
    """Cached energy estimate of each chain's current state ``(K,)``."""
    batch_keys: jax.Array
    """Permutation keys ``(K, 4)`` of the minibatch behind each cached energy."""
    log_step: jax.Array
    """Log Langevin step size per chain ``(K,)``."""
    tries: jax.Array
    """Local moves in the current adaptation window ``(K,)``."""
    accepts: jax.Array
    """Accepted local moves in the current adaptation window ``(K,)``."""
    ring_position: jax.Array
    """Ring states ``(K, K, C, d)``: chain, ring, slot."""
    ring_energy: jax.Array
    """Energy estimates of the ring states ``(K, K, C)``."""
    ring_keys: jax.Array
    """Permutation keys of the ring states' minibatches ``(K, K, C, 4)``."""
    ring_count: jax.Array
    """States ever added per ring ``(K, K)`` (the reservoir keeps ``min(count, C)``)."""


class MINTEEResult(NamedTuple):
    """Lowest-temperature draws as a ``SampleResult``, per-sweep records of every chain, and the ladder."""

    lowest: SampleResult
    """Chain 0 after its burn-in: ``positions`` ``(1, N, ...)``; records ``batch_size`` (chain 0's data that sweep),
    ``hidden_data`` (the other chains' data that sweep), ``accepted``, ``move``, ``ee_attempted``, ``ring_index``, ``energy``."""
    records: dict
    """Per chain and sweep ``(K, S)``: ``accepted``, ``move`` (0 idle, 1 local, 2 EE), ``data_used``, ``energy``,
    ``ring_index``, ``step_size``."""
    ladder: Ladder
    starts: tuple[int, ...]
    """First sweep of each chain."""
    burn_in: int
    ring_count: np.ndarray
    """States added to each ring over the run ``(K, K)``."""
    all_positions: PyTree | None
    """Every chain's positions ``(K, S, ...)`` when requested."""
    wall_time: float
    """Seconds spent sampling (compilation excluded)."""
    compile_time: float = 0.0
    """Seconds spent tracing and compiling the sweep."""

    def sampling_mask(self) -> np.ndarray:
        """``(K, S)``: True on the sweeps after each chain's burn-in (the ones that feed its rings)."""
        s = self.records["move"].shape[1]
        t = np.arange(s)[None, :]
        return t >= (np.asarray(self.starts)[:, None] + self.burn_in)

    def ring_occupancy(self) -> np.ndarray:
        """Fraction of each chain's post-burn-in states in each energy ring ``(K, K)`` (the paper's Table 3)."""
        mask = self.sampling_mask()
        k = self.records["ring_index"].shape[0]
        out = np.zeros((k, k))
        for c in range(k):
            idx = self.records["ring_index"][c][mask[c]]
            if idx.size:
                out[c] = np.bincount(idx, minlength=k)[:k] / idx.size
        return out

    def data_per_lowest_sample(self) -> float:
        """Data points evaluated by all chains (burn-in included) per post-burn-in draw of chain 0."""
        return float(np.sum(self.records["data_used"], dtype=np.float64)) / max(self.lowest.num_draws, 1)

    def seconds_per_lowest_sample(self) -> float:
        """Wall seconds (burn-in included, compilation excluded) per post-burn-in draw of chain 0."""
        return self.wall_time / max(self.lowest.num_draws, 1)

    def move_rates(self) -> dict:
        """Per chain: local acceptance rate, EE attempt rate and EE acceptance rate over the post-burn-in sweeps."""
        mask = self.sampling_mask()
        mv, acc = self.records["move"], self.records["accepted"]
        out = {"local_accept": [], "ee_attempt": [], "ee_accept": []}
        for c in range(mv.shape[0]):
            m, a = mv[c][mask[c]], acc[c][mask[c]]
            local, ee = m == MOVE_MH, m == MOVE_EE
            out["local_accept"].append(float(a[local].mean()) if local.any() else float("nan"))
            out["ee_attempt"].append(float(ee.mean()) if m.size else float("nan"))
            out["ee_accept"].append(float(a[ee].mean()) if ee.any() else float("nan"))
        return out


def _int(value: Any, name: str, low: int) -> int:
    """An integer ``>= low`` or a ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}={value!r} must be an integer >= {low}")
    return int(value)


def _real(value: Any, name: str) -> float:
    """A finite real number or a ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number")
    return float(value)


def validate_config(config: MINTEEConfig) -> None:
    """Checks that do not depend on ``n``: ladder length, ratio, probabilities, band, sizes, layout."""
    k = _int(config.num_chains, "num_chains K", 2)
    _int(config.smallest_batch, "smallest_batch m_{K-1}", 2)
    if _real(config.gamma, "gamma") <= 1.0:
        raise ValueError(f"gamma={config.gamma!r} must be > 1 (batch sizes grow down the ladder: m_k = gamma m_(k+1))")
    if not 0.0 < _real(config.alpha, "alpha") < 1.0:
        raise ValueError(f"alpha={config.alpha!r} must lie in (0, 1) (lambda = alpha tau < tau, distinct temperatures)")
    if not 0.0 <= _real(config.p_ee, "p_ee") <= 1.0:
        raise ValueError(f"p_ee={config.p_ee!r} must lie in [0, 1]")
    if _real(config.energy_gap, "energy_gap c") <= 0:
        raise ValueError(f"energy_gap c={config.energy_gap!r} must be > 0")
    if _real(config.initial_step, "initial_step") <= 0:
        raise ValueError(f"initial_step={config.initial_step!r} must be > 0")
    band = tuple(config.accept_band)
    if len(band) != 2 or not 0.0 < _real(band[0], "accept_band[0]") < _real(band[1], "accept_band[1]") < 1.0:
        raise ValueError(f"accept_band={config.accept_band!r} must be (low, high) with 0 < low < high < 1")
    _int(config.adapt_window, "adapt_window", 1)
    _int(config.burn_in, "burn_in", 0)
    _int(config.ring_capacity, "ring_capacity", 1)
    _int(config.stagger, "stagger", 0)
    if config.ee_energy not in EE_ENERGIES:
        raise ValueError(f"ee_energy={config.ee_energy!r}; expected one of {EE_ENERGIES}")
    if config.layout not in LAYOUTS:
        raise ValueError(f"layout={config.layout!r}; expected one of {LAYOUTS}")
    if config.energy_levels is not None:
        levels = [_real(v, "energy_levels[i]") for v in config.energy_levels]
        if len(levels) != k:
            raise ValueError(f"energy_levels has {len(levels)} values; expected K={k} (H_0 < ... < H_(K-1))")
        if any(b <= a for a, b in zip(levels, levels[1:])):
            raise ValueError(f"energy_levels={tuple(levels)} must be strictly increasing")
    elif config.h0 is None:
        raise ValueError("give the lowest energy level h0 (H_0 <= inf h, e.g. the energy at theta*) or energy_levels")
    else:
        _real(config.h0, "h0")


def ladder_batch_sizes(n_data: int, config: MINTEEConfig) -> tuple[int, ...]:
    """MINT batch sizes ``m_k = floor(m_{K-1} gamma^(K-1-k))`` (chain 0: ``n`` with ``lowest_full_data``)."""
    validate_config(config)
    k = config.num_chains
    m = [int(config.smallest_batch * config.gamma ** (k - 1 - j)) for j in range(k)]
    if config.lowest_full_data:
        m[0] = n_data
    for j in range(k - 1):
        if m[j] <= m[j + 1]:
            raise ValueError(
                f"batch sizes {m} are not strictly decreasing up the ladder at chains {j}, {j + 1}: "
                f"raise gamma={config.gamma} or smallest_batch={config.smallest_batch}"
            )
    if max(m) > n_data:
        raise ValueError(
            f"the ladder needs batches up to m_0={max(m)} > n={n_data}: lower num_chains, gamma or smallest_batch"
        )
    return tuple(m)


def resolve_ladder(n_data: int, config: MINTEEConfig) -> Ladder:
    """Batch sizes, MINT temperatures ``T_k = n / m_k^alpha`` and energy levels ``H_{k+1} = H_k + c T_k``."""
    m = ladder_batch_sizes(n_data, config)
    temps = []
    for j, mj in enumerate(m):
        full_cold = j == 0 and config.lowest_full_data
        temps.append(1.0 if full_cold else resolve_mint(n_data, batch_size=mj, alpha=config.alpha).temperature)
    if config.energy_levels is not None:
        levels = tuple(float(v) for v in config.energy_levels)
    else:
        levels = energy_levels_from(config.h0, temps, config.energy_gap)
    sizes = tuple(n_data for _ in m) if config.full_data else m
    return Ladder(batch_sizes=sizes, temperatures=tuple(temps), energy_levels=levels)


def energy_ring_index(energy: jax.Array, levels: jax.Array) -> jax.Array:
    """Ring ``I = j`` with ``H_j <= h < H_{j+1}`` (``h < H_1`` is ring 0, ``h >= H_{K-1}`` ring ``K-1``)."""
    return jnp.sum(energy >= levels[1:]).astype(jnp.int32)


class _Level(NamedTuple):
    """One chain's parameters (Python numbers in the loop layout, arrays in the padded one)."""

    m: Any
    temperature: Any
    level: Any
    m_up: Any
    temperature_up: Any
    level_up: Any
    has_upper: Any
    start: Any


class _Chain(NamedTuple):
    """One chain's slice of ``MINTEEState`` (ring excluded)."""

    theta: jax.Array
    energy: jax.Array
    batch_keys: jax.Array
    log_step: jax.Array
    tries: jax.Array
    accepts: jax.Array


class _Ring(NamedTuple):
    """One chain's energy rings ``(K, C, ...)``."""

    position: jax.Array
    energy: jax.Array
    keys: jax.Array
    count: jax.Array


def _make_sweep(
    model: Model, data: PyTree, n: int, ladder: Ladder, config: MINTEEConfig, unravel: Callable, d: int, total: int
):
    """Build ``init(key, theta0) -> MINTEEState`` and ``sweep(state, key, t) -> (state, records)`` (idle from sweep ``total``)."""
    k_chains = config.num_chains
    cap = config.ring_capacity
    lo, hi = (float(v) for v in config.accept_band)
    window = int(config.adapt_window)
    burn = int(config.burn_in)
    p_ee = float(config.p_ee)
    levels = jnp.asarray(ladder.energy_levels, jnp.float32)
    m_all = ladder.batch_sizes
    padded = config.layout == "padded"
    paired = config.ee_energy == "paired"
    m_max = max(m_all)
    extra_max = max([m_all[j] - m_all[j + 1] for j in range(k_chains - 1)] + [1])

    def theta_tree(flat: jax.Array) -> PyTree:
        return unravel(flat)

    def log_prior(flat: jax.Array) -> jax.Array:
        return jnp.asarray(model.log_prior(theta_tree(flat)), jnp.float32)

    grad_prior = jax.grad(log_prior)

    def batch_loglik(flat: jax.Array, keys: jax.Array, start: Any, count: Any, buf: int) -> jax.Array:
        """Sum of ``log p(x_i|theta)`` over positions ``start..start+count-1`` of the keyed permutation."""
        if buf >= n and not padded:
            return jnp.sum(model.log_lik(theta_tree(flat), data))  # all n points: no gather needed
        pos = jnp.arange(buf, dtype=jnp.int32)
        valid = pos < count
        idx = permuted_index(None, jnp.where(valid, start + pos, 0), n, keys)
        ll = model.log_lik(theta_tree(flat), take(data, idx))
        return jnp.sum(jnp.where(valid, ll, 0.0))

    def local_move(key: jax.Array, lv: _Level, ch: _Chain, buf: int):
        """MINT step: Langevin proposal, gradient and both energies on one fresh minibatch, MH on pi_k."""
        k_b, k_z, k_u = jax.random.split(key, 3)
        keys = jax.random.bits(k_b, (4,), jnp.uint32)
        vg = jax.value_and_grad(lambda th: batch_loglik(th, keys, 0, lv.m, buf))
        scale = n / jnp.asarray(lv.m, jnp.float32)
        step = jnp.exp(ch.log_step)
        s0, g0 = vg(ch.theta)
        grad0 = grad_prior(ch.theta) + (scale / lv.temperature) * g0
        prop = ch.theta + 0.5 * step * grad0 + jnp.sqrt(step) * jax.random.normal(k_z, (d,), jnp.float32)
        s1, g1 = vg(prop)
        grad1 = grad_prior(prop) + (scale / lv.temperature) * g1
        h0, h1 = -scale * s0, -scale * s1
        lp0, lp1 = log_prior(ch.theta), log_prior(prop)
        log_r = (
            lp1 - lp0 + langevin_log_q_ratio(ch.theta, prop, grad0, grad1, step)
            - (jnp.maximum(h1, lv.level) - jnp.maximum(h0, lv.level)) / lv.temperature
        )
        u = jax.random.uniform(k_u, (), jnp.float32, minval=1e-12)
        acc = (jnp.log(u) < log_r) & jnp.isfinite(log_r) & (lp1 > -jnp.inf)
        new = _Chain(jnp.where(acc, prop, ch.theta), jnp.where(acc, h1, h0), keys, ch.log_step, ch.tries, ch.accepts)
        return new, acc, jnp.asarray(lv.m, jnp.int32)

    def ee_jump(key: jax.Array, lv: _Level, ch: _Chain, upper: _Ring, ring: jax.Array, statics: tuple):
        """EE jump: a uniform state of the upper chain's matching ring, energy refined to ``m_k`` points.

        ``paired``: the current state is evaluated on the same ``m_k`` points (and the same first
        ``m_{k+1}``), so both energy differences in the ratio are same-minibatch differences, as in
        MINT's local step; otherwise the current state's cached estimate is used (Algorithm 2 as written).
        """
        _, extra_buf, full_cold, up_buf = statics
        k_j, k_u = jax.random.split(key)
        filled = jnp.clip(jnp.minimum(upper.count[ring], cap), 1, cap)
        j = jax.random.randint(k_j, (), 0, filled)
        theta_p, h_up, keys_p = upper.position[ring, j], upper.energy[ring, j], upper.keys[ring, j]
        e_k = e_up = ch.energy
        m_k = jnp.asarray(lv.m, jnp.float32)
        m_up = jnp.asarray(lv.m_up, jnp.float32)
        if full_cold:  # chain 0 on all n points: the refined energy is the full-data energy (the cached one is exact)
            h_k = -batch_loglik(theta_p, keys_p, 0, n, n)
            used = jnp.asarray(n, jnp.int32)
            if paired:
                e_up = -(n / m_up) * batch_loglik(ch.theta, keys_p, 0, lv.m_up, up_buf)
                used = used + jnp.asarray(lv.m_up, jnp.int32)
        elif extra_buf == 0:  # same batch size above and here (full-data EE): energies are exact already
            h_k, used = h_up, jnp.zeros((), jnp.int32)
        else:
            s_up = -h_up * m_up / n
            s_extra = batch_loglik(theta_p, keys_p, lv.m_up, lv.m - lv.m_up, extra_buf)
            h_k = -(n / m_k) * (s_up + s_extra)
            used = jnp.asarray(lv.m - lv.m_up, jnp.int32)
            if paired:
                c_up = batch_loglik(ch.theta, keys_p, 0, lv.m_up, up_buf)
                c_extra = batch_loglik(ch.theta, keys_p, lv.m_up, lv.m - lv.m_up, extra_buf)
                e_k, e_up = -(n / m_k) * (c_up + c_extra), -(n / m_up) * c_up
                used = used + jnp.asarray(lv.m, jnp.int32)
        log_r = (
            -(jnp.maximum(h_k, lv.level) - jnp.maximum(e_k, lv.level)) / lv.temperature
            + (jnp.maximum(h_up, lv.level_up) - jnp.maximum(e_up, lv.level_up)) / lv.temperature_up
        )
        u = jax.random.uniform(k_u, (), jnp.float32, minval=1e-12)
        acc = (jnp.log(u) < log_r) & jnp.isfinite(log_r)
        fresh = paired and not full_cold and extra_buf != 0  # the current state's energy was re-estimated on keys_p
        new = ch._replace(
            theta=jnp.where(acc, theta_p, ch.theta),
            energy=jnp.where(acc, h_k, e_k),
            batch_keys=keys_p if fresh else jnp.where(acc, keys_p, ch.batch_keys),
        )
        return new, acc, used

    def adapt(ch: _Chain, acc: jax.Array, local: jax.Array, adapting: jax.Array) -> _Chain:
        """Count local moves during burn-in; after each window move the step towards the acceptance band."""
        count = local & adapting
        tries = ch.tries + count.astype(jnp.int32)
        accepts = ch.accepts + (count & acc).astype(jnp.int32)
        full = tries >= window
        rate = accepts / jnp.maximum(tries, 1)
        up = jnp.where(rate > 0.5 * (1.0 + hi), math.log(2.0), math.log(1.3))
        down = jnp.where(rate < 0.5 * lo, -math.log(2.0), -math.log(1.3))
        delta = jnp.where(rate < lo, down, jnp.where(rate > hi, up, 0.0))
        return ch._replace(
            log_step=jnp.where(full, ch.log_step + delta, ch.log_step),
            tries=jnp.where(full, 0, tries),
            accepts=jnp.where(full, 0, accepts),
        )

    def level_step(key: jax.Array, t: jax.Array, lv: _Level, ch: _Chain, upper: _Ring | None, statics: tuple):
        """One sweep of one chain: idle before its start, else an EE jump or a local move, then adaptation."""
        buf = statics[0]
        k_c, k_mh, k_ee = jax.random.split(key, 3)
        age = t - lv.start
        active = (age >= 0) & (t < total)
        ring = energy_ring_index(ch.energy, levels)
        if upper is None:
            do_ee = jnp.zeros((), bool)
        else:
            avail = upper.count[ring] > 0
            do_ee = lv.has_upper & avail & (jax.random.uniform(k_c, ()) < p_ee)
        mode = jnp.where(active, jnp.where(do_ee, MOVE_EE, MOVE_MH), MOVE_IDLE).astype(jnp.int32)

        def idle(_):
            return ch, jnp.zeros((), bool), jnp.zeros((), jnp.int32)

        def local(_):
            return local_move(k_mh, lv, ch, buf)

        branches = [idle, local]
        if upper is not None:
            branches.append(lambda _: ee_jump(k_ee, lv, ch, upper, ring, statics))
        new, acc, used = jax.lax.switch(jnp.minimum(mode, len(branches) - 1), branches, None)
        new = adapt(new, acc, mode == MOVE_MH, age < burn)
        record = {
            "accepted": acc,
            "move": mode.astype(jnp.int8),
            "data_used": used,
            "energy": new.energy,
            "ring_index": energy_ring_index(new.energy, levels).astype(jnp.int8),
            "step_size": jnp.exp(new.log_step),
        }
        return new, record, active & (age >= burn)

    def ring_insert(key: jax.Array, ring: _Ring, ch: _Chain, add: jax.Array) -> _Ring:
        """Reservoir-insert the chain's current state into its ring ``I(h)`` (kept uniform over all added)."""
        i = energy_ring_index(ch.energy, levels)
        cnt = ring.count[i]
        r = jax.random.randint(key, (), 0, jnp.maximum(cnt, 0) + 1)
        slot = jnp.where(cnt < cap, cnt, r)
        write = add & (slot < cap)
        slot = jnp.minimum(slot, cap - 1)
        return _Ring(
            position=ring.position.at[i, slot].set(jnp.where(write, ch.theta, ring.position[i, slot])),
            energy=ring.energy.at[i, slot].set(jnp.where(write, ch.energy, ring.energy[i, slot])),
            keys=ring.keys.at[i, slot].set(jnp.where(write, ch.batch_keys, ring.keys[i, slot])),
            count=ring.count.at[i].add(add.astype(jnp.int32)),
        )

    starts = [(k_chains - 1 - j) * int(config.stagger) for j in range(k_chains)]

    def level_params(j: int) -> _Level:
        up = j + 1 < k_chains
        return _Level(
            m=m_all[j],
            temperature=float(ladder.temperatures[j]),
            level=float(ladder.energy_levels[j]),
            m_up=m_all[j + 1] if up else m_all[j],
            temperature_up=float(ladder.temperatures[j + 1]) if up else 1.0,
            level_up=float(ladder.energy_levels[j + 1]) if up else 0.0,
            has_upper=up,
            start=starts[j],
        )

    def chain_of(state: MINTEEState, j: Any) -> _Chain:
        return _Chain(state.position[j], state.energy[j], state.batch_keys[j], state.log_step[j], state.tries[j], state.accepts[j])

    def ring_of(state: MINTEEState, j: Any) -> _Ring:
        return _Ring(state.ring_position[j], state.ring_energy[j], state.ring_keys[j], state.ring_count[j])

    def put(state: MINTEEState, j: int, ch: _Chain, ring: _Ring | None) -> MINTEEState:
        state = state._replace(
            position=state.position.at[j].set(ch.theta),
            energy=state.energy.at[j].set(ch.energy),
            batch_keys=state.batch_keys.at[j].set(ch.batch_keys),
            log_step=state.log_step.at[j].set(ch.log_step),
            tries=state.tries.at[j].set(ch.tries),
            accepts=state.accepts.at[j].set(ch.accepts),
        )
        if ring is not None:
            state = state._replace(
                ring_position=state.ring_position.at[j].set(ring.position),
                ring_energy=state.ring_energy.at[j].set(ring.energy),
                ring_keys=state.ring_keys.at[j].set(ring.keys),
                ring_count=state.ring_count.at[j].set(ring.count),
            )
        return state

    def sweep_loop(state: MINTEEState, key: jax.Array, t: jax.Array):
        keys = jax.random.split(key, 2 * k_chains)
        recs = [None] * k_chains
        for j in reversed(range(k_chains)):  # Algorithm 2: from the hottest chain down
            lv = level_params(j)
            up = j + 1 < k_chains
            full_cold = m_all[j] >= n and (j + 1 >= k_chains or m_all[j + 1] < n)
            statics = (m_all[j], (m_all[j] - m_all[j + 1]) if up else 0, full_cold, m_all[j + 1] if up else 0)
            upper = ring_of(state, j + 1) if up else None
            ch, recs[j], add = level_step(keys[2 * j], t, lv, chain_of(state, j), upper, statics)
            ring = ring_insert(keys[2 * j + 1], ring_of(state, j), ch, add) if j > 0 else None
            state = put(state, j, ch, ring)
        records = {f: jnp.stack([r[f] for r in recs]) for f in recs[0]}
        return state, records

    params = [level_params(j) for j in range(k_chains)]
    stacked = _Level(*(jnp.asarray([getattr(p, f) for p in params]) for f in _Level._fields))
    stacked = stacked._replace(
        temperature=stacked.temperature.astype(jnp.float32),
        level=stacked.level.astype(jnp.float32),
        temperature_up=stacked.temperature_up.astype(jnp.float32),
        level_up=stacked.level_up.astype(jnp.float32),
    )

    def sweep_padded(state: MINTEEState, key: jax.Array, t: jax.Array):
        keys = jax.random.split(key, 2 * k_chains).reshape(k_chains, 2)
        shift = jnp.minimum(jnp.arange(k_chains) + 1, k_chains - 1)
        uppers = _Ring(state.ring_position[shift], state.ring_energy[shift], state.ring_keys[shift], state.ring_count[shift])
        chains = _Chain(state.position, state.energy, state.batch_keys, state.log_step, state.tries, state.accepts)
        statics = (m_max, extra_max, False, m_max)
        step = jax.vmap(lambda k, lv, ch, up: level_step(k, t, lv, ch, up, statics))
        chs, records, add = step(keys[:, 0], stacked, chains, uppers)
        rings = jax.vmap(ring_insert)(keys[:, 1], ring_of(state, slice(None)), chs, add)
        state = MINTEEState(chs.theta, chs.energy, chs.batch_keys, chs.log_step, chs.tries, chs.accepts, *rings)
        return state, records

    def init(key: jax.Array, theta0: jax.Array) -> MINTEEState:
        energies, bkeys = [], []
        for j in range(k_chains):
            kj = jax.random.bits(jax.random.fold_in(key, j), (4,), jnp.uint32)
            energies.append(-(n / m_all[j]) * batch_loglik(theta0, kj, 0, m_all[j], m_all[j] if not padded else m_max))
            bkeys.append(kj)
        temps = jnp.asarray(ladder.temperatures, jnp.float32)
        return MINTEEState(
            position=jnp.broadcast_to(theta0, (k_chains, d)),
            energy=jnp.stack(energies).astype(jnp.float32),
            batch_keys=jnp.stack(bkeys),
            log_step=jnp.log(jnp.float32(config.initial_step) ** 2 * temps),
            tries=jnp.zeros(k_chains, jnp.int32),
            accepts=jnp.zeros(k_chains, jnp.int32),
            ring_position=jnp.zeros((k_chains, k_chains, cap, d), jnp.float32),
            ring_energy=jnp.zeros((k_chains, k_chains, cap), jnp.float32),
            ring_keys=jnp.zeros((k_chains, k_chains, cap, 4), jnp.uint32),
            ring_count=jnp.zeros((k_chains, k_chains), jnp.int32),
        )

    return init, (sweep_padded if padded else sweep_loop), starts


def mintee(
    model: Model,
    data: PyTree | DataSource,
    initial_position: PyTree,
    config: MINTEEConfig,
    *,
    num_samples: int,
    key: int | jax.Array = 0,
    block_size: int = 2000,
    keep_all_chains: bool = False,
    progress: bool = False,
) -> MINTEEResult:
    """Run MINTEE until chain 0 has ``num_samples`` post-burn-in draws; returns draws, records and the ladder."""
    num_samples = _int(num_samples, "num_samples", 1)
    block_size = _int(block_size, "block_size", 1)
    source = as_data_source(data)
    n = source.n
    arrays = source.arrays()
    ladder = resolve_ladder(n, config)
    flat0, unravel = ravel_pytree(initial_position)
    flat0 = jnp.asarray(flat0, jnp.float32)
    d = int(flat0.size)
    if not np.isfinite(float(model.log_prior(unravel(flat0)))):
        raise ValueError("the initial position has log prior -inf or nan; start inside the prior's support")
    total = (config.num_chains - 1) * config.stagger + config.burn_in + num_samples
    init, sweep, starts = _make_sweep(model, arrays, n, ladder, config, unravel, d, total)
    base = as_key(key)
    k_init, k_run = jax.random.split(base)
    n_blocks = -(-total // block_size)
    length = -(-total // n_blocks)

    @jax.jit
    def run_block(state: MINTEEState, t0: jax.Array):
        def body(st, t):
            st, rec = sweep(st, jax.random.fold_in(k_run, t), t)
            out = {"records": rec, "lowest": st.position[0]}
            if keep_all_chains:
                out["all"] = st.position
            return st, out

        return jax.lax.scan(body, state, t0 + jnp.arange(length, dtype=jnp.int32))

    t_compile = time.perf_counter()
    state = jax.jit(init)(k_init, flat0)
    compiled = run_block.lower(state, jnp.int32(0)).compile()
    compile_time = time.perf_counter() - t_compile
    t_start = time.perf_counter()
    outs = []
    for b in range(n_blocks):
        state, out = compiled(state, jnp.int32(b * length))
        outs.append(jax.device_get(out))
        if progress:
            print(f"mintee: sweep {min((b + 1) * length, total)}/{total} at {time.perf_counter() - t_start:.1f} s", flush=True)
    wall = time.perf_counter() - t_start
    cat = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, axis=0)[:total], *outs)
    records = {f: np.asarray(v).T for f, v in cat["records"].items()}
    first = starts[0] + config.burn_in
    lowest_flat = cat["lowest"][first:]
    positions = jax.vmap(unravel)(jnp.asarray(lowest_flat))
    positions = jax.tree_util.tree_map(lambda a: np.asarray(a)[None], positions)
    sweep_data = records["data_used"].sum(axis=0)[first:]
    lowest_records = {
        "accepted": records["accepted"][0, first:][None],
        "batch_size": records["data_used"][0, first:][None].astype(np.int32),
        "hidden_data": (sweep_data - records["data_used"][0, first:])[None].astype(np.int32),
        "s2": np.zeros((1, num_samples), np.float32),
        "epsilon": np.zeros((1, num_samples), np.float32),
        "delta_star": np.full((1, num_samples), np.nan, np.float32),
        "move": records["move"][0, first:][None],
        "ee_attempted": (records["move"][0, first:] == MOVE_EE)[None],
        "ring_index": records["ring_index"][0, first:][None],
        "energy": records["energy"][0, first:][None],
    }
    lowest = SampleResult(
        positions=positions,
        records=lowest_records,
        method="mintee" if not config.full_data else "ee_full_data",
        n_data=n,
        temperature=np.full(num_samples, ladder.temperatures[0]),
        wall_time=wall + compile_time,
    )
    all_positions = None
    if keep_all_chains:
        flat_all = np.swapaxes(cat["all"], 0, 1)
        all_positions = jax.tree_util.tree_map(
            np.asarray, jax.vmap(jax.vmap(unravel))(jnp.asarray(flat_all))
        )
    return MINTEEResult(
        lowest=lowest,
        records=records,
        ladder=ladder,
        starts=tuple(starts),
        burn_in=int(config.burn_in),
        ring_count=np.asarray(state.ring_count),
        all_positions=all_positions,
        wall_time=wall,
        compile_time=compile_time,
    )


def full_data_energy(model: Model, data: PyTree, theta: PyTree) -> float:
    """``h(theta) = -sum_i log p(x_i|theta)`` on all the data (e.g. the paper's ``H_0`` at ``theta*``)."""
    arrays = as_data_source(data).arrays()
    return -float(np.sum(np.asarray(model.log_lik(theta, arrays), np.float64)))


def energy_levels_from(h0: float, temperatures: Sequence[float], gap: float) -> tuple[float, ...]:
    """``H_0 = h0`` and ``H_{k+1} = H_k + c T_k`` (Kou, Zhou and Wong's rule, as in the paper's D.2)."""
    out = [float(h0)]
    for t in list(temperatures)[:-1]:
        out.append(out[-1] + float(gap) * float(t))
    return tuple(out)
