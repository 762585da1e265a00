"""Every ```python snippet in README.md and docs/*.md runs, so the documentation cannot rot.

Conventions a snippet may use (the reader sees them as ordinary comments):

- ``CODE  # small: NAME=VALUE, NAME=VALUE``: under test each ``NAME = ...`` / ``NAME=...`` on that line takes
  ``VALUE`` instead (the value up to the next comma, bracket or space), so a snippet written for 10^6 rows runs
  on a few thousand. Any text may come before ``small:`` in the comment.
- The snippets of one file run in order in one namespace (a later snippet may use an earlier one's names), in a
  temporary working directory (files a snippet writes land there).

The fast test checks every snippet statically (it parses, and every name it reads is bound somewhere in its
file's snippets, imported, or a builtin): a ``NameError`` such as an undefined ``n_data`` or ``theta0`` fails
it in milliseconds. ``test_snippets_run`` then executes them all, in ``make test`` (a wrong keyword argument, which
the static check cannot see, fails there).
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
SMALL = re.compile(r"#[^\n]*?\bsmall:\s*(?P<subs>[^\n]+)$")
SETTING = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>[^,\s]+)\s*")


def snippets(path: Path) -> list[tuple[int, str]]:
    """``(line number, code)`` of every python fence in a Markdown file."""
    text = path.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in FENCE.finditer(text)]


def small(code: str) -> str:
    """The snippet with every ``# small:`` line's settings substituted (a ``ValueError`` if one does not apply)."""
    out = []
    for line in code.splitlines():
        m = SMALL.search(line)
        if m:
            body = line[: m.start()]
            for setting in m.group("subs").split(","):
                s = SETTING.fullmatch(setting)
                if s is None:
                    raise ValueError(f"malformed '# small:' setting {setting!r} in: {line}")
                pattern = re.compile(rf"\b{s['name']}(\s*)=(\s*)[^,()\s]+")
                if not pattern.search(body):
                    raise ValueError(f"'# small: {setting.strip()}' names nothing on its line: {line}")
                body = pattern.sub(lambda g, v=s["value"]: f"{s['name']}{g[1]}={g[2]}{v}", body, count=1)
            line = body
        out.append(line)
    return "\n".join(out) + "\n"


def bound_names(tree: ast.AST) -> set[str]:
    """Every name a module binds anywhere: assignments, imports, functions, classes, loop and with targets, args."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def read_names(tree: ast.AST) -> set[str]:
    """Every name a module reads."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


DOC_IDS = [p.relative_to(ROOT).as_posix() for p in DOCS]


def test_the_small_convention_substitutes_settings():
    code = "n = 1_000_000  # small: n=20\nf(a, num_samples=2000, k=1)  # note; small: num_samples=5\n"
    assert small(code) == "n = 20  \nf(a, num_samples=5, k=1)  \n"
    with pytest.raises(ValueError, match="names nothing"):
        small("x = 1  # small: y=2\n")


@pytest.mark.parametrize("path", DOCS, ids=DOC_IDS)
def test_snippets_parse_and_read_only_bound_names(path):
    """Would catch a snippet that reads a name no snippet of its file defines (``n_data``, ``model``, ``theta0``)."""
    trees = []
    for line, code in snippets(path):
        try:
            trees.append(ast.parse(small(code)))
        except SyntaxError as err:
            pytest.fail(f"{path.name}, snippet at line {line}: {err}")
    bound = set(dir(builtins)).union(*(bound_names(t) for t in trees)) if trees else set()
    for (line, _), tree in zip(snippets(path), trees):
        missing = sorted(read_names(tree) - bound)
        assert not missing, f"{path.name}, snippet at line {line} reads undefined names {missing}"


LONG_DOCS = ("usage.md",)
"""Files whose snippets, run in order, take over a minute (mostly compilation): `make test-slow` runs them; their names
are still checked in `make test` (`test_snippets_parse_and_read_only_bound_names`)."""


# in `make test` (CI): every snippet at its small size but LONG_DOCS', mostly compilation
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in LONG_DOCS else p for p in DOCS if snippets(p)],
    ids=[i for p, i in zip(DOCS, DOC_IDS) if snippets(p)],
)
def test_snippets_run(path, tmp_path, monkeypatch):
    """Each file's snippets, in order, in one namespace, at their small size."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__snippet__"}
    for line, code in snippets(path):
        try:
            exec(compile(small(code), f"{path.name}:{line}", "exec"), namespace)  # noqa: S102 - the docs' own code
        except Exception as err:  # noqa: BLE001 - name the snippet whatever failed in it
            raise AssertionError(f"{path.name}, snippet at line {line} failed: {type(err).__name__}: {err}") from err
