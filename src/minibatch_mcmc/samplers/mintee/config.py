"""MINTEE's settings and its ladder: batch sizes ``m_k``, MINT temperatures ``T_k`` and energy levels ``H_k``.

Chain ``k = 0..K-1`` targets ``pi_k(theta) ∝ p0(theta) exp(-(h(theta) ∨ H_k) / T_k)`` with
``h(theta) = -sum_i log p(x_i|theta)``, estimated on ``m_k`` points (``m_k = floor(m_{K-1} gamma^(K-1-k))``),
and ``T_k = n^(1 - alpha tau_k) = n / m_k^alpha`` (MINT's implied temperature). See ``run.py`` for the sampler.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.mint import resolve_mint
from minibatch_mcmc.checks import check_choice, check_int, check_real
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models.base import Model

PyTree = Any

LAYOUTS = ("loop", "padded")
"""Allowed values of ``MINTEEConfig.layout``."""
EE_ENERGIES = ("paired", "cached")
"""Allowed values of ``MINTEEConfig.ee_energy``."""
MOVE_IDLE = 0
"""Per-sweep move code: the chain is idle (before its staggered start or after the last sweep)."""
MOVE_MH = 1
"""Per-sweep move code: a local Metropolis-Hastings move."""
MOVE_EE = 2
"""Per-sweep move code: an equi-energy jump proposal."""


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


def validate_config(config: MINTEEConfig) -> None:
    """Checks that do not depend on ``n``: ladder length, ratio, probabilities, band, sizes, layout."""
    k = check_int(config.num_chains, "num_chains K", 2)
    check_int(config.smallest_batch, "smallest_batch m_{K-1}", 2)
    check_real(config.gamma, "gamma", 1.0, low_open=True, why="batch sizes grow down the ladder: m_k = gamma m_(k+1)")
    check_real(
        config.alpha,
        "alpha",
        0.0,
        1.0,
        low_open=True,
        high_open=True,
        why="lambda = alpha tau < tau, distinct temperatures",
    )
    check_real(config.p_ee, "p_ee", 0.0, 1.0)
    check_real(config.energy_gap, "energy_gap c", 0.0, low_open=True)
    check_real(config.initial_step, "initial_step", 0.0, low_open=True)
    band = tuple(config.accept_band)
    if len(band) != 2 or not 0.0 < check_real(band[0], "accept_band[0]") < check_real(band[1], "accept_band[1]") < 1.0:
        raise ValueError(f"accept_band={config.accept_band!r} must be (low, high) with 0 < low < high < 1")
    check_int(config.adapt_window, "adapt_window", 1)
    check_int(config.burn_in, "burn_in", 0)
    check_int(config.ring_capacity, "ring_capacity", 1)
    check_int(config.stagger, "stagger", 0)
    check_choice(config.ee_energy, "ee_energy", EE_ENERGIES)
    check_choice(config.layout, "layout", LAYOUTS)
    if config.energy_levels is not None:
        levels = [check_real(v, "energy_levels[i]") for v in config.energy_levels]
        if len(levels) != k:
            raise ValueError(f"energy_levels has {len(levels)} values; expected K={k} (H_0 < ... < H_(K-1))")
        if any(b <= a for a, b in zip(levels, levels[1:])):
            raise ValueError(f"energy_levels={tuple(levels)} must be strictly increasing")
    elif config.h0 is None:
        raise ValueError("give the lowest energy level h0 (H_0 <= inf h, e.g. the energy at theta*) or energy_levels")
    else:
        check_real(config.h0, "h0")


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
