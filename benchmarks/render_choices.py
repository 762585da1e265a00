"""Fill the README's "which test and which proposal" tables from the registries, never typed by hand.

A block in a Markdown file

    <!-- choices:tests -->
    ...
    <!-- /choices:tests -->

is replaced by the table of ``acceptance.registry.TESTS`` (``tests``) or of ``warmup.laplace_moves.KINDS`` with
``"auto"`` (``proposals``): each row's name, factory, decision rule, rows read and tuning come from the row itself;
the "when" column is the advice of ``WHEN`` below, or, for a row without advice, the first line of the factory's (or
the builder's) docstring. A new registry row is in the table at the next render; ``tests/test_docs_for_users.py``
fails while the README's table differs from the registries.

    .venv/bin/python benchmarks/render_choices.py            # rewrite README.md's blocks
    .venv/bin/python benchmarks/render_choices.py --check    # exit 1 if a block differs from the registries
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- choices:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /choices:(?P=name) -->)", re.DOTALL)

WHEN = {
    "penalty": "The default: a Metropolis-type test on a minibatch (grown while too noisy) less a penalty for its "
    "noise; acceptance tends to 1 with a good proposal. Approximate (it takes the minibatch mean as normal).",
    "mhminibatch": "Seita et al.'s Barker-type test with its correction variable, the minibatch grown while too noisy: "
    "the papers' reproductions. Approximate.",
    "smh": "Exact minibatch MH for a GLM (logistic, probit, Poisson, Gaussian): the posterior exactly, a Poisson "
    "number of rows per step from the GLM proxy's bounds.",
    "mhss": "Exact, as `smh`, by Prado, Nemeth and Sherlock's MH-SS (first or second order, as the proxy).",
    "tunamh": "Exact, as `mhss`, by TunaMH: its `chi > 0` trades extra rows per step for acceptance.",
    "austere": "AustereMH: a sequential t-test, minibatches grown until confident. Approximate, error per decision "
    "set by its threshold.",
    "mhsublhd": "MHSubLhd: confidence intervals from a bound on the terms' range (a full pass unless the model "
    "gives one). Approximate.",
    "naive": "The plug-in estimate from a fixed minibatch in a Metropolis test: biased, for comparison only.",
    "barker": "Exact Barker test on all N rows: the reference MHminibatch approximates.",
    "metropolis": "Exact Metropolis-Hastings on all N rows: the reference, and the warm-up's choice below 50 rows.",
    "proxy_hmc": "The default: leapfrog on the data-free proxy posterior, nothing to tune; best when the posterior "
    "is near its Laplace fit.",
    "mixture": "Proxy HMC, now and then a tuned random walk: for a posterior the proxy fits poorly, or chains "
    "started far from the mode.",
    "langevin": "Proxy-gradient MALA with a tuned step: moves locally where the proxy is a poor global fit.",
    "random_walk": "Random walk shaped by the Laplace covariance, tuned: the safest local move, the slowest.",
    "independence": "Independent draws from the proxy posterior's Laplace fit (Gaussian): near-Gaussian posteriors.",
    "independence_t": "As `independence` with t tails: posteriors whose tails may be heavier than Gaussian.",
    "auto": "Measures those on short runs and keeps the most effective draws per second (its cost is the "
    "`choose` phase).",
}
"""Advice per registry name: what the registries cannot say (when to pick it). Optional: a row without advice shows the
first line of its factory's docstring."""
RULES = {
    "metropolis": "Metropolis (tends to 1)",
    "barker": "Barker (at most 1/2)",
    "factorised": "factorised Metropolis",
}
"""How each ``decision_rule`` accepts, for the table."""


def first_line(obj) -> str:
    """The first line of ``obj``'s docstring (empty if it has none)."""
    return (inspect.getdoc(obj) or "").strip().splitlines()[0] if inspect.getdoc(obj) else ""


def factory_name(row) -> str:
    """The public factory building ``row``'s test: its builder if public, else the ``mm`` factory returning its class."""
    import minibatch_mcmc as mm

    name = getattr(row.build, "__name__", "")
    if name in mm.ACCEPTANCE_TESTS:
        return name
    found = [
        n
        for n in mm.ACCEPTANCE_TESTS
        if inspect.signature(getattr(mm, n)).return_annotation in (row.kind, row.kind.__name__)
    ]
    if not found:
        raise ValueError(
            f"test {row.name!r}: no factory in minibatch_mcmc.ACCEPTANCE_TESTS returns {row.kind.__name__}"
        )
    return found[0]


