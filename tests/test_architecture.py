"""The architecture rules of docs/architecture.md, checked on the source: imports only run down the layers,
no module imports another module's private name, no hook is discovered with getattr, no module is a hub.

Each check would fail on the code before the kernel-contract refactor (data/prefetch.py imported the driver,
experiments/timed.py imported ``_make_block_runner``, kernel.py looked hooks up with getattr, mintee.py had
703 lines)."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "minibatch_mcmc"
REPRODUCTIONS = ROOT / "reproductions"
"""The papers' reproductions: in the repository, above every layer of the package, and not in the wheel."""

LAYERS = {
    "checks": 0,
    "compiling": 0,
    "data": 0,
    "models": 0,
    "proposals": 0,
    "acceptance": 1,
    "control_variates": 2,
    "samplers": 3,
    "optim": 4,
    "diagnostics": 4,
    "warmup": 5,
    "interop": 5,
    "cli": 7,
    "cli_inputs": 7,
    "cli_launch": 7,
    "__init__": 7,
    "__main__": 7,
}
"""Layer of each top-level part, bottom (0) to top: a module may import its own layer and the ones below."""
MAX_LINES = 400
HOOKS = (
    "validate",
    "temperature_factor",
    "decision_rule",
    "first_rows",
    "gradient_batch_size",
    "decide",
    "log_ratio",
    "known_sum",
    "residual_bounds",
    "row_draw",
    "rows_ahead",
    "log_lik_sum",
)
PARTS = ("test", "proposal", "model", "estimator")
"""Objects whose declared fields (``name`` included) are read directly, never with getattr."""


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py")) + sorted(REPRODUCTIONS.rglob("*.py"))


def _part(path: pathlib.Path) -> str:
    if path.is_relative_to(REPRODUCTIONS):
        return "reproductions"
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _imports(tree: ast.AST, prefixes: tuple[str, ...] = ("minibatch_mcmc",)):
    """``(module, names)`` of every ``from P... import names`` and ``import P...`` for a ``P`` in ``prefixes``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefixes):
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(prefixes):
                    yield a.name, []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_follows_the_rules(path):
    tree = ast.parse(path.read_text())
    part = _part(path)
    if part == "reproductions":
        for module, names in _imports(tree, ("minibatch_mcmc", "reproductions")):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{path.name} imports private names {private} from {module}"
            assert module.split(".")[:2] not in (
                ["minibatch_mcmc", "cli"],
                ["minibatch_mcmc", "cli_inputs"],
                ["minibatch_mcmc", "cli_launch"],
            ), f"{path.name} imports the command line"
        _check_hooks_and_length(path, tree)
        return
    for module, _ in _imports(tree, ("reproductions",)):
        raise AssertionError(
            f"{path.name} imports {module}: the package cannot need reproductions/, which the wheel lacks"
        )
    assert part in LAYERS, f"{part} has no layer in LAYERS: add it here and to docs/architecture.md"
    for module, names in _imports(tree):
        bits = module.split(".")
        target = bits[1] if len(bits) > 1 else "__init__"
        if target in LAYERS:
            assert LAYERS[target] <= LAYERS[part], f"{path.name} ({part}) imports {module}, a higher layer"
        if module != "minibatch_mcmc" or part != "__init__":
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert not private, f"{path.name} imports private names {private} from {module}"
    _check_hooks_and_length(path, tree)


def _check_hooks_and_length(path: pathlib.Path, tree: ast.AST) -> None:
    """No hook looked up with getattr, at most ``MAX_LINES`` lines."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) >= 2:
            arg = node.args[1]
            owner = getattr(node.args[0], "id", None)
            if isinstance(arg, ast.Constant) and (arg.value in HOOKS or (owner in PARTS and arg.value == "name")):
                raise AssertionError(
                    f"{path.name} looks up the hook {arg.value!r} with getattr: declare it in the protocol"
                )
    lines = len(path.read_text().splitlines()) - _parameter_section_lines(tree)
    assert lines <= MAX_LINES, (
        f"{path.name} has {lines} lines (> {MAX_LINES}; Args:/Returns: sections not counted): split it"
    )


DOC_SECTIONS = ("Args:", "Returns:", "Raises:", "Yields:")
"""Google-style docstring sections (the API pages' parameter tables): documenting a parameter never forces a split."""


def _parameter_section_lines(tree: ast.AST) -> int:
    """Lines of the docstrings' ``DOC_SECTIONS``, from the first such heading to the docstring's end."""
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False) or ""
            lines = doc.splitlines()
            heads = [i for i, line in enumerate(lines) if line.strip() in DOC_SECTIONS]
            total += len(lines) - heads[0] if heads else 0
    return total
