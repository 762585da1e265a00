"""MINTEE's states: the whole ladder (``MINTEEState``), one chain's slice and rings, the run's fixed context, the result."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from minibatch_mcmc.models.base import Model
from minibatch_mcmc.samplers.mintee.config import MOVE_EE, MOVE_MH, Ladder
from minibatch_mcmc.samplers.results import SampleResult

PyTree = Any


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


class Context(NamedTuple):
    """What every move of one run needs and that stays fixed over the run (Python values, static under jit)."""

    model: Model
    data: PyTree
    n: int
    """Number of data points."""
    unravel: Callable[[jax.Array], PyTree]
    """Flat position ``(d,)`` to the model's parameter pytree."""
    levels: jax.Array
    """Energy levels ``H_0 < ... < H_{K-1}`` (float32)."""
    ring_capacity: int
    p_ee: float
    accept_band: tuple[float, float]
    adapt_window: int
    burn_in: int
    total: int
    """Sweeps of the run; every chain idles from sweep ``total`` on."""
    paired: bool
    """EE energies of both states on the same minibatches (``ee_energy="paired"``)."""
    padded: bool
    """Minibatches padded to ``max_k m_k`` and masked (``layout="padded"``)."""


class Level(NamedTuple):
    """One chain's parameters (Python numbers in the loop layout, arrays in the padded one)."""

    m: Any
    temperature: Any
    level: Any
    m_up: Any
    temperature_up: Any
    level_up: Any
    has_upper: Any
    start: Any


class Buffers(NamedTuple):
    """Static minibatch buffer sizes of one chain's moves (padded layout: the ladder's largest)."""

    batch: int
    """Buffer of the local move's minibatches (``m_k``, or ``max m_k`` padded)."""
    extra: int
    """Buffer of an EE jump's further ``m_k - m_{k+1}`` points (0: same batch size above)."""
    full_cold: bool
    """A full-data chain below a minibatch chain (its EE energies are exact)."""
    upper: int
    """Buffer of the first ``m_{k+1}`` points of the upper chain's minibatch."""


class Chain(NamedTuple):
    """One chain's slice of ``MINTEEState`` (rings excluded)."""

    theta: jax.Array
    energy: jax.Array
    batch_keys: jax.Array
    log_step: jax.Array
    tries: jax.Array
    accepts: jax.Array


class Rings(NamedTuple):
    """One chain's energy rings ``(K, C, ...)``."""

    position: jax.Array
    energy: jax.Array
    keys: jax.Array
    count: jax.Array


def chain_of(state: MINTEEState, j: Any) -> Chain:
    """Chain ``j``'s slice of the ladder state."""
    return Chain(
        state.position[j], state.energy[j], state.batch_keys[j], state.log_step[j], state.tries[j], state.accepts[j]
    )


def rings_of(state: MINTEEState, j: Any) -> Rings:
    """Chain ``j``'s energy rings."""
    return Rings(state.ring_position[j], state.ring_energy[j], state.ring_keys[j], state.ring_count[j])


def put_chain(state: MINTEEState, j: int, ch: Chain, rings: Rings | None) -> MINTEEState:
    """The ladder state with chain ``j`` (and its rings, when given) replaced."""
    state = state._replace(
        position=state.position.at[j].set(ch.theta),
        energy=state.energy.at[j].set(ch.energy),
        batch_keys=state.batch_keys.at[j].set(ch.batch_keys),
        log_step=state.log_step.at[j].set(ch.log_step),
        tries=state.tries.at[j].set(ch.tries),
        accepts=state.accepts.at[j].set(ch.accepts),
    )
    if rings is not None:
        state = state._replace(
            ring_position=state.ring_position.at[j].set(rings.position),
            ring_energy=state.ring_energy.at[j].set(rings.energy),
            ring_keys=state.ring_keys.at[j].set(rings.keys),
            ring_count=state.ring_count.at[j].set(rings.count),
        )
    return state
