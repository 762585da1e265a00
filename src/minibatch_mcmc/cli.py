"""Command line: minibatch-mcmc demo, sample (your model and data, or the built-in mixture; resumable, multi-device),
reproduce NAME (from a repository checkout: the reproductions are not in the wheel) and correction."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

from minibatch_mcmc.acceptance.registry import TESTS
from minibatch_mcmc.checks import check_int
from minibatch_mcmc.cli_inputs import BATCH_SIZE, SIGMA, devices_arg, model_test, sample_test, user_model
from minibatch_mcmc.cli_launch import add_launch_arguments, launch_settings, start_processes
from minibatch_mcmc.data.indexing import MAX_DATA
from minibatch_mcmc.warmup import PROPOSALS

INTERRUPTED = 130
"""Exit status of a run stopped by Ctrl-C (SIGINT), after its finished draws were written: 128 + SIGINT."""
REPRODUCTIONS = "reproductions"
"""The repository's folder (and Python package) of the papers' reproductions; the wheel does not carry it."""
DEMO_ROWS, DEMO_DIM = 1_000_000, 10
"""The demo's logistic regression: rows and coefficients (``--quick``: a tenth of the rows)."""


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1")
    return int(text)


def reproductions_root(start: Path, source: Path = Path(__file__)) -> Path:
    """The repository checkout whose ``reproductions/`` folder holds the papers' reproductions: ``start`` or a folder
    above it, else the checkout holding ``source`` (this module, in an editable install); a ValueError if neither."""
    for root in (start, *start.parents, source.resolve().parents[2]):
        if (root / REPRODUCTIONS / "registry.py").is_file():
            return root
    raise ValueError(
        f"no {REPRODUCTIONS}/ folder in {start} or above it: the papers' reproductions ship with the repository, "
        "not the installed package; run `minibatch-mcmc reproduce` in a checkout (pip install -e '.[reproductions]')"
    )


def reproductions_registry() -> ModuleType:
    """``reproductions.registry`` of the checkout :func:`reproductions_root` finds from the working directory."""
    root = str(reproductions_root(Path.cwd()))
    if REPRODUCTIONS not in sys.modules and root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"{REPRODUCTIONS}.registry")


