"""Command-line options every experiment shares: one parser helper, presets and overrides, the run folder.

``minibatch-mcmc reproduce NAME ARGS...`` hands ``ARGS`` to the experiment's ``main(argv)``, which
parses them with :func:`experiment_parser` (``--quick``, ``--seed``, ``--name``, ``--out``,
``--no-progress``, ``--results`` and, where the experiment uses them, ``--trials``, ``--num-samples`` and ``--full``)
plus its own options; the risk-vs-wall-clock experiments share :func:`risk_vs_time_parser`. Parse errors are ``ValueError``\\ s, which the CLI prints as ``error: ...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from minibatch_mcmc.checks import check_int, check_positive

Config = TypeVar("Config", bound=tuple)


class ExperimentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are ``ValueError``\\ s naming the experiment (no ``sys.exit``)."""

    def error(self, message: str):
        """Raise instead of printing the usage and exiting."""
        raise ValueError(f"{self.prog}: {message} (options: {self.prog} --help)")


def checked(text: str, convert: Callable[[str], Any], check: Callable[[Any], Any]) -> Any:
    """``check(convert(text))`` with either's ``ValueError`` turned into argparse's ``ArgumentTypeError``."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid {convert.__name__}") from None
    try:
        return check(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (:func:`minibatch_mcmc.checks.check_int`)."""
    return checked(text, int, lambda v: check_int(v, "value", low=1))


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (:func:`minibatch_mcmc.checks.check_positive`)."""
    return checked(text, float, lambda v: check_positive(v, "value"))


def experiment_parser(
    name: str,
    description: str,
    *,
    quick: str = "a CI-sized run",
    trials: str | None = None,
    num_samples: str | None = None,
    full: str | None = None,
) -> ExperimentParser:
    """The parser of ``reproduce NAME``: the shared options, and ``--trials``/``--num-samples``/``--full`` when help for them is given."""
    p = ExperimentParser(
        prog=f"minibatch-mcmc reproduce {name}",
        description=description,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--help-experiment", action="help", help="show this experiment's options and exit (as --help)")
    p.add_argument("--quick", action="store_true", help=quick)
    if full is not None:
        p.add_argument("--full", action="store_true", help=full)
    if trials is not None:
        p.add_argument("--trials", type=positive_int, default=None, help=trials)
    if num_samples is not None:
        p.add_argument("--num-samples", type=positive_int, default=None, help=num_samples)
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--name", default=None, help="run name: output goes to OUT/NAME")
    p.add_argument("--out", default="runs", help="output folder (default: runs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--results",
        default=None,
        metavar="FILE",
        help=f"also write the results file (the figures the docs quote) to FILE, e.g. docs/results/{name}.json",
    )
    return p


def with_presets(
    cfg: Config, opts: argparse.Namespace, quick: Mapping[str, Any], full: Mapping[str, Any] | None = None
) -> Config:
    """``cfg`` with the ``--full`` or ``--quick`` preset applied (both at once is an error)."""
    use_full = bool(getattr(opts, "full", False))
    if use_full and opts.quick:
        raise ValueError("--full and --quick are mutually exclusive")
    if use_full:
        return cfg._replace(**(full or {}))
    return cfg._replace(**quick) if opts.quick else cfg


def with_given(cfg: Config, **values: Any) -> Config:
    """``cfg`` with every setting whose value is not ``None`` replaced."""
    return cfg._replace(**{k: v for k, v in values.items() if v is not None})


def run_dir(opts: argparse.Namespace, default_name: str) -> Path:
    """``OUT/NAME``: the folder a run writes to (``default_name`` when ``--name`` is not given)."""
    return Path(opts.out) / (opts.name or default_name)


def written(out: Path) -> str:
    """The closing line of a run: the folder and the files in it."""
    return f"\nwrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir()))


def risk_vs_time_parser(name: str, description: str, defaults: Any, *, quick: str, full: str) -> ExperimentParser:
    """:func:`experiment_parser` plus the options of the risk-vs-wall-clock experiments (``defaults``: their config's defaults)."""
    p = experiment_parser(
        name,
        description,
        quick=quick,
        full=full,
        trials=f"chains per test (default {defaults.chains})",
        num_samples=f"at most this many steps per chain (default {defaults.max_samples:,})",
    )
    p.add_argument(
        "--time-budget",
        type=positive_float,
        help=f"wall-clock seconds per chain for each test (default {defaults.time_budget:g})",
    )
    p.add_argument("--epsilons", type=parse_epsilons, help="comma-separated AustereMH epsilons; 0 is exact MH")
    p.add_argument("--batch-size", type=positive_int, help="AustereMH / MHminibatch minibatch size m")
    p.add_argument("--reference-samples", type=positive_int, help="steps per chain of the exact reference run")
    return p


def risk_vs_time_config(
    cfg: Config, opts: argparse.Namespace, quick: Mapping[str, Any], full: Mapping[str, Any], **own: Any
) -> Config:
    """``cfg`` with the seed, the ``--quick``/``--full`` preset, then the options of :func:`risk_vs_time_parser` and ``own`` given."""
    cfg = with_presets(cfg._replace(seed=opts.seed), opts, quick, full)
    shared = {
        "batch_size": opts.batch_size,
        "reference_samples": opts.reference_samples,
        "max_samples": opts.num_samples,
        "chains": opts.trials,
        "time_budget": opts.time_budget,
        "epsilons": opts.epsilons,
    }
    return with_given(cfg, **shared, **own)


def parse_epsilons(text: str) -> tuple[float, ...]:
    """Comma-separated AustereMH error levels in ``[0, 1)`` (0 is exact MH), e.g. ``"0,0.05,0.1"``."""
    try:
        eps = tuple(float(e) for e in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated numbers") from None
    if any(not (0 <= e < 1) for e in eps):
        raise argparse.ArgumentTypeError(f"{text!r}: each epsilon must be in [0, 1) (0 is exact MH)")
    return eps


def split_list(text: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated list."""
    return tuple(s.strip() for s in text.split(",") if s.strip())
