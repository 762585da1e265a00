"""The shared experiment options (parser, presets, overrides) and the experiment registry."""

import argparse
from typing import NamedTuple

import pytest

from reproductions.options import (
    experiment_parser,
    parse_epsilons,
    positive_int,
    run_dir,
    with_given,
    with_presets,
)
from reproductions.registry import EXPERIMENTS, experiment, listing


class Settings(NamedTuple):
    size: int = 10
    steps: int = 100
    seed: int = 0


def test_parser_has_the_shared_options_and_raises_value_errors():
    p = experiment_parser("demo-x", "doc", trials="chains", num_samples="steps", full="big")
    opts = p.parse_args(["--quick", "--trials", "3", "--seed", "5", "--name", "n", "--out", "o"])
    assert (opts.quick, opts.full, opts.trials, opts.num_samples, opts.seed) == (True, False, 3, None, 5)
    assert str(run_dir(opts, "default")) == "o/n"
    with pytest.raises(ValueError, match="reproduce demo-x.*--bogus"):
        p.parse_args(["--bogus"])
    with pytest.raises(ValueError, match="--trials"):
        p.parse_args(["--trials", "0"])
    bare = experiment_parser("demo-y", "doc")
    with pytest.raises(ValueError, match="--trials"):
        bare.parse_args(["--trials", "2"])  # options an experiment does not use are refused


def test_presets_then_given_values():
    p = experiment_parser("demo-x", "doc", full="big")
    quick, full = dict(size=1), dict(size=1000, steps=5000)
    assert with_presets(Settings(), p.parse_args([]), quick, full) == Settings()
    assert with_presets(Settings(), p.parse_args(["--quick"]), quick, full) == Settings(size=1)
    assert with_presets(Settings(), p.parse_args(["--full"]), quick, full) == Settings(size=1000, steps=5000)
    with pytest.raises(ValueError, match="mutually exclusive"):
        with_presets(Settings(), p.parse_args(["--full", "--quick"]), quick, full)
    assert with_given(Settings(), size=None, steps=7) == Settings(steps=7)


def test_argparse_types():
    assert positive_int("4") == 4
    assert parse_epsilons("0,0.05") == (0.0, 0.05)
    for bad in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_epsilons("0,1")


def test_registry_names_and_lookup():
    assert experiment("gmm").module.endswith("reproduce_gmm")
    with pytest.raises(ValueError, match="nope.*gmm"):
        experiment("nope")
    text = listing()
    assert all(e.name in text and e.description in text for e in EXPERIMENTS.values())
