"""Chains in groups, each group with its own proposal and estimator (e.g. a proxy centred on its own mode).

``sample_groups`` runs ``sample`` once per group on that group's chains and puts the draws back in the
chains' original order. Group ``k`` draws with key ``fold_in(key, k)`` and, with ``checkpoint_dir``,
checkpoints in its subdirectory ``group-k`` (on resume, a group whose subdirectory the killed run had not made yet starts at step 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Sequence

import jax
import numpy as np

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.control_variates.base import Estimator
from minibatch_mcmc.models.base import Model
from minibatch_mcmc.proposals.base import Proposal
from minibatch_mcmc.samplers.driver import sample_compiled
from minibatch_mcmc.samplers.results import SampleResult
from minibatch_mcmc.samplers.run_options import RunOptions

PyTree = Any


class ChainGroup(NamedTuple):
    """The chains (indices into the batched starts) that share a proposal and an estimator."""

    chains: tuple[int, ...]
    proposal: Proposal
    estimator: Estimator | None


def sample_groups(
    model: Model,
    data: PyTree,
    starts: PyTree,
    groups: Sequence[ChainGroup],
    *,
    test: AcceptanceTest,
    num_samples: int,
    key: jax.Array,
    temperature: Any = 1.0,
    run: RunOptions = RunOptions(),
    compiler_options: dict[str, Any] | None = None,
) -> SampleResult:
    """``sample`` per group from its rows of the batched ``starts``; one ``SampleResult`` in the original chain order."""
    ckpt, resume = run.checkpoint_dir, run.resume
    order = [c for g in groups for c in g.chains]
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"the groups' chains {order} must be 0..{len(order) - 1}, each once")
    parts = []
    for k, g in enumerate(groups):
        idx, sub = np.asarray(g.chains), None if ckpt is None else Path(ckpt) / f"group-{k}"
        fresh = sub is not None and not sub.exists() and Path(ckpt).exists()  # a group the killed run had not reached
        parts.append(
            sample_compiled(
                model,
                data,
                jax.tree_util.tree_map(lambda a: a[idx], starts),
                proposal=g.proposal,
                test=test,
                estimator=g.estimator,
                num_samples=num_samples,
                num_chains=len(idx),
                key=jax.random.fold_in(key, k),
                temperature=temperature,
                batched_init=True,
                run=run._replace(checkpoint_dir=sub, resume=resume and not fresh),
                compiler_options=compiler_options,
            )
        )
    back = np.argsort(np.asarray(order))

    def join(*leaves: np.ndarray) -> np.ndarray:
        return np.concatenate(leaves, axis=0)[back]

    return parts[0]._replace(
        positions=jax.tree_util.tree_map(join, *[p.positions for p in parts]),
        records={k: join(*[p.records[k] for p in parts]) for k in parts[0].records},
        wall_time=float(sum(p.wall_time for p in parts)),
        interrupted=any(p.interrupted for p in parts),
    )
