"""The results tables in docs/*.md are exactly what docs/results/*.json render (no sampling: fast)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_renderer():
    """``benchmarks/render_results.py`` as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "benchmarks" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


renderer = load_renderer()


@pytest.mark.parametrize("path", renderer.docs_with_blocks(), ids=lambda p: p.name)
def test_docs_results_blocks_match_the_json(path):
    """Every results block of the file renders to itself (rerun benchmarks/render_results.py after a new run)."""
    assert renderer.stale([path], renderer.load_results()) == []


def test_render_replaces_only_the_block_and_check_sees_a_stale_one(tmp_path):
    """The renderer fills a block from a table; a hand-edited block is reported stale."""
    tables = {"t": {"columns": ["N", "method", "ESS/s"], "rows": [["1e5", "a", "1.50"], ["1e6", "b", "> 60"]]}}
    text = "before\n<!-- results:t -->\nold\n<!-- /results:t -->\nafter\n"
    out = renderer.render(text, tables)
    assert out.startswith("before\n<!-- results:t -->\n| N | method | ESS/s |\n|---:|:---|---:|\n| 1e5 | a | 1.50 |\n")
    assert out.endswith("| 1e6 | b | > 60 |\n<!-- /results:t -->\nafter\n")
    assert renderer.render(out, tables) == out
    doc = tmp_path / "x.md"
    doc.write_text(out.replace("1.50", "9.99"))
    assert renderer.stale([doc], tables) == [doc]
    results = tmp_path / "results"
    results.mkdir()
    (results / "r.json").write_text(json.dumps({"tables": tables}))
    assert renderer.load_tables(results) == tables


def test_unknown_block_name_is_an_error():
    """A block naming no table fails loudly instead of rendering nothing."""
    with pytest.raises(KeyError, match="nope"):
        renderer.render("<!-- results:nope -->\n<!-- /results:nope -->\n", {})


def test_value_markers_are_filled_and_an_unknown_key_fails():
    """A prose figure is rendered from the results values; a marker naming no value fails loudly."""
    res = renderer.Results({}, {"gmm.ratio": "51"}, {})
    text = "AustereMH uses <!-- value:gmm.ratio -->7<!-- /value --> times more data.\n"
    assert renderer.render(text, res) == "AustereMH uses <!-- value:gmm.ratio -->51<!-- /value --> times more data.\n"
    with pytest.raises(KeyError, match="nope"):
        renderer.render("<!-- value:nope -->1<!-- /value -->", res)


def test_rendered_table_names_its_results_file_and_command(tmp_path):
    """The line under a rendered table names the file and the command recorded in it."""
    results = tmp_path / "results"
    results.mkdir()
    payload = {
        "command": "minibatch-mcmc reproduce gmm",
        "date": "2026-01-01",
        "tables": {"t": {"columns": ["a"], "rows": [["1"]]}},
    }
    (results / "gmm.json").write_text(json.dumps(payload))
    out = renderer.render("<!-- results:t -->\n<!-- /results:t -->\n", renderer.load_results(results))
    assert "`minibatch-mcmc reproduce gmm` on 2026-01-01" in out and "gmm.json" in out


def test_loose_tables_are_found_outside_blocks_only():
    """A table typed outside a results block is reported by line; one inside a block is not."""
    text = "x\n| a | b |\n|---|---:|\n| 1 | 2 |\n<!-- results:t -->\n| a |\n|---|\n<!-- /results:t -->\n"
    assert renderer.loose_tables(text) == [2]


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "results").glob("*.json")), ids=lambda p: p.name)
def test_every_results_file_names_its_command_machine_and_date(path):
    """A results file without its command, machine or date could not be traced to the run that made it."""
    payload = json.loads(path.read_text())
    missing = [k for k in ("command", "machine", "date", "tables") if not payload.get(k)]
    assert not missing, f"{path.name} lacks {missing}"


@pytest.mark.parametrize("name", renderer.QUOTED_DOCS)
def test_no_typed_table_in_the_quoted_docs(name):
    """Every table of reproduction.md and benchmarks.md is rendered from a results file (none typed by hand)."""
    lines = renderer.loose_tables((ROOT / "docs" / name).read_text())
    assert lines == [], f"docs/{name}: tables typed outside a results block at lines {lines}"
