"""Fill the results blocks of the docs from the benchmarks' JSON results files.

A block in a Markdown file

    <!-- results:NAME -->
    ...
    <!-- /results:NAME -->

is replaced by the Markdown table ``NAME`` found under ``"tables"`` in one of ``docs/results/*.json``
(``{"columns": [...], "rows": [[...], ...]}``, cells already formatted by the benchmark that wrote it).

    .venv/bin/python benchmarks/render_results.py            # rewrite every docs/*.md with a results block
    .venv/bin/python benchmarks/render_results.py --check    # exit 1 if a block differs from what the JSON renders
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.DOTALL)


def load_tables(results_dir: Path = RESULTS) -> dict[str, dict]:
    """Every table of every JSON results file, by name (a name defined twice is an error)."""
    tables: dict[str, dict] = {}
    for path in sorted(results_dir.glob("*.json")):
        for name, table in json.loads(path.read_text()).get("tables", {}).items():
            if name in tables:
                raise ValueError(f"table {name!r} is defined twice (again in {path})")
            tables[name] = table
    return tables


def markdown_table(table: dict) -> str:
    """A Markdown table from ``{"columns": [...], "rows": [[...]]}``; text columns left-aligned, numbers right-aligned."""
    cols, rows = table["columns"], table["rows"]
    if any(len(r) != len(cols) for r in rows):
        raise ValueError(f"a row does not have the {len(cols)} cells of the columns {cols}")

    def numeric(j: int) -> bool:
        return all(re.fullmatch(r"[<>]?\s*[-+0-9.,e]+", r[j].strip()) or r[j].strip() == "-" for r in rows)

    align = ["---:" if rows and numeric(j) else ":---" for j in range(len(cols))]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render(text: str, tables: dict[str, dict]) -> str:
    """``text`` with every results block replaced by its table (an unknown name is an error)."""

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in tables:
            raise KeyError(f"results block {name!r}: no table of that name in {RESULTS}/*.json")
        return match.group(1) + markdown_table(tables[name]) + match.group(4)

    return BLOCK.sub(fill, text)


def docs_with_blocks(docs_dir: Path = DOCS) -> list[Path]:
    """The Markdown files of ``docs_dir`` that hold at least one results block."""
    return [p for p in sorted(docs_dir.glob("*.md")) if BLOCK.search(p.read_text())]


def stale(paths: list[Path], tables: dict[str, dict]) -> list[Path]:
    """The files whose results blocks differ from what the JSON renders."""
    return [p for p in paths if render(p.read_text(), tables) != p.read_text()]


def main() -> int:
    """Rewrite the results blocks, or with ``--check`` report the stale ones (exit 1)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: every docs/*.md with a results block)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is out of date")
    args = ap.parse_args()
    paths = args.files or docs_with_blocks()
    tables = load_tables()
    if args.check:
        bad = stale(paths, tables)
        for p in bad:
            print(f"{p}: results blocks differ from {RESULTS}/*.json; run benchmarks/render_results.py", file=sys.stderr)
        return 1 if bad else 0
    for p in paths:
        text = p.read_text()
        new = render(text, tables)
        if new != text:
            p.write_text(new)
            print(f"rewrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
