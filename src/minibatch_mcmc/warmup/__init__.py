"""The automatic warm-up, one package: ``warmup`` (mode, Laplace covariance, Taylor proxy, tuned proposal) and
``auto_sample`` (warm-up, then sampling), with every module that exists only for them.

Phase by phase: the centre (``centre.py``: the lean search of ``lean.py``, or mode, covariance and proxy one after the
other; other modes, ``multistart.py``; the no-mode check, ``no_mode.py``), the estimator for the test
(``exact_choice.py``), the proposal by name (``laplace_moves.py``), the measured choice of ``proposal="auto"``
(``efficiency.py``), the tuning and dispersed starts (``tuning.py``), the default test's minibatch for a global move
(``batch_choice.py``), the whole fit's cost table (``fit_cost.py``) and the saved warm-up of a checkpointed run (``saved.py`` through the codec ``codec.py``);
``api.py`` runs them (``auto.py``: ``auto_sample``, the warm-up or its saved copy, then sampling and the check), each phase timed by ``samplers.phase_cost``, the phases after the centre sharing one
``WarmupContext`` and the knobs one ``WarmupSettings`` (``context.py``). ``from minibatch_mcmc.warmup import warmup`` is the function;
``importlib.import_module("minibatch_mcmc.warmup.api")`` is the module that defines it (patch its names there; the names
``auto_sample`` looks up, on ``minibatch_mcmc.warmup.auto``).
"""

from minibatch_mcmc.warmup.api import (
    AUTO_CANDIDATES,
    DEFAULT_PROPOSAL,
    DEFAULT_TEST,
    PROPOSALS,
    TARGET_ACCEPT,
    Warmup,
    decision_rule,
    default_test,
    warmup,
)
from minibatch_mcmc.warmup.auto import auto_sample, stored_warmup
from minibatch_mcmc.warmup.context import WarmupContext, WarmupSettings
from minibatch_mcmc.warmup.fit_cost import FitCost, fit_cost
from minibatch_mcmc.warmup.tuning import dispersed_starts

__all__ = [
    "AUTO_CANDIDATES",
    "DEFAULT_PROPOSAL",
    "DEFAULT_TEST",
    "FitCost",
    "PROPOSALS",
    "TARGET_ACCEPT",
    "Warmup",
    "WarmupContext",
    "WarmupSettings",
    "auto_sample",
    "decision_rule",
    "default_test",
    "dispersed_starts",
    "fit_cost",
    "stored_warmup",
    "warmup",
]
