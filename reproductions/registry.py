"""The experiments ``minibatch-mcmc reproduce NAME`` runs: name, one-line description, module.

Every experiment module has ``main(argv: Sequence[str] | None) -> int``, which parses its options
(:func:`reproductions.options.experiment_parser`) and runs it. Adding an experiment is
one module and one line in :data:`EXPERIMENTS`. Modules are imported only when their experiment runs,
so listing the experiments (and the CLI's start) stays fast.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple, Sequence


class Experiment(NamedTuple):
    """A registered experiment: what ``reproduce --list`` shows and where its ``main`` lives."""

    name: str
    description: str
    module: str
    """Module with ``main(argv) -> int``."""

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Import the module and run its ``main`` on ``argv``."""
        return int(importlib.import_module(self.module).main(list(argv or [])) or 0)


_PACKAGE = "reproductions"

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment("gmm", "Seita et al. 6.1: mixture, Tables 1 and 4, Figures 1-2", f"{_PACKAGE}.reproduce_gmm"),
        Experiment(
            "logistic",
            "Seita et al. 6.2: logistic regression, Table 2, Figures 3 and 6",
            f"{_PACKAGE}.reproduce_logistic",
        ),
        Experiment("mint-gmm", "Li and Wong 4.1: MINT on the tied-means mixture, Figure 1", f"{_PACKAGE}.mint_gmm"),
        Experiment(
            "mint-logistic", "Li and Wong 4.2: MINT vs tempered and plain MCMC, Figure 2", f"{_PACKAGE}.mint_logistic"
        ),
        Experiment(
            "cmint-bnn", "Li and Wong 4.3.2: SGD, SGD-M, SGLD, MINT, CMINT on a Bayesian MLP", f"{_PACKAGE}.cmint_bnn"
        ),
        Experiment(
            "mintee", "Li and Wong 5.3: MINTEE on the 50-component mixture, Figure 4, Table 3", f"{_PACKAGE}.mintee"
        ),
        Experiment(
            "sgld-l1",
            "Korattikara et al. 4.2.4: SGLD on L1 regression with and without MH tests",
            f"{_PACKAGE}.sgld_l1",
        ),
        Experiment(
            "rj-selection",
            "Korattikara et al. 4.2.3: reversible-jump variable selection, Figures 7-8",
            f"{_PACKAGE}.rj_selection",
        ),
        Experiment("ica", "Korattikara et al. 4.2.2: ICA on the Stiefel manifold, Figure 6", f"{_PACKAGE}.stiefel_ica"),
        Experiment(
            "irls",
            "Korattikara et al. 4.1: sequential vs batch IRLS vs SGD, Figures 2-3",
            f"{_PACKAGE}.sequential_irls",
        ),
        Experiment(
            "logistic-t1",
            "Temperature 1: 10^6-row logistic regression, Taylor-proxy control variate vs full-data MH",
            f"{_PACKAGE}.logistic_t1",
        ),
        Experiment(
            "figure4",
            "Korattikara et al. 4.2.1: AustereMH data use, wrong decisions and risk, Figure 4",
            f"{_PACKAGE}.figure4",
        ),
    )
}
"""Every experiment, by the name ``reproduce`` takes."""


def experiment(name: str) -> Experiment:
    """The registered experiment ``name``, else a ValueError listing the names."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment {name!r} is unknown; expected one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def listing() -> str:
    """One line per experiment: name and description."""
    width = max(len(n) for n in EXPERIMENTS)
    return "\n".join(f"{e.name:<{width}}  {e.description}" for e in EXPERIMENTS.values())
