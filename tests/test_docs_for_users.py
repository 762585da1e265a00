"""The documentation a user reads stays true: every public entry point documents each of its parameters in a Google-style
``Args:`` section (mkdocstrings renders it as the API pages' parameter table), and the README says what the library does
before any make target, carries no benchmark figure, and holds the "which test and which proposal" table rendered from
the registries (``benchmarks/render_choices.py``). No sampling: fast."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import minibatch_mcmc as mm

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def entry_points() -> dict[str, object]:
    """Every function of ``mm.__all__``, and every class with a constructor a user calls (not a NamedTuple of results
    or settings, not a warning), with the LOO, the result's methods and the NumPyro outputs a first fit reaches."""
    from minibatch_mcmc.interop import numpyro as interop
    from minibatch_mcmc.samplers.loo import loo_subsample
    from minibatch_mcmc.samplers.results import SampleResult

    out = {}
    for name in mm.__all__:
        obj = getattr(mm, name)
        if inspect.isroutine(obj):
            out[name] = obj
        elif inspect.isclass(obj) and not issubclass(obj, (tuple, Warning)):
            out[name] = obj
    out.update(
        {
            "loo_subsample": loo_subsample,
            "SampleResult.summary": SampleResult.summary,
            "SampleResult.to_inference_data": SampleResult.to_inference_data,
            "interop.to_inference_data": interop.to_inference_data,
            "interop.log_likelihood": interop.log_likelihood,
            "interop.subsampled_loo": interop.subsampled_loo,
        }
    )
    return out


def documented_args(doc: str) -> list[str]:
    """The parameter names of a Google-style ``Args:`` section (``name:``, ``name (type):``, ``*args:``, ``**kwargs:``)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Args:"]
    if not starts:
        return []
    head = starts[0]
    indent = len(lines[head]) - len(lines[head].lstrip())
    body = []
    for line in lines[head + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break  # the next section, or prose after the section
        body.append(line)
    item = min((len(x) - len(x.lstrip()) for x in body if x.strip()), default=0)
    names = []
    for line in body:
        m = (
            re.match(r"\*{0,2}(\w+)\s*(\([^)]*\))?:", line[item:])
            if line.strip() and len(line) - len(line.lstrip()) == item
            else None
        )
        if m:
            names.append(m.group(1))
    return names


def parameters(obj) -> list[str]:
    """The parameters a caller passes (``self`` left out)."""
    return [p for p in inspect.signature(obj).parameters if p != "self"]


def test_documented_args_reads_a_google_section():
    """The parser finds items at the section's first indentation only, stops at the next section, and reads stars."""
    doc = """Do it.

    Args:
        a: first, on
            two lines: not an item.
        b (int): second.
        *rest: more.
        **kw: keywords.

    Returns:
        c: not an argument.
    """
    assert documented_args(doc) == ["a", "b", "rest", "kw"]
    assert documented_args("One line.") == []


@pytest.mark.parametrize("name", sorted(entry_points()), ids=str)
def test_entry_point_documents_each_parameter(name):
    """Would catch a public entry point with no ``Args:`` section, a parameter missing from it (a new keyword), or an
    entry naming a parameter the signature no longer has (a renamed one)."""
    obj = entry_points()[name]
    doc = inspect.getdoc(obj) or ""
    params, items = parameters(obj), documented_args(doc)
    assert "Args:" in doc or not params, f"{name}: no 'Args:' section for its parameters {params}"
    missing, unknown = [p for p in params if p not in items], [a for a in items if a not in params]
    assert not missing and not unknown, f"{name}: Args: lacks {missing}, names parameters it does not take {unknown}"


def prose_before_first_make(text: str) -> str:
    """The README's text before its first ``make`` target, without headings, code fences and HTML comments."""
    head = re.split(r"`?make [a-z]", text, maxsplit=1)[0]
    head = re.sub(r"```.*?(```|$)", "", head, flags=re.S)
    head = re.sub(r"<!--.*?-->", "", head, flags=re.S)
    return " ".join(line for line in head.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def test_readme_says_what_the_library_does_before_any_make_target():
    """Would catch a README that opens with make targets (a developer's page): the first lines say, in prose, what the
    library does (minibatch Metropolis-Hastings on tall data) and when to use it."""
    prose = prose_before_first_make(README.read_text())
    assert len(prose.split()) >= 40, f"README: {len(prose.split())} words before the first make target: {prose!r}"
    for words in ("Metropolis-Hastings", "minibatch", "NUTS"):
        assert words.lower() in prose.lower(), f"README: {words!r} not said before the first make target"


def test_readme_sections_come_in_the_order_a_user_reads():
    """Would catch the install, the first example or the choice of NUTS moved behind the developers' material."""
    headings = [h.strip().lower() for h in re.findall(r"^## (.+)$", README.read_text(), flags=re.M)]
    order = ["two commands", "install", "first example", "nuts", "which test", "developing"]
    found = [next((i for i, h in enumerate(headings) if key in h), None) for key in order]
    assert None not in found, f"README headings {headings} lack one of {order}"
    assert found == sorted(found), f"README headings {headings} not in the order {order}"


def test_readme_carries_no_benchmark_figure():
    """Figures live in docs/benchmarks-summary.md (rendered from results files), not inline in the README."""
    text = README.read_text()
    assert "<!-- value:" not in text and "<!-- results:" not in text, "README: a benchmark figure inline"
    assert "docs/benchmarks-summary.md" in text, "README: no link to the benchmarks summary"


def load_choices():
    """``benchmarks/render_choices.py`` as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("render_choices", ROOT / "benchmarks" / "render_choices.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_choice_tables_match_the_registries():
    """Would catch a test or proposal added to (or dropped from) ``acceptance.registry.TESTS`` or
    ``warmup.laplace_moves.KINDS`` without the README's table following (rerun benchmarks/render_choices.py)."""
    from minibatch_mcmc.acceptance.registry import TESTS
    from minibatch_mcmc.warmup.laplace_moves import KINDS

    choices = load_choices()
    text = README.read_text()
    assert choices.render(text) == text, (
        "README's choice tables differ from the registries: run benchmarks/render_choices.py"
    )
    for name in [*TESTS, *KINDS]:
        assert f"`{name}`" in text, f"README's table lacks {name!r}"


def test_benchmarks_summary_types_no_figure():
    """Would catch a measured figure typed into the summary page instead of a value marker filled from a results file."""
    text = (ROOT / "docs" / "benchmarks-summary.md").read_text()
    bare = re.sub(r"<!-- value:[^>]*-->.*?<!-- /value -->", "", text)
    bare = re.sub(r"<!-- results:(\S+) -->.*?<!-- /results:\1 -->", "", bare, flags=re.S)
    figures = re.findall(r"(?<![\w^.])\d+\.\d+", bare)
    assert not figures, f"docs/benchmarks-summary.md: figures typed outside value markers: {figures}"
    assert "<!-- value:" in text, "docs/benchmarks-summary.md quotes no results value"


def test_benchmarks_summary_plot_is_what_the_results_draw():
    """Would catch a results file or the summary's table changed without the plot redrawn (benchmarks/plot_summary.py)."""
    spec = importlib.util.spec_from_file_location("plot_summary", ROOT / "benchmarks" / "plot_summary.py")
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    grid = plot.table_grid(plot.SUMMARY.read_text(), plot.load_results().values)
    assert len(grid.rows) >= 3 and all(len(vals) == len(grid.columns) for _, vals in grid.rows)
    assert plot.FIGURE.read_text() == plot.render(), (
        "docs/figures/first_fit_vs_nuts.svg is stale: run benchmarks/plot_summary.py"
    )
