"""Optimisation with sequential tests (Korattikara et al., Section 2): sequential IRLS and the SGD baseline."""

from minibatch_mcmc.optim.sequential_irls import (
    IRLSProblem,
    IRLSTrace,
    SequentialIRLSConfig,
    StepInfo,
    lad_problem,
    logistic_problem,
    make_batch_step,
    make_sequential_step,
    run_irls,
    update_distribution,
)
from minibatch_mcmc.optim.sgd import SGDConfig, SGDTrace, annealed_schedule, make_sgd_epoch, run_sgd

__all__ = [
    "IRLSProblem",
    "IRLSTrace",
    "SequentialIRLSConfig",
    "StepInfo",
    "lad_problem",
    "logistic_problem",
    "make_batch_step",
    "make_sequential_step",
    "run_irls",
    "update_distribution",
    "SGDConfig",
    "SGDTrace",
    "annealed_schedule",
    "make_sgd_epoch",
    "run_sgd",
]
