"""minibatch-mcmc: Metropolis-Hastings on tall data with minibatch acceptance tests, on JAX.

One way in: ``import minibatch_mcmc as mm``, then ``mm.glmm`` (a mixed model from a formula and a table, fitted),
``mm.from_numpyro`` (a NumPyro model in), ``mm.auto_sample`` (warm-up and chains), ``mm.warmup`` (the warm-up alone), ``mm.sample`` (chains with a proposal and a test you choose),
``mm.summarize`` and ``mm.to_inference_data`` (results out), ``mm.MinibatchMH`` (our sampler in NumPyro's ``MCMC``),
and every acceptance test, proposal and control-variate factory by its name in its subpackage (the rule:
``ACCEPTANCE_TESTS``, ``PROPOSALS`` and ``CONTROL_VARIATES`` below; ``tests/test_exports.py`` checks that they are all
there).

Importing the package is light: it imports nothing but the standard library. Each name loads its module on first
use (a PEP 562 module ``__getattr__``, for lazy import only), so JAX comes with the first sampler, and ArviZ, xarray,
pandas, NumPyro, BlackJAX and matplotlib only with the functions that need them. ``mm.warmup`` is the function
``minibatch_mcmc.warmup.warmup``, also after the subpackage of that name is imported (the package's module type keeps
the name; ``from minibatch_mcmc.warmup import ...`` and ``importlib.import_module("minibatch_mcmc.warmup")`` reach the
subpackage).
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

SUBPACKAGES = (
    "acceptance",
    "control_variates",
    "data",
    "diagnostics",
    "interop",
    "models",
    "optim",
    "proposals",
    "samplers",
)
"""The subpackages, each imported on first use as ``mm.<name>``."""
ACCEPTANCE_TESTS = (
    "BarkerTest",
    "MetropolisTest",
    "austere_mh",
    "austere_mh_adaptive",
    "austere_mh_for_error",
    "mh_minibatch",
    "mh_minibatch_skew",
    "mh_sublhd",
    "mhss",
    "mint",
    "naive_minibatch",
    "no_test",
    "penalty_test",
    "scalable_mh",
    "tunamh",
)
"""Every acceptance test a user builds: the factory functions of ``acceptance`` and the exact tests' classes."""
PROPOSALS = (
    "independence_gaussian",
    "independence_t",
    "langevin",
    "mixture",
    "random_walk",
    "reversible_jump",
    "stiefel_random_walk",
)
"""Every proposal factory of ``proposals``."""
CONTROL_VARIATES = (
    "plain",
    "taylor_proxy",
    "glm_proxy",
    "logistic_proxy",
    "model_glm_proxy",
    "glmm_proxy",
    "proxy_for",
    "stratify",
    "proxy_langevin",
    "proxy_hmc",
    "proxy_independence",
)
"""Every factory of ``control_variates``: the estimators and the proposals built from a proxy."""
ENTRY_POINTS = {
    "glmm": "minibatch_mcmc.interop.glmm_fit",
    "from_numpyro": "minibatch_mcmc.interop.numpyro",
    "MinibatchMH": "minibatch_mcmc.interop.numpyro_kernel",
    "auto_sample": "minibatch_mcmc.warmup",
    "warmup": "minibatch_mcmc.warmup",
    "fit_cost": "minibatch_mcmc.warmup",
    "sample": "minibatch_mcmc.samplers.driver",
    "sample_data_parallel": "minibatch_mcmc.samplers.data_parallel_run",
    "RunOptions": "minibatch_mcmc.samplers.run_options",
    "build_kernel": "minibatch_mcmc.samplers.kernel",
    "SampleResult": "minibatch_mcmc.samplers.results",
    "summarize": "minibatch_mcmc.samplers.results",
    "to_inference_data": "minibatch_mcmc.samplers.results",
    "log_likelihood_data": "minibatch_mcmc.samplers.pointwise",
    "AccuracyWarning": "minibatch_mcmc.acceptance.austere",
}
"""The functions and classes of a run, by name -> the module that defines them."""
EXPORTS = {
    **ENTRY_POINTS,
    **{name: "minibatch_mcmc.acceptance" for name in ACCEPTANCE_TESTS},
    **{name: "minibatch_mcmc.proposals" for name in PROPOSALS},
    **{name: "minibatch_mcmc.control_variates" for name in CONTROL_VARIATES},
}
"""Every name ``mm.<name>`` resolves lazily, -> the module it is taken from."""

__all__ = [*SUBPACKAGES, *ENTRY_POINTS, *ACCEPTANCE_TESTS, *PROPOSALS, *CONTROL_VARIATES]


def __getattr__(name: str):
    """``mm.<name>``: import the subpackage or the module defining ``name`` on first use (PEP 562)."""
    if name in SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    if name != "warmup":  # the import system may bind the submodule ``warmup`` here: the property below answers
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names and every lazy one."""
    return sorted({*globals(), *__all__})


class Package(types.ModuleType):
    """The package's module type: ``warmup`` stays the function when the submodule of that name is imported (the import
    system then binds the module as the package's attribute ``warmup``; this keeps the function)."""

    @property
    def warmup(self):
        """:func:`minibatch_mcmc.warmup.warmup`: the automatic warm-up (mode, Laplace, Taylor proxy, proposal)."""
        return importlib.import_module(f"{__name__}.warmup").warmup

    @warmup.setter
    def warmup(self, value) -> None:
        """Ignore the import system's binding of the submodule; any other value is an error."""
        if not (isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.warmup"):
            raise AttributeError("minibatch_mcmc.warmup is the warm-up function and cannot be replaced")


sys.modules[__name__].__class__ = Package
