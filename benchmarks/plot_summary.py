"""Draw the benchmarks summary's plot from its table, whose cells are value markers of the results files.

The first table of ``docs/benchmarks-summary.md`` (rows: models; columns: machine and N; each cell a
``<!-- value:KEY -->`` marker or ``-``) is drawn as grouped horizontal bars on a log scale, the values read from
``docs/results/*.json`` (``render_results.load_results``), with a line at 1 (as fast as NUTS). The SVG is written by
hand, deterministically, so ``--check`` compares it with the file byte for byte and no plotting library is needed.

    .venv/bin/python benchmarks/plot_summary.py            # rewrite docs/figures/first_fit_vs_nuts.svg
    .venv/bin/python benchmarks/plot_summary.py --check    # exit 1 if it differs from what the results draw
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from render_results import DOCS, load_results  # noqa: E402 - benchmarks/ is not a package

SUMMARY = DOCS / "benchmarks-summary.md"
FIGURE = DOCS / "figures" / "first_fit_vs_nuts.svg"
COLOURS = ("#4c72b0", "#55a868", "#dd8452", "#c44e52", "#8172b3", "#937860")
"""One colour per column of the table (matplotlib's 'deep' palette)."""
MARKER = re.compile(r"<!-- value:(?P<key>[\w.:\[\]-]+) -->")


class Grid(NamedTuple):
    """The table: column labels, and per row its label and one value (as the results file writes it, or None) per column."""

    columns: list[str]
    rows: list[tuple[str, list[str | None]]]


def table_grid(text: str, values: dict[str, str]) -> Grid:
    """The first Markdown table of ``text`` whose cells hold value markers, with each marker's value."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    header, body = cells[0], [r for r in cells[2:] if any(MARKER.search(c) for c in r)]
    if not body:
        raise ValueError(f"{SUMMARY}: no table row with a value marker")

    def value(cell: str) -> str | None:
        m = MARKER.search(cell)
        return None if m is None else values[m["key"]]

    return Grid(header[1:], [(r[0], [value(c) for c in r[1:]]) for r in body])


def svg(grid: Grid) -> str:
    """Grouped horizontal bars, log10 axis, a dashed line at 1, a legend: the SVG text."""
    known = [float(v) for _, vals in grid.rows for v in vals if v is not None]
    lo, hi = math.floor(math.log10(min(known + [1.0]))), math.ceil(math.log10(max(known + [1.0])))
    left, width, bar, gap, top = 150, 520, 12, 14, 40
    group = bar * len(grid.columns) + gap
    height = top + group * len(grid.rows) + 40 + 18 * len(grid.columns)
    x = lambda v: left + width * (math.log10(v) - lo) / (hi - lo)  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 40}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        '<text x="10" y="18" font-size="13">Effective draws per second, auto_sample over NUTS (log scale; right of '
        "the dashed line: faster)</text>",
    ]
    axis_y = top + group * len(grid.rows)
    for k in range(lo, hi + 1):
        xk = x(10.0**k)
        out.append(f'<line x1="{xk:.1f}" y1="{top - 6}" x2="{xk:.1f}" y2="{axis_y}" stroke="#dddddd"/>')
        out.append(f'<text x="{xk:.1f}" y="{axis_y + 16}" text-anchor="middle">{10.0**k:g}</text>')
    for i, (label, vals) in enumerate(grid.rows):
        y0 = top + i * group
        out.append(f'<text x="{left - 8}" y="{y0 + bar * len(vals) / 2 + 4:.1f}" text-anchor="end">{label}</text>')
        for j, v in enumerate(vals):
            if v is None:
                continue
            y = y0 + j * bar
            end = x(float(v))
            out.append(f'<rect x="{left}" y="{y}" width="{end - left:.1f}" height="{bar - 2}" fill="{COLOURS[j]}"/>')
            out.append(f'<text x="{end + 4:.1f}" y="{y + bar - 3}" font-size="10">{v}</text>')
    out.append(
        f'<line x1="{x(1.0):.1f}" y1="{top - 6}" x2="{x(1.0):.1f}" y2="{axis_y}" stroke="black" stroke-dasharray="4 3"/>'
    )
    for j, column in enumerate(grid.columns):
        y = axis_y + 32 + 18 * j
        out.append(f'<rect x="{left}" y="{y}" width="12" height="12" fill="{COLOURS[j]}"/>')
        out.append(f'<text x="{left + 18}" y="{y + 10}">{column}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def render() -> str:
    """The SVG the summary's table and the results files draw now."""
    return svg(table_grid(SUMMARY.read_text(), load_results().values))


def main() -> int:
    """Rewrite the figure, or with ``--check`` exit 1 if it is out of date."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the figure is out of date")
    args = ap.parse_args()
    text = render()
    if args.check:
        if not FIGURE.exists() or FIGURE.read_text() != text:
            print(f"{FIGURE} differs from what the results draw; run benchmarks/plot_summary.py", file=sys.stderr)
            return 1
        return 0
    if not FIGURE.exists() or FIGURE.read_text() != text:
        FIGURE.write_text(text)
        print(f"wrote {FIGURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
