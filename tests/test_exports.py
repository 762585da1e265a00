"""One way in: ``import minibatch_mcmc as mm`` is light (no ArviZ, xarray, pandas, NumPyro, BlackJAX or matplotlib until a
function needs them), every name of every ``__all__`` resolves, ``mm.warmup`` is the warm-up function, and the top level
exports every acceptance-test, proposal and control-variate factory by one rule.

On the code before issue 30 these fail: the import loaded ArviZ, xarray, pandas and matplotlib (about 2.3 s on the 2-core
machine), ``mm.warmup`` was the module and ``mm.from_numpyro``, ``mm.MinibatchMH``, ``mm.mhss``, ... did not exist."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

import minibatch_mcmc as mm

HEAVY = ("arviz", "xarray", "pandas", "numpyro", "blackjax", "matplotlib")
"""Libraries the package must not import before a function that needs them runs."""
IMPORT_CEILING_S = 1.0
"""Issue 30's bound for a fresh clone. The import loads no JAX and takes 3 ms on the idle 2-core box (13-28 ms at load 12):
far under the bound on a loaded machine too, while loading JAX and SciPy eagerly (about 1.5 s idle, 10 s at load 12)
would fail it."""
PEERS = ("MinibatchMH", "as_sampling_algorithm")
"""Names whose module imports a peer library (NumPyro, BlackJAX)."""


def _child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (this one's path) and return the JSON it prints last."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_is_light_and_fast():
    """``import minibatch_mcmc`` loads none of the heavy libraries (JAX may load) and takes under the ceiling."""
    out = _child(
        "import json, sys, time; t = time.perf_counter(); import minibatch_mcmc; t = time.perf_counter() - t; "
        f"print(json.dumps({{'seconds': t, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))"
    )
    print(f"import minibatch_mcmc: {out['seconds']:.3f} s")
    assert out["loaded"] == [], f"import minibatch_mcmc loaded {out['loaded']}"
    assert out["seconds"] < IMPORT_CEILING_S, f"import minibatch_mcmc took {out['seconds']:.2f} s"


def test_the_entry_points_leave_the_heavy_libraries_out():
    """Reaching every run function and factory (not calling them) imports none of the heavy libraries."""
    names = [n for n in mm.__all__ if n not in PEERS]
    out = _child(
        f"import json, sys; import minibatch_mcmc as mm; [getattr(mm, n) for n in {names!r}]; "
        f"print(json.dumps({{'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))"
    )
    assert out["loaded"] == [], f"mm's names loaded {out['loaded']}"


def _resolve(module, name: str):
    """``module.name``, skipping a name whose peer library is not installed."""
    try:
        return getattr(module, name)
    except ImportError as err:
        if err.name in ("numpyro", "blackjax"):
            pytest.skip(f"{name} needs {err.name}")
        raise


@pytest.mark.parametrize("package", [mm.__name__, *(f"{mm.__name__}.{p}" for p in mm.SUBPACKAGES)])
def test_every_name_in_all_resolves(package):
    module = importlib.import_module(package)
    assert len(set(module.__all__)) == len(module.__all__), f"{package}.__all__ repeats a name"
    for name in module.__all__:
        assert _resolve(module, name) is not None, f"{package}.{name}"


def test_warmup_is_the_function_also_after_the_module_is_imported():
    warmup_module = importlib.import_module("minibatch_mcmc.warmup")
    import minibatch_mcmc.warmup  # noqa: F401  (binds the submodule on the package, as any import of it does)

    assert callable(mm.warmup) and mm.warmup is warmup_module.warmup
    assert (
        mm.auto_sample is warmup_module.auto_sample
        and mm.from_numpyro is importlib.import_module("minibatch_mcmc.interop").from_numpyro
    )
    with pytest.raises(AttributeError, match="cannot be replaced"):
        mm.warmup = print


def _builds(annotation: str, namespace: dict, part) -> bool:
    """Whether a return annotation names only objects of ``part`` (a test, a proposal or an estimator)."""
    kinds = [namespace.get(a.strip()) for a in annotation.split("|")]
    return all(inspect.isclass(k) and part(k) for k in kinds)


def _factories(package: str, part) -> set[str]:
    """The rule: functions of ``package.__all__`` that build a ``part``, and ``part`` classes no function builds."""
    module = importlib.import_module(f"minibatch_mcmc.{package}")
    namespace = {n: getattr(module, n) for n in module.__all__}
    namespace["Proposal"] = importlib.import_module("minibatch_mcmc.proposals").Proposal
    functions = {n: o for n, o in namespace.items() if inspect.isfunction(o) and n in module.__all__}
    built = {n for n, f in functions.items() if _builds(str(inspect.signature(f).return_annotation), namespace, part)}
    made = {a.strip() for n in built for a in str(inspect.signature(functions[n]).return_annotation).split("|")}
    classes = {
        n for n, o in namespace.items() if n in module.__all__ and inspect.isclass(o) and part(o) and n not in made
    }
    return built | classes


def test_the_top_level_exports_every_factory_by_one_rule():
    from minibatch_mcmc.acceptance import AcceptanceTest, BarkerTest
    from minibatch_mcmc.control_variates import Estimator
    from minibatch_mcmc.proposals import Proposal

    def is_test(c):
        return c is not AcceptanceTest and all(hasattr(c, m) for m in ("decide", "validate", "temperature_factor"))

    def is_proposal(c):
        return issubclass(c, Proposal)

    def is_estimator(c):
        return c is not Estimator and all(hasattr(c, m) for m in ("log_ratio", "known_sum", "population"))

    assert is_test(BarkerTest)
    assert set(mm.ACCEPTANCE_TESTS) == _factories("acceptance", is_test)
    assert set(mm.PROPOSALS) == _factories("proposals", is_proposal)
    assert set(mm.CONTROL_VARIATES) == _factories("control_variates", lambda c: is_proposal(c) or is_estimator(c))
    assert {"mhss", "scalable_mh", "austere_mh", "langevin", "glm_proxy", "proxy_hmc"} <= set(mm.__all__)
