"""Shared pieces of the risk-vs-wall-clock experiments (``rj-selection``, ``ica``): the exact reference run,
the timed run of every test, their data use and JSON, and the closing report."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.samplers import SampleResult, sample
from reproductions.results import command_line, results_payload, table, write_results
from reproductions.timed import TimedRun, timed_sample, wall_clock


def exact_reference(model, data, start, proposal, cfg: Any) -> SampleResult:
    """The exact-MH reference: ``cfg.chains`` chains of ``cfg.reference_samples`` steps (key ``cfg.seed + 100``)."""
    return sample(
        model,
        data,
        start,
        proposal=proposal,
        test=MetropolisTest(),
        num_samples=cfg.reference_samples,
        num_chains=cfg.chains,
        key=cfg.seed + 100,
        progress=False,
        block_size=500,
    )


def timed_runs(model, data, start, proposal, tests: dict, cfg: Any) -> Iterator[tuple[str, TimedRun]]:
    """Each test by label, run for ``cfg.chains`` chains of at most ``cfg.time_budget`` s (the ``i``-th with key ``cfg.seed + i``)."""
    for i, (label, test) in enumerate(tests.items()):
        print(f"{label}: {cfg.chains} chains x {cfg.time_budget:g} s", flush=True)
        yield (
            label,
            timed_sample(
                model, data, start, proposal, test, cfg.max_samples, cfg.chains, cfg.seed + i, cfg.time_budget
            ),
        )


def data_use(run: TimedRun, n_data: int) -> dict:
    """Wall seconds and steps per chain, mean minibatch size and its fraction of the ``n_data`` points."""
    mean_batch = float(np.mean(run.records["batch_size"]))
    return {
        "wall_s": float(run.times[:, -1].mean()),
        "steps": int(run.times.shape[1]),
        "mean_batch": mean_batch,
        "data_fraction": mean_batch / n_data,
    }


def since_burn_in(times: np.ndarray, keep: int) -> np.ndarray:
    """``(R, T)`` clock readings from draw ``keep`` on, counted from the end of the burn-in."""
    return times[:, keep:] - (times[:, keep - 1 : keep] if keep else 0.0)


def risk_curves_json(curves: dict) -> dict:
    """Risk curves by label as plain lists, for ``summary.json``."""
    return {k: {f: getattr(c, f).tolist() for f in c._fields} for k, c in curves.items()}


class Report(NamedTuple):
    """What a risk-vs-time run prints, and the results tables, values and figure names it writes."""

    text: str
    tables: dict
    values: dict[str, str]
    figures: list[str]


def label_key(label: str) -> str:
    """A test's label as a value-key part: ``eps=0.1`` -> ``eps_0.1``, ``MHminibatch`` -> ``mhminibatch``."""
    return label.replace("=", "_").replace(" ", "_").lower()


def display_label(label: str) -> str:
    """A test's label as the docs' tables show it: ``eps=0 (exact MH)``, ``AustereMH eps=0.1``, ``MHminibatch``."""
    if label == "eps=0":
        return "eps=0 (exact MH)"
    return f"AustereMH {label}" if label.startswith("eps=") else label


def row_values(prefix: str, rows: dict, formats: dict[str, str]) -> dict[str, str]:
    """``PREFIX.LABEL.FIELD`` -> the row's field formatted with ``formats[FIELD]``, for every row and field."""
    return {
        f"{prefix}.{label_key(label)}.{f}": format(r[f], spec)
        for label, r in rows.items()
        for f, spec in formats.items()
    }


def row_cells(label: str, r: dict, formats: dict[str, str]) -> list[str]:
    """One test's row: its label, then each field of ``formats`` formatted."""
    return [label, *(format(r[f], spec) for f, spec in formats.items())]


def markdown_table(header: str, columns: Sequence[str], rows: dict, formats: dict[str, str]) -> str:
    """``tables.md``: a header line and the rows as a Markdown table."""
    lines = [header, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row_cells(label, r, formats)) + " |" for label, r in rows.items()]
    return "\n".join(lines) + "\n"


def result_table(columns: Sequence[str], rows: dict, formats: dict[str, str], time_budget: float) -> dict:
    """The results table of the tests (labels as in the docs; the steps column names the time budget)."""
    cols = [columns[0], f"steps per chain in {time_budget:g} s", *columns[2:]]
    return table(cols, [row_cells(display_label(label), r, formats) for label, r in rows.items()])


def setup_table(paper: Sequence[tuple[str, str]], ours: Sequence[str]) -> dict:
    """The paper's set-up (``(item, text)`` pairs) beside this run's, item by item."""
    return table(["", "paper", "this run"], [[item, text, o] for (item, text), o in zip(paper, ours, strict=True)])


def run_timed_and_print(
    run: Callable[..., Report], experiment: str, argv: Sequence[str], results_file: str | None, cfg: Any, out: Path
) -> int:
    """Run ``run(cfg, out)``, print its text and the run time, and write the results file (``--results``: a copy)."""
    report, seconds = wall_clock(run, cfg, out)
    print(report.text)
    values = {**report.values, f"{experiment.replace('-', '_')}.wall_min": f"{seconds / 60:.0f}"}
    payload = results_payload(
        experiment,
        command_line(experiment, argv),
        config=cfg,
        tables=report.tables,
        values=values,
        figures=report.figures,
    )
    write_results(out, payload, copy_to=results_file)
    print(f"wrote {out}/ in {seconds:.0f} s")
    return 0
