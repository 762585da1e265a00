"""The API reference: every public name (each ``__all__`` of the package and its modules) has a docstring, every
module with an ``__all__`` has a page under ``docs/api/``, and the site lists the README and every guide.

No network and no mkdocs needed; ``make docs`` (``mkdocs build --strict``) checks that the site builds."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import pkgutil
import re

import minibatch_mcmc

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "minibatch_mcmc"
GUIDES = (
    "usage.md",
    "algorithms.md",
    "architecture.md",
    "benchmarks-summary.md",
    "benchmarks.md",
    "reproduction.md",
    "notes-on-the-papers.md",
)


def _public_modules() -> list:
    """Every importable module of the package with an ``__all__``; a module needing an absent optional extra is left out."""
    names = [minibatch_mcmc.__name__] + [
        m.name for m in pkgutil.walk_packages(minibatch_mcmc.__path__, "minibatch_mcmc.")
    ]
    modules = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:  # an optional extra (e.g. numpyro) that is not installed
            if (e.name or "").split(".")[0] == "minibatch_mcmc":
                raise
            continue
        if hasattr(module, "__all__"):
            modules.append(module)
    return modules


def _attribute_docstrings() -> dict[str, list[str]]:
    """Module-level ``NAME = ...`` followed by a string literal, over all source files: ``{NAME: [doc, ...]}``."""
    docs: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        body = ast.parse(path.read_text()).body
        for stmt, nxt in zip(body, body[1:]):
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else []
            )
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                for t in targets:
                    if isinstance(t, ast.Name):
                        docs.setdefault(t.id, []).append(nxt.value.value)
    return docs


def _own_doc(obj) -> str | None:
    """The object's own docstring: not inherited, not NamedTuple's generated ``Name(field, ...)``."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if inspect.isclass(obj) and doc and re.fullmatch(rf"{re.escape(obj.__name__)}\(.*\)", doc.strip()):
        return None
    return doc


def test_every_public_name_has_a_docstring():
    attribute_docs = _attribute_docstrings()
    missing = []
    for module in _public_modules():
        if not (module.__doc__ or "").strip():
            missing.append(f"{module.__name__} (module)")
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.__all__ lists {name!r}, which the module does not define"
            obj = getattr(module, name)
            if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj):
                ok = bool((_own_doc(obj) or "").strip())
            else:  # a constant or a type alias: a string literal right after its assignment
                ok = any(d.strip() for d in attribute_docs.get(name, []))
            if not ok:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"public names without a docstring: {missing}"


def test_every_public_module_has_an_api_page():
    pages = "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "api").glob("*.md")))
    documented = set(re.findall(r"^:::\s*(\S+)", pages, flags=re.M))
    missing = [m.__name__ for m in _public_modules() if m.__name__ not in documented]
    assert not missing, f"modules with an __all__ but no '::: NAME' in docs/api/*.md: {missing}"
    for name in documented:
        importlib.import_module(name)  # a page naming a module that does not exist breaks the build


def test_site_holds_the_readme_and_every_guide():
    config = (ROOT / "mkdocs.yml").read_text()
    for guide in GUIDES:
        assert (ROOT / "docs" / guide).exists(), f"docs/{guide} is missing"
        assert guide in config, f"docs/{guide} is not in mkdocs.yml's nav"
    index = (ROOT / "docs" / "index.md").read_text()
    assert '--8<-- "README.md"' in index, "docs/index.md does not include the README"
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        assert f"api/{page.name}" in config, f"docs/api/{page.name} is not in mkdocs.yml's nav"
