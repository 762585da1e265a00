"""The warm-up's proposals on the Laplace fit and the proxy, one table: ``proposal_for(kind, ...)`` gives ``scale -> Proposal``.

``KINDS`` declares each kind as data: its builder, the move whose scale the warm-up tunes (none for the global moves,
whose settings come from the Laplace fit), its target-acceptance key and first scale. The kinds are those of
``warmup.PROPOSALS`` other than ``auto``: the scale-tuned proxy-gradient MALA and Laplace-shaped random walk, the
untuned global moves of ``proxy_moves`` and their mixture with a random walk. An unknown kind is an error naming them.
``default_kind`` is the rule that picks one when the user names none, from what the warm-up found.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.checks import check_choice
from minibatch_mcmc.control_variates.base import Proxy
from minibatch_mcmc.control_variates.proposals import proxy_langevin
from minibatch_mcmc.control_variates.proxy_moves import proxy_hmc, proxy_independence
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.proposals.mixture import component_chooser, mixture
from minibatch_mcmc.proposals.scaled import scaled_random_walk

DEFAULT_PROPOSAL = "proxy_hmc"
"""The kind ``default_kind`` picks when the warm-up saw nothing the Laplace fit misses: leapfrog on the data-free proxy
posterior, untuned (its step from the Laplace fit); with a Metropolis-type test its acceptance tends to 1 as ``N`` grows."""
GUARDED_PROPOSAL = "mixture"
"""The kind ``default_kind`` picks when the warm-up saw that the Laplace fit may describe the posterior poorly: proxy HMC,
or with probability ``LOCAL_WEIGHT`` a tuned random walk, which moves where the proxy is wrong."""
T_DF = 5.0
"""Degrees of freedom of the t independence proposal."""
LOCAL_WEIGHT = 0.2
"""Probability of the random-walk move in ``proposal="mixture"`` (so a chain far from the proxy's centre moves)."""
HMC_STEPS = 4
"""Leapfrog steps of the warm-up's proxy HMC."""
GLMM_HMC_STEPS = 64
"""Leapfrog steps of proxy HMC on a GLMM (``Model.glmm``): its proxy posterior keeps the curved ridge of ``u = sd a``,
which 4 Laplace-whitened steps cannot follow (issue 31's shape, 2e4 rows non-centred: 27 of 60 trajectories diverged,
exact acceptance 0.0001; 16 steps 17 and 0.29; 64 steps none and 0.92). Each step reads no data: ``O(G k p)``."""
HMC_LENGTH = {"metropolis": 0.5 * math.pi, "barker": 0.75 * math.pi}
"""Trajectory length in whitened units: a quarter period on a Gaussian (an independent draw) under Metropolis, where
nearly every move is accepted; longer under Barker, which keeps about half: accepted moves are then anti-correlated
with the current point, and the chain's lag-1 autocorrelation ``(1 + cos T) / 2`` drops (0.15 at ``T = 3 pi / 4``)."""
MoveBuilder = Callable[[Proxy, Model, np.ndarray, float, str], Callable[[Any], Proposal]]
"""``(proxy, model, chol, temperature, rule) -> (scale -> Proposal)``."""


def random_walk_move(
    proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str
) -> Callable[[Any], Proposal]:
    """``scale -> `` the random walk shaped by the Laplace covariance ``chol chol'``."""
    return lambda scale: scaled_random_walk(jnp.asarray(chol, jnp.float32), scale)


def langevin_move(
    proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str
) -> Callable[[Any], Proposal]:
    """``scale -> `` the proxy-gradient MALA preconditioned by the Laplace covariance, ``scale`` its step size."""
    cov = chol @ chol.T
    return lambda scale: proxy_langevin(proxy, model.log_prior, scale, cov=cov, temperature=temperature)


def independence_move(df: float | None) -> MoveBuilder:
    """The builder of the independence proposal from the proxy posterior's Laplace fit (Gaussian, or t with ``df``)."""

    def build(proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str) -> Callable[[Any], Proposal]:
        fixed = proxy_independence(proxy, model.log_prior, df=df, temperature=temperature)
        return lambda scale: fixed

    return build


def hmc(proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str) -> Proposal:
    """Proxy HMC: ``HMC_STEPS`` (a GLMM: ``GLMM_HMC_STEPS``) leapfrog steps over ``HMC_LENGTH[rule]`` on the proxy posterior, Laplace-preconditioned."""
    steps = HMC_STEPS if model.glmm is None else GLMM_HMC_STEPS
    return proxy_hmc(
        proxy, model.log_prior, HMC_LENGTH[rule] / steps, steps, cov=chol @ chol.T, temperature=temperature
    )


def hmc_move(proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str) -> Callable[[Any], Proposal]:
    """``scale -> `` proxy HMC (``scale`` ignored)."""
    fixed = hmc(proxy, model, chol, temperature, rule)
    return lambda scale: fixed


def mixture_move(
    proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str
) -> Callable[[Any], Proposal]:
    """``scale -> `` proxy HMC, or with probability ``LOCAL_WEIGHT`` the random walk at ``scale``."""
    fixed, walk = hmc(proxy, model, chol, temperature, rule), random_walk_move(proxy, model, chol, temperature, rule)
    return lambda scale: mixture([fixed, walk(scale)], [1.0 - LOCAL_WEIGHT, LOCAL_WEIGHT])


def mixture_steps() -> Callable[[Any], Any]:
    """``k_proposal -> bool``: whether a step of ``mixture`` moves with its tuned random walk."""
    choose = component_chooser([1.0 - LOCAL_WEIGHT, LOCAL_WEIGHT])
    return lambda key: choose(key) == 1


def walk_scale(d: int) -> float:
    """A random walk's first scale: ``2.38 / sqrt(d)`` (Roberts, Gelman and Gilks' optimum on a Gaussian)."""
    return 2.38 / math.sqrt(d)


def langevin_scale(d: int) -> float:
    """MALA's first step size: ``1.65^2 d^(-1/3)`` (Roberts and Rosenthal's optimum on a Gaussian)."""
    return 1.65**2 * d ** (-1.0 / 3.0)


class ProposalKind(NamedTuple):
    """A proposal the warm-up sets up by name: its builder and how the warm-up tunes it (if at all)."""

    name: str
    """The name ``warmup(proposal=...)`` and ``--proposal`` take."""
    build: MoveBuilder
    """``(proxy, model, chol, temperature, rule) -> scale -> Proposal``: shaped by the Laplace factor ``chol``."""
    tuned_move: str | None = None
    """The kind whose scale tuning sets (itself; ``mixture``'s random walk); None: untuned, its move from the Laplace fit."""
    target: str | None = None
    """Its key in ``TARGET_ACCEPT``, with the test's rule: the acceptance rate tuning aims at (None: untuned)."""
    initial_scale: Callable[[int], float] | None = None
    """``d -> `` the scale tuning starts from (None: untuned)."""
    tuned_steps: Callable[[], Callable[[Any], Any]] | None = None
    """``() -> (k_proposal -> bool)``: which steps move with the tuned move, where not all do (``mixture``); None: all."""

    @property
    def is_global(self) -> bool:
        """Whether the Laplace fit alone sets the move (nothing to tune): an independence proposal or proxy HMC."""
        return self.tuned_move is None


KINDS: dict[str, ProposalKind] = {
    k.name: k
    for k in (
        ProposalKind("langevin", langevin_move, "langevin", "langevin", langevin_scale),
        ProposalKind("random_walk", random_walk_move, "random_walk", "random_walk", walk_scale),
        ProposalKind("independence", independence_move(None)),
        ProposalKind("independence_t", independence_move(T_DF)),
        ProposalKind("proxy_hmc", hmc_move),
        ProposalKind("mixture", mixture_move, "random_walk", "random_walk", walk_scale, mixture_steps),
    )
}
"""Name -> the kind; a new proposal is its module, its test and one row here (``warmup.PROPOSALS`` adds ``"auto"``)."""
GLOBAL = tuple(name for name, k in KINDS.items() if k.is_global)
"""Kinds whose settings come from the Laplace fit alone: no scale to tune."""
TARGET_ACCEPT = {
    ("metropolis", "langevin"): 0.574,
    ("metropolis", "random_walk"): 0.234,
    ("barker", "langevin"): 0.347,
    ("barker", "random_walk"): 0.159,
}
"""Default target acceptance rates by ``(rule, ProposalKind.target)``: the optimal diffusion-limit scalings (Roberts and Rosenthal for Metropolis;
the same optimisation with Barker's acceptance function, which MHminibatch approximates, gives 0.159 and 0.347:
its acceptance never exceeds 1/2 for small moves, so a Metropolis target would drive the scale to 0)."""


def proposal_kind(kind: str) -> ProposalKind:
    """The row of ``kind``; an unknown kind is an error listing the known ones."""
    return KINDS[check_choice(kind, "proposal", tuple(KINDS))]


def proposal_for(
    kind: str, proxy: Proxy, model: Model, chol: np.ndarray, temperature: float, rule: str = "barker"
) -> Callable[[Any], Proposal]:
    """``scale -> Proposal`` for the named kind, shaped by the Laplace covariance ``chol chol'`` (``scale`` is ignored
    by the untuned kinds in ``GLOBAL``; for ``mixture`` it is the random walk's)."""
    return proposal_kind(kind).build(proxy, model, chol, temperature, rule)


def default_kind(stratum_rows: int, num_modes: int) -> tuple[str, str]:
    """The kind for a fit whose user named none, and why: ``GUARDED_PROPOSAL`` when the warm-up put rows the proxy cannot
    see in an exact stratum or found several modes (the Laplace fit that shapes proxy HMC is then a poor global
    description), else ``DEFAULT_PROPOSAL``."""
    seen = [f"an exact stratum of {stratum_rows} rows"] * (stratum_rows > 0) + [f"{num_modes} modes"] * (num_modes > 1)
    if seen:
        return GUARDED_PROPOSAL, "rule: " + " and ".join(seen)
    return DEFAULT_PROPOSAL, "rule: no exact stratum, one mode"


def tuned_steps(kind: str) -> Callable[[Any], Any] | None:
    """For ``mixture``, ``k_proposal -> bool``: whether a step moves with the tuned random walk; None where every step is tuned."""
    steps = proposal_kind(kind).tuned_steps
    return None if steps is None else steps()