def _cmd_demo(args: argparse.Namespace) -> int:
    """``auto_sample``'s defaults on a tall logistic regression: the warm-up's choices, then the run's summary."""
    import jax
    import jax.numpy as jnp

    from minibatch_mcmc.models import logistic_regression, make_logistic_data
    from minibatch_mcmc.warmup import auto_sample, fit_cost

    n = args.n_data or (DEMO_ROWS // 10 if args.quick else DEMO_ROWS)
    check_int(n, "--n-data", 1, MAX_DATA, "checked before the data are generated")
    data, theta_true = make_logistic_data(jax.random.key(args.seed), n, DEMO_DIM)
    print(
        f"Logistic regression at temperature 1: N={n:,} rows, d={DEMO_DIM}, {args.chains} chains x {args.num_samples} draws "
        "with auto_sample's defaults (a warm-up: mode, Laplace, Taylor proxy, its choice of proposal and test)",
        flush=True,
    )
    result, w = auto_sample(
        logistic_regression(prior_scale=10.0),
        data,
        jnp.zeros(DEMO_DIM),
        num_samples=args.num_samples,
        num_chains=args.chains,
        key=args.seed + 1,
        progress=not args.no_progress,
    )
    print(f"  proposal {w.kind} ({w.why}), test {w.test.name}")
    print(f"  warm-up: {w.total_data / n:.2f} passes over the data, {w.total_seconds:.1f} s")
    print(fit_cost(warm=w).table())
    print(f"  true coefficients: {' '.join(f'{v:.3f}' for v in theta_true.tolist())}")
    return report(args, result)


MIXTURE_TEST = "mhminibatch"
"""The ``sample`` command's test for the built-in mixture (Seita et al. 6.1) unless ``--test`` names one; with ``--model``
it is ``auto_sample``'s default."""


def _cmd_sample(args: argparse.Namespace) -> int:
    """Sample your model (``--model``/``--data``: warm-up, then the chains) or the Section 6.1 mixture."""
    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR (the directory of the interrupted run)")
    if args.model is None and launch_settings(args) is not None:
        raise ValueError("--coordinator/--num-processes/--process-id/--distributed split --data: they need --model")
    processes = start_processes(args)  # jax.distributed first, before anything compiles
    if args.proposal is not None and args.model is None:
        raise ValueError(
            f"--proposal {args.proposal} applies to --model; the mixture samples by random walk (--proposal-sd)"
        )
    common = dict(
        test=model_test(args)
        if args.model is not None
        else sample_test(args.test or MIXTURE_TEST, args.batch_size, args.sigma),
        num_samples=args.num_samples,
        num_chains=args.chains,
        temperature=args.temperature,
        block_size=args.block_size,
        progress=not args.no_progress,
        devices=devices_arg(args.devices),
        checkpoint_dir=args.checkpoint,
        resume=args.resume,
    )
    if args.model is not None:
        from minibatch_mcmc.samplers.phase_cost import PhaseClock
        from minibatch_mcmc.warmup import auto_sample, fit_cost

        with PhaseClock("load", 1) as clock:  # reading the data file and any NumPyro conversion
            model, data, start = user_model(args, split=processes > 1)
        kind = {} if args.proposal is None else {"proposal": args.proposal}
        print(
            f"{model.name}: K={args.temperature:g}, test {common['test'].name if common['test'] else 'default'}, "
            f"{args.chains} chain(s) x {args.num_samples} steps after an automatic warm-up (mode, Laplace, Taylor proxy, "
            "proposal)",
            flush=True,
        )
        result, w = auto_sample(model, data, start, key=args.seed + 1, **kind, **common)
        print(f"  proposal {w.kind} ({w.why}), test {w.test.name}")
        print(f"  warm-up: {w.total_data:,} data points read, {w.total_seconds:.1f} s")
        print(fit_cost(warm=w, before={"load": clock.cost(0)}).table())
    else:
        result = mixture(args, common)
    if processes > 1 and not is_first_process():  # every process holds the same draws: process 0 writes them
        return 0
    return report(args, result)


def is_first_process() -> bool:
    """Whether this is process 0 of ``jax.distributed`` (or the only process)."""
    import jax

    return jax.process_index() == 0


def mixture(args: argparse.Namespace, common: dict):
    """The Section 6.1 mixture posterior by random walk (``--n-data`` points)."""
    import jax
    import jax.numpy as jnp

    from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
    from minibatch_mcmc.proposals import random_walk
    from minibatch_mcmc.samplers import sample

    check_int(args.n_data, "--n-data", 1, MAX_DATA, "checked before the data are generated")
    data = make_mixture_data(jax.random.key(args.seed), args.n_data)
    print(
        f"Gaussian mixture (Seita et al. 6.1): N={args.n_data:,}, K={args.temperature:g}, test {args.test or MIXTURE_TEST}, "
        f"{args.chains} chain(s) x {args.num_samples} steps"
        + (f", checkpoints in {args.checkpoint}" + (" (resuming)" if args.resume else "") if args.checkpoint else ""),
        flush=True,
    )
    return sample(
        gaussian_mixture(),
        data,
        jnp.zeros(2, jnp.float32),
        proposal=random_walk(scale=args.proposal_sd),
        key=args.seed + 1,
        **common,
    )


def report(args: argparse.Namespace, result) -> int:
    """Write ``posterior.nc``, print the summary and the posterior table; exit status 130 if interrupted."""
    out = Path(args.out) / args.name
    out.mkdir(parents=True, exist_ok=True)
    path = out / "posterior.nc"
    result.to_inference_data().to_netcdf(str(path))
    summary = result.summary()
    table = summary.pop("posterior")
    for k, v in summary.items():
        print(f"  {k:<24} {v}")
    if table is not None:
        print(table.to_string())
    print(f"wrote {path}")
    if result.interrupted:
        steps = result.records["accepted"].shape[1]
        print(
            f"minibatch-mcmc: interrupted after {steps} of {args.num_samples} steps; the finished draws are in {path}",
            file=sys.stderr,
        )
        return INTERRUPTED
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    """Reproduce a paper experiment from the repository's ``reproductions/``: its own ``main`` parses the arguments after its name."""
    registry = reproductions_registry()
    if args.list:
        print(registry.listing())
        return 0
    if args.experiment is None:
        raise ValueError("reproduce needs an experiment name; `minibatch-mcmc reproduce --list` lists them")
    return registry.experiment(args.experiment).main(args.experiment_args)


def _cmd_correction(args: argparse.Namespace) -> int:
    """Print the correction distribution's error for a sigma."""
    from minibatch_mcmc.acceptance.correction import format_correction_report

    print(format_correction_report(args.sigma))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its sub-commands."""
    p = argparse.ArgumentParser(prog="minibatch-mcmc", description=__doc__, allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser(
        "demo",
        help=f"auto_sample's defaults (proxy HMC + penalty test after an automatic warm-up) on a {DEMO_ROWS:,}-row "
        "logistic regression at temperature 1: the warm-up's choices and the posterior summary",
    )
    d.add_argument(
        "--n-data", type=positive_int, default=None, help=f"rows N (default {DEMO_ROWS:,}; --quick: a tenth)"
    )
    d.add_argument("--num-samples", type=positive_int, default=1000, help="draws per chain (default 1000)")
    d.add_argument("--chains", type=positive_int, default=4, help="chains (default 4)")
    d.add_argument("--quick", action="store_true", help=f"{DEMO_ROWS // 10:,} rows")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--name", default="demo", help="run name: output goes to OUT/NAME (default: demo)")
    d.add_argument("--out", default="runs", help="output folder (default: runs)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_demo)
    r = sub.add_parser(
        "reproduce",
        help="reproduce a paper experiment (tables and figures under runs/; from a repository checkout)",
        description="Reproduce a paper experiment. Every option after NAME is the experiment's: "
        "minibatch-mcmc reproduce NAME --help lists them (--quick, --seed, --out, --name, ... and its own).",
    )
    r.add_argument("--list", action="store_true", help="list the experiments and exit")
    r.add_argument(
        "experiment", nargs="?", metavar="NAME", help="an experiment of reproductions/registry.py (--list lists them)"
    )
    r.add_argument("experiment_args", nargs=argparse.REMAINDER, metavar="...", help="the experiment's options")
    r.set_defaults(func=_cmd_reproduce)
    sp = sub.add_parser(
        "sample",
        help="sample your model (--model, --data) or the built-in 6.1 mixture, at temperature 1 unless --temperature",
        description="Sample the posterior of your model: --model MODULE:NAME (or FILE.py:NAME) names a NumPyro model "
        "function (the data file's arrays are its arguments, by name) or a minibatch_mcmc Model or a function returning "
        "one (with --dim), and "
        "--data a .npy, .npz or Parquet file; an automatic warm-up (mode, Laplace covariance, Taylor proxy, "
        "proposal: by default proxy HMC with the penalty test, or proxy HMC mixed with a random walk where the warm-up finds "
        "rows the proxy cannot see or several modes) comes first. Without --model it samples the Gaussian mixture of Seita et al. 6.1. Draws go to "
        "OUT/NAME/posterior.nc (constrained values under the site names); --checkpoint DIR writes each block and "
        "--resume continues a killed run.",
    )
    sp.add_argument(
        "--model",
        default=None,
        metavar="MODULE:NAME",
        help="a NumPyro model function or a Model (default: the mixture)",
    )
    sp.add_argument(
        "--data",
        default=None,
        metavar="FILE",
        help="the data for --model: .npy, .npz or .parquet (a file or a folder "
        "of files). A Model reads it out of core (.npy and uncompressed .npz memory-mapped, Parquet streamed); "
        "a NumPyro model gets it read into memory, as its arguments",
    )
    sp.add_argument(
        "--columns",
        nargs="+",
        default=None,
        metavar="ARG=COL[,COL...]",
        help="with a NumPyro --model: "
        "which columns of --data make each model argument, e.g. --columns X=a,b,c y=d (several columns: "
        "an (N, k) float array in that order; one: (N,)); default: the columns named like the arguments",
    )
    sp.add_argument(
        "--dim", type=positive_int, default=None, help="parameter length of a Model given by --model (start: zeros)"
    )
    sp.add_argument(
        "--test",
        choices=list(TESTS),
        default=None,
        help="acceptance test (default: with --model, the warm-up's "
        "default, the penalty test on 50 rows, more at small N; for the mixture " + MIXTURE_TEST + ")",
    )
    sp.add_argument(
        "--proposal",
        choices=PROPOSALS,
        default=None,
        help="with --model: the warm-up's proposal (default: its "
        "rule: mixture with an exact stratum or several modes, else proxy_hmc)",
    )
    sp.add_argument(
        "--n-data", type=positive_int, default=100_000, help="data points N of the mixture (default 100000)"
    )
    sp.add_argument("--temperature", type=float, default=1.0, help="temperature K (default 1: the posterior)")
    sp.add_argument(
        "--batch-size", type=positive_int, default=BATCH_SIZE, help=f"minibatch size m (default {BATCH_SIZE})"
    )
    sp.add_argument(
        "--sigma",
        type=float,
        default=SIGMA,
        help=f"MHminibatch noise level sigma, or the penalty test's sigma_max (default {SIGMA:g})",
    )
    sp.add_argument(
        "--proposal-sd", type=float, default=0.15, help="random-walk s.d. per coordinate for the mixture (default 0.15)"
    )
    sp.add_argument("--num-samples", type=positive_int, default=1000)
    sp.add_argument("--chains", type=positive_int, default=1, help="number of chains (a multiple of the devices used)")
    sp.add_argument(
        "--devices", default=None, help="split the chains over 'all' devices or the first N (default: one device)"
    )
    sp.add_argument(
        "--block-size", type=positive_int, default=250, help="steps per jitted block and per checkpoint chunk"
    )
    sp.add_argument(
        "--checkpoint", default=None, metavar="DIR", help="write every finished block to DIR (netCDF chunks)"
    )
    sp.add_argument(
        "--resume", action="store_true", help="continue the run in --checkpoint DIR (same settings and seed)"
    )
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--name", default="sample", help="run name: output goes to OUT/NAME (default: sample)")
    sp.add_argument("--out", default="runs", help="output folder (default: runs)")
    sp.add_argument("--no-progress", action="store_true")
    add_launch_arguments(sp)
    sp.set_defaults(func=_cmd_sample)
    c = sub.add_parser("correction", help="max CDF error of the correction distribution C_sigma")
    c.add_argument("--sigma", type=float, default=1.0)
    c.set_defaults(func=_cmd_correction)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``minibatch-mcmc`` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"minibatch-mcmc: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("minibatch-mcmc: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
