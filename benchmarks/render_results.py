"""Fill the results blocks of the docs from the benchmarks' JSON results files.

A block in a Markdown file

    <!-- results:NAME -->
    ...
    <!-- /results:NAME -->

is replaced by the Markdown table ``NAME`` found under ``"tables"`` in one of ``docs/results/*.json``
(``{"columns": [...], "rows": [[...], ...]}``, cells already formatted by the benchmark that wrote it),
followed by a line naming the results file and the command that wrote it. A single figure in prose,

    <!-- value:KEY -->168.1<!-- /value -->

is replaced by ``"values"[KEY]`` of the results files. Tables in the quoted docs
(``QUOTED_DOCS``) may appear only inside a results block (``--check`` reports the others).

    .venv/bin/python benchmarks/render_results.py            # rewrite every docs/*.md with a results block
    .venv/bin/python benchmarks/render_results.py --check    # exit 1 if a block differs from what the JSON renders
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.DOTALL)
VALUE = re.compile(r"(<!-- value:(?P<key>[\w.:\[\]-]+) -->)(?P<body>[^\n]*?)(<!-- /value -->)")
QUOTED_DOCS = ("reproduction.md", "benchmarks.md")
"""The docs whose every table must come from a results file."""
TABLE_RULE = re.compile(r"^\|[\s:|-]+\|\s*$")


class Results(NamedTuple):
    """Every table and value of the results files, and the file each came from."""

    tables: dict[str, dict]
    values: dict[str, str]
    source: dict[str, str]
    """Table name -> the line naming its results file and command."""


def source_line(path: Path, payload: dict) -> str:
    """``Results file ... written by ...``: where a rendered table comes from."""
    runs = payload.get("runs") or []
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if len(runs) > 1:
        how = f"written by {len(runs)} runs (commands, machine and dates in the file)"
    else:
        cmd = payload.get("command")
        how = f"written by `{cmd}` on {payload.get('date', 'an unrecorded date')}" if cmd else "no command recorded"
    return f"<sub>Results file `{rel}`, {how}.</sub>\n"


def load_results(results_dir: Path = RESULTS) -> Results:
    """Tables and values of every ``*.json`` in ``results_dir`` (a name defined twice is an error)."""
    out = Results({}, {}, {})
    for path in sorted(results_dir.glob("*.json")):
        payload = json.loads(path.read_text())
        for name, table in payload.get("tables", {}).items():
            if name in out.tables:
                raise ValueError(f"table {name!r} is defined twice (again in {path})")
            out.tables[name] = table
            out.source[name] = source_line(path, payload)
        for key, value in payload.get("values", {}).items():
            if key in out.values:
                raise ValueError(f"value {key!r} is defined twice (again in {path})")
            out.values[key] = str(value)
    return out


def load_tables(results_dir: Path = RESULTS) -> dict[str, dict]:
    """Every table of every JSON results file, by name (a name defined twice is an error)."""
    return load_results(results_dir).tables


def markdown_table(table: dict) -> str:
    """A Markdown table from ``{"columns": [...], "rows": [[...]]}``; text columns left-aligned, numbers right-aligned."""
    cols, rows = table["columns"], table["rows"]
    if any(len(r) != len(cols) for r in rows):
        raise ValueError(f"a row does not have the {len(cols)} cells of the columns {cols}")

    def numeric(j: int) -> bool:
        return all(re.fullmatch(r"[<>]?\s*[-+0-9.,e]+", r[j].strip()) or r[j].strip() == "-" for r in rows)

    align = ["---:" if rows and numeric(j) else ":---" for j in range(len(cols))]
    lines = ["| " + " | ".join(str(c).replace("|", "\\|") for c in cols) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render(text: str, tables: dict[str, dict] | Results) -> str:
    """``text`` with every results block replaced by its table and every value marker by its value.

    An unknown table or value name is an error. Given a bare ``{name: table}`` dict (no source,
    no values), blocks get the table alone.
    """
    res = tables if isinstance(tables, Results) else Results(dict(tables), {}, {})

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in res.tables:
            raise KeyError(f"results block {name!r}: no table of that name in {RESULTS}/*.json")
        source = "\n" + res.source[name] if name in res.source else ""
        return match.group(1) + markdown_table(res.tables[name]) + source + match.group(4)

    def fill_value(match: re.Match) -> str:
        key = match["key"]
        if key not in res.values:
            raise KeyError(f"value marker {key!r}: no value of that name in {RESULTS}/*.json")
        return match.group(1) + res.values[key] + match.group(4)

    return VALUE.sub(fill_value, BLOCK.sub(fill, text))


def loose_tables(text: str) -> list[int]:
    """Line numbers (1-based) of Markdown tables outside any results block."""
    kept = BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text).splitlines()
    return [
        i for i in range(1, len(kept)) if kept[i - 1].lstrip().startswith("|") and TABLE_RULE.match(kept[i].strip())
    ]


def docs_with_blocks(docs_dir: Path = DOCS) -> list[Path]:
    """The Markdown files of ``docs_dir`` (and the README beside it) that hold at least one results block or value marker."""
    candidates = sorted(docs_dir.glob("*.md")) + [p for p in [docs_dir.parent / "README.md"] if p.exists()]
    return [p for p in candidates if BLOCK.search(p.read_text()) or VALUE.search(p.read_text())]


def stale(paths: list[Path], tables: dict[str, dict] | Results) -> list[Path]:
    """The files whose results blocks differ from what the JSON renders."""
    return [p for p in paths if render(p.read_text(), tables) != p.read_text()]


def main() -> int:
    """Rewrite the results blocks, or with ``--check`` report the stale ones (exit 1)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="Markdown files (default: every docs/*.md and the README with a results block or value)",
    )
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is out of date")
    args = ap.parse_args()
    paths = args.files or docs_with_blocks()
    tables = load_results()
    if args.check:
        bad = stale(paths, tables)
        for p in bad:
            print(
                f"{p}: results blocks differ from {RESULTS}/*.json; run benchmarks/render_results.py", file=sys.stderr
            )
        loose = {name: loose_tables((DOCS / name).read_text()) for name in QUOTED_DOCS}
        for name, lines in loose.items():
            if lines:
                print(f"docs/{name}: tables outside a results block at lines {lines}", file=sys.stderr)
        return 1 if bad or any(loose.values()) else 0
    for p in paths:
        text = p.read_text()
        new = render(text, tables)
        if new != text:
            p.write_text(new)
            print(f"rewrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
