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
a local MINT step (``moves.local_move``: the library's MH kernel with a Langevin proposal on a
minibatch gradient and MINT's test on ``m_k`` points, on the truncated tempered target) or, with
probability ``p_ee`` when the energy ring of the chain above is non-empty, an equi-energy (EE) jump:
a past state of chain ``k+1`` drawn uniformly from the ring ``D_i^(k+1)`` that matches the current
state's energy ring ``i``, its energy refined with the ``m_k - m_{k+1}`` further points of the same
without-replacement permutation, accepted with ``pi_k(theta') pi_{k+1}(theta) / (pi_{k+1}(theta') pi_k(theta))``.
By default (``ee_energy="paired"``) the current state is evaluated on the same minibatches, so the
ratio uses same-minibatch energy differences as MINT's local step does; ``"cached"`` uses the current
state's cached estimate, as Algorithm 2 is written (its EE decisions are then dominated by minibatch
noise). After its burn-in each chain adds its state to its own energy ring every sweep. Rings are
fixed-capacity reservoirs (uniform samples of all the states ever added), so shapes are static and
the whole sweep is one jitted ``lax.scan`` body. Step sizes are adapted into an acceptance band
during each chain's burn-in only and frozen afterwards.

Modules: ``config`` (settings, ladder), ``state`` (NamedTuple states, result), ``moves`` (local move,
EE jump, adaptation, ring insertion), ``sweep`` (the two layouts), ``run`` (the ``mintee`` driver).
``benchmarks/mintee_cost.py`` measures the layouts' costs.
"""

from minibatch_mcmc.samplers.mintee.config import (
    EE_ENERGIES,
    LAYOUTS,
    MOVE_EE,
    MOVE_IDLE,
    MOVE_MH,
    Ladder,
    MINTEEConfig,
    energy_levels_from,
    energy_ring_index,
    full_data_energy,
    ladder_batch_sizes,
    resolve_ladder,
    validate_config,
)
from minibatch_mcmc.samplers.mintee.run import mintee
from minibatch_mcmc.samplers.mintee.state import MINTEEResult, MINTEEState

__all__ = [
    "EE_ENERGIES",
    "LAYOUTS",
    "MOVE_EE",
    "MOVE_IDLE",
    "MOVE_MH",
    "Ladder",
    "MINTEEConfig",
    "MINTEEResult",
    "MINTEEState",
    "energy_levels_from",
    "energy_ring_index",
    "full_data_energy",
    "ladder_batch_sizes",
    "mintee",
    "resolve_ladder",
    "validate_config",
]
