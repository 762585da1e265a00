"""Command line: ``minibatch-mcmc demo``, ``sample`` (resumable, multi-device), ``reproduce NAME`` and ``correction``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not a positive integer")
    return v


def _cmd_demo(args: argparse.Namespace) -> int:
    """Section 6.1 mixture: MHminibatch beside full-data Barker."""
    from minibatch_mcmc.experiments.gmm import GMMConfig, run_demo

    cfg = GMMConfig(seed=args.seed, sigma=args.sigma, proposal_sd=args.proposal_sd)
    if args.quick:
        cfg = cfg._replace(n_data=100_000, num_samples=1000, temperature=1000.0)
    if args.num_samples:
        cfg = cfg._replace(num_samples=args.num_samples)
    methods = ("mhminibatch",) if args.no_reference else ("mhminibatch", "barker")
    out = Path(args.out) / args.name
    print(
        f"Gaussian mixture (Seita et al. 6.1): N={cfg.n_data:,}, K={cfg.temperature:g}, m={cfg.batch_size}, "
        f"sigma={cfg.sigma}, {cfg.num_samples} samples; methods: {', '.join(methods)}",
        flush=True,
    )
    table = run_demo(cfg, out, methods=methods, progress=not args.no_progress)
    print(table)
    print(f"\nwrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir())))
    return 0

SAMPLE_TESTS = ("mhminibatch", "austere", "mhsublhd", "naive", "barker", "metropolis")
"""Acceptance tests the ``sample`` command can run."""


def _sample_test(name: str, batch_size: int, sigma: float):
    """The acceptance test named on the command line."""
    from minibatch_mcmc.acceptance import BarkerTest, MetropolisTest, austere_mh, mh_minibatch, mh_sublhd, naive_minibatch

    builders = {
        "mhminibatch": lambda: mh_minibatch(batch_size=batch_size, sigma=sigma),
        "austere": lambda: austere_mh(batch_size=batch_size),
        "mhsublhd": lambda: mh_sublhd(batch_size=batch_size),
        "naive": lambda: naive_minibatch(batch_size=batch_size),
        "barker": BarkerTest,
        "metropolis": MetropolisTest,
    }
    return builders[name]()


def _devices_arg(text: str | None):
    """``--devices``: None, ``all`` or a device count."""
    if text is None or text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--devices={text!r}; expected 'all' or a number of devices") from None


def _cmd_sample(args: argparse.Namespace) -> int:
    """Sample the Section 6.1 mixture posterior with checkpoints (``--checkpoint``/``--resume``) and many devices."""
    import jax
    import jax.numpy as jnp

    from minibatch_mcmc.models import gaussian_mixture, make_mixture_data
    from minibatch_mcmc.proposals import random_walk
    from minibatch_mcmc.samplers import sample

    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR (the directory of the interrupted run)")
    data = make_mixture_data(jax.random.key(args.seed), args.n_data)
    out = Path(args.out) / args.name
    print(
        f"Gaussian mixture (Seita et al. 6.1): N={args.n_data:,}, K={args.temperature:g}, test {args.test}, "
        f"{args.chains} chain(s) x {args.num_samples} steps"
        + (f", checkpoints in {args.checkpoint}" + (" (resuming)" if args.resume else "") if args.checkpoint else ""),
        flush=True,
    )
    result = sample(
        gaussian_mixture(),
        data,
        jnp.zeros(2, jnp.float32),
        proposal=random_walk(scale=args.proposal_sd),
        test=_sample_test(args.test, args.batch_size, args.sigma),
        num_samples=args.num_samples,
        key=args.seed + 1,
        num_chains=args.chains,
        temperature=args.temperature,
        block_size=args.block_size,
        progress=not args.no_progress,
        devices=_devices_arg(args.devices),
        checkpoint_dir=args.checkpoint,
        resume=args.resume,
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / "posterior.nc"
    result.to_inference_data().to_netcdf(str(path))
    for k, v in result.summary().items():
        print(f"  {k:<24} {v}")
    print(f"wrote {path}")
    return 0


EXPERIMENT_MODULES = {
    "mint-gmm": "minibatch_mcmc.experiments.mint_gmm",
    "mint-logistic": "minibatch_mcmc.experiments.mint_logistic",
    "cmint-bnn": "minibatch_mcmc.experiments.cmint_bnn",
    "mintee": "minibatch_mcmc.experiments.mintee",
    "sgld-l1": "minibatch_mcmc.experiments.sgld_l1",
    "rj-selection": "minibatch_mcmc.experiments.rj_selection",
    "ica": "minibatch_mcmc.experiments.stiefel_ica",
    "irls": "minibatch_mcmc.experiments.sequential_irls",
    "figure4": "minibatch_mcmc.experiments.figure4",
}
"""Experiments that live in their own module: ``run_cli(args, extra)`` parses its own options from ``extra``."""


def _cmd_reproduce(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    """Reproduce a paper experiment."""
    if args.experiment in EXPERIMENT_MODULES:
        import importlib

        module = importlib.import_module(EXPERIMENT_MODULES[args.experiment])
        return int(module.run_cli(args, list(extra or [])) or 0)
    if extra:
        raise ValueError(f"unrecognised arguments for reproduce {args.experiment}: {' '.join(extra)}")
    if args.experiment == "gmm":
        from minibatch_mcmc.experiments.gmm import GMMConfig
        from minibatch_mcmc.experiments.reproduce_gmm import ReproduceGMMConfig, run

        base = GMMConfig(seed=args.seed)
        trials = args.trials or 10
        if args.quick:
            base = base._replace(n_data=100_000, temperature=1000.0, num_samples=500)
            trials = args.trials or 3
        if args.num_samples:
            base = base._replace(num_samples=args.num_samples)
        cfg = ReproduceGMMConfig(base=base, trials=trials)
        out = Path(args.out) / (args.name or "reproduce-gmm")
        print(
            f"Seita et al. 6.1: N={base.n_data:,}, K={base.temperature:g}, {base.num_samples} samples x {trials} trials; "
            "MHminibatch, AustereMH(c), MHSubLhd",
            flush=True,
        )
        print(run(cfg, out, progress=not args.no_progress))
        print(f"\nwrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir())))
        return 0
    if args.experiment == "logistic":
        from minibatch_mcmc.experiments.reproduce_logistic import LogisticConfig, run as run_logistic

        cfg = LogisticConfig(dataset=args.dataset, seed=args.seed)
        if "100k" in args.dataset:
            cfg = cfg._replace(num_samples=3000, trials=5, step_sd=0.01, austere_c_bound=0.2, austere_nc_bound=0.1)
        if args.quick:
            cfg = cfg._replace(num_samples=600, trials=2, switch_after=200)
        if args.trials:
            cfg = cfg._replace(trials=args.trials)
        if args.num_samples:
            cfg = cfg._replace(num_samples=args.num_samples)
        if args.step_sd:
            cfg = cfg._replace(step_sd=args.step_sd)
        out = Path(args.out) / (args.name or f"reproduce-logistic-{args.dataset}")
        if args.figure6:
            from minibatch_mcmc.experiments.reproduce_logistic import figure6

            path, means = figure6(out, dataset=args.dataset, num_samples=cfg.num_samples, progress=not args.no_progress)
            print("Figure 6 (MHminibatch minibatch sizes by random-walk step s.d.):")
            for step, mean in means.items():
                print(f"  step s.d. {step:<6g} mean minibatch size {mean:.1f}")
            print(f"wrote {path}")
            return 0
        print(f"Seita et al. 6.2 on {cfg.dataset}: {cfg.num_samples} samples x {cfg.trials} trials, K={cfg.temperature:g}", flush=True)
        print(run_logistic(cfg, out, progress=not args.no_progress))
        print(f"\nwrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir())))
        return 0
    raise ValueError(f"unknown experiment {args.experiment!r}")


def _cmd_correction(args: argparse.Namespace) -> int:
    """Print the correction distribution's error for a sigma."""
    from minibatch_mcmc.acceptance.correction import format_correction_report

    print(format_correction_report(args.sigma))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its sub-commands."""
    p = argparse.ArgumentParser(prog="minibatch-mcmc", description=__doc__, allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="MHminibatch vs full-data Barker on the 10^6-point Gaussian mixture")
    d.add_argument("--name", default="demo", help="run name: output goes to OUT/NAME (default: demo)")
    d.add_argument("--out", default="runs", help="output folder (default: runs)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--sigma", type=float, default=1.0, help="MHminibatch noise level sigma (default 1)")
    d.add_argument(
        "--proposal-sd", type=float, default=0.15, help="random-walk s.d. per coordinate (default 0.15, as the paper's code)"
    )
    d.add_argument("--num-samples", type=_positive_int, default=None)
    d.add_argument("--quick", action="store_true", help="10^5 points, 1000 samples (K scaled to 1000)")
    d.add_argument("--no-reference", action="store_true", help="skip the full-data Barker reference run")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_demo)
    # no abbreviations: options the experiment modules parse themselves must not be taken for prefixes of ours
    r = sub.add_parser("reproduce", help="reproduce a paper experiment (tables and figures under runs/)", allow_abbrev=False)
    r.add_argument(
        "experiment",
        choices=["gmm", "logistic", *EXPERIMENT_MODULES],
        help="gmm: Seita et al. 6.1 (Tables 1, 4, Figures 1-2); logistic: 6.2 (Table 2, Figure 3); the others: "
        "Li and Wong (mint-*, cmint-bnn, mintee) and Korattikara et al. (sgld-l1, rj-selection, ica, irls, figure4). "
        "Options after the name that are not listed here belong to the experiment: `reproduce NAME --help-experiment`",
    )
    r.add_argument(
        "--dataset",
        default="fashion-13k",
        choices=["fashion-13k", "fashion-100k", "mnist-5k", "digits", "synthetic"],
        help="logistic only: data set (fashion-* need `make data`)",
    )
    r.add_argument("--figure6", action="store_true", help="logistic only: Figure 6 (step sizes 0.005, 0.01, 0.05) instead")
    r.add_argument("--step-sd", type=float, default=None, help="logistic only: random-walk s.d. (default 0.05; 0.01 for 100k)")
    r.add_argument("--trials", type=_positive_int, default=None, help="independent trials (default 10; 3 with --quick)")
    r.add_argument("--num-samples", type=_positive_int, default=None)
    r.add_argument("--quick", action="store_true", help="10^5 points (K scaled to 10^3), 500 samples, 3 trials")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--name", default=None, help="run name (default reproduce-EXPERIMENT)")
    r.add_argument("--out", default="runs")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=_cmd_reproduce)
    sp = sub.add_parser(
        "sample", help="sample the 6.1 mixture posterior; --checkpoint DIR writes each block, --resume continues a killed run"
    )
    sp.add_argument("--test", choices=SAMPLE_TESTS, default="mhminibatch", help="acceptance test (default mhminibatch)")
    sp.add_argument("--n-data", type=_positive_int, default=100_000, help="data points N (default 10^5)")
    sp.add_argument("--temperature", type=float, default=1000.0, help="temperature K (default 1000)")
    sp.add_argument("--batch-size", type=_positive_int, default=50, help="minibatch size m (default 50)")
    sp.add_argument("--sigma", type=float, default=1.0, help="MHminibatch noise level sigma (default 1)")
    sp.add_argument("--proposal-sd", type=float, default=0.15, help="random-walk s.d. per coordinate (default 0.15)")
    sp.add_argument("--num-samples", type=_positive_int, default=1000)
    sp.add_argument("--chains", type=_positive_int, default=1, help="number of chains (a multiple of the devices used)")
    sp.add_argument("--devices", default=None, help="split the chains over 'all' devices or the first N (default: one device)")
    sp.add_argument("--block-size", type=_positive_int, default=250, help="steps per jitted block and per checkpoint chunk")
    sp.add_argument("--checkpoint", default=None, metavar="DIR", help="write every finished block to DIR (netCDF chunks)")
    sp.add_argument("--resume", action="store_true", help="continue the run in --checkpoint DIR (same settings and seed)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--name", default="sample", help="run name: output goes to OUT/NAME (default: sample)")
    sp.add_argument("--out", default="runs", help="output folder (default: runs)")
    sp.add_argument("--no-progress", action="store_true")
    sp.set_defaults(func=_cmd_sample)
    c = sub.add_parser("correction", help="max CDF error of the correction distribution C_sigma")
    c.add_argument("--sigma", type=float, default=1.0)
    c.set_defaults(func=_cmd_correction)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``minibatch-mcmc`` command."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.func is not _cmd_reproduce:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.func is _cmd_reproduce:
            return int(_cmd_reproduce(args, extra) or 0)
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"minibatch-mcmc: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