def rows_read(contract) -> str:
    """What a test reads per step, from its contract: per-datum bounds, all rows (no optional record), or a minibatch."""
    if contract.reads_bounds:
        return "rows drawn by per-datum bounds (a GLM proxy's)"
    return "all N rows" if contract.records == () else "a minibatch"


def tests_table() -> dict:
    """The rows of ``acceptance.registry.TESTS``: name, factory, decision rule, rows read, when to pick it."""
    import minibatch_mcmc as mm
    from minibatch_mcmc.acceptance.registry import TESTS
    from minibatch_mcmc.warmup import DEFAULT_TEST

    rows = []
    for name, row in TESTS.items():
        factory = factory_name(row)
        label = f"`{name}` (default)" if name == DEFAULT_TEST else f"`{name}`"
        rows.append(
            [
                label,
                f"`mm.{factory}`",
                RULES.get(row.build().decision_rule, row.build().decision_rule),
                rows_read(row.contract),
                WHEN.get(name) or first_line(getattr(mm, factory)),
            ]
        )
    return {"columns": ["`test=`", "factory", "acceptance rule", "reads", "when"], "rows": rows}


def proposals_table() -> dict:
    """The rows of ``warmup.laplace_moves.KINDS`` and ``"auto"``: name, what is tuned, its target acceptance, when."""
    from minibatch_mcmc.warmup import AUTO_CANDIDATES, PROPOSALS
    from minibatch_mcmc.warmup.laplace_moves import DEFAULT_PROPOSAL, GUARDED_PROPOSAL, KINDS, TARGET_ACCEPT

    def target(kind) -> str:
        if kind.target is None:
            return "-"
        return " / ".join(f"{TARGET_ACCEPT[(rule, kind.target)]:g}" for rule in ("metropolis", "barker"))

    def tuned(name: str, kind) -> str:
        if kind.tuned_move is None:
            return "nothing: set by the Laplace fit"
        return "its scale" if kind.tuned_move == name else f"its `{kind.tuned_move}` move's scale"

    def label(name: str) -> str:
        if name == DEFAULT_PROPOSAL:
            return f"`{name}` (default)"
        if name == GUARDED_PROPOSAL:
            return f"`{name}` (default after an exact stratum or several modes)"
        return f"`{name}`"

    rows = [
        [label(name), tuned(name, k), target(k), WHEN.get(name) or first_line(k.build)] for name, k in KINDS.items()
    ]
    for name in PROPOSALS:
        if name not in KINDS:  # "auto": a choice among AUTO_CANDIDATES, not a move of its own
            rows.append(
                [
                    label(name),
                    "the choice among " + ", ".join(f"`{c}`" for c in AUTO_CANDIDATES),
                    "-",
                    WHEN.get(name, ""),
                ]
            )
    return {
        "columns": ["`proposal=`", "the warm-up tunes", "target acceptance (Metropolis / Barker rule)", "when"],
        "rows": rows,
    }


TABLES = {"tests": tests_table, "proposals": proposals_table}
"""Block name -> the function building its table."""


def markdown_table(table: dict) -> str:
    """A Markdown table from ``{"columns": [...], "rows": [[...]]}``, every column left-aligned."""
    lines = ["| " + " | ".join(table["columns"]) + " |", "|" + "|".join(":---" for _ in table["columns"]) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in table["rows"]]
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """``text`` with every choices block replaced by its table (an unknown block name is an error)."""

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"choices block {name!r}: not one of {sorted(TABLES)}")
        return match.group(1) + markdown_table(TABLES[name]()) + match.group(4)

    return BLOCK.sub(fill, text)


def main() -> int:
    """Rewrite the blocks, or with ``--check`` report a stale one (exit 1)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, default=[README], help="Markdown files (default: README.md)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is out of date")
    args = ap.parse_args()
    stale = False
    for path in args.files:
        text = path.read_text()
        new = render(text)
        if new != text and args.check:
            print(
                f"{path}: choices tables differ from the registries; run benchmarks/render_choices.py", file=sys.stderr
            )
            stale = True
        elif new != text:
            path.write_text(new)
            print(f"rewrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
