"""Compile seconds against run seconds at XLA's default and at the fast-compile setting, and what a first fit gains.

A first fit on the CPU is mostly compilation: at N = 10^5 the block runner of the default kernel (proxy HMC with the
penalty test) took 2.3-2.5 s of the robust regression's 3.2 s of sampling 4 x 2000 draws. With the CPU backend's LLVM
passes off (``compiling.FAST_COMPILE``; XLA's HLO optimisations stay) code compiles faster and runs slower. Three parts:

- ``runner``: for each model, dimension and chain count, the block runner of ``auto_sample``'s kernel at both settings:
  the compilation alone (``lower(...).compile()``, fresh each time, the settings alternating ``--repeats`` times) and
  the steady time per chain-step of the compiled scan (best of ``--repeats`` calls of ``--steps`` steps); the break-even
  run length ``(compile_default - compile_fast) / (run_fast - run_default)`` in chain-steps, and that times ``d``: the
  work ``compiling.RUN_WORK`` bounds.
- ``search``: the warm-up's minibatch Adam search (``warmup.multistart.adam_ends`` as the lean warm-up calls it: 300 steps,
  9 starts, ``b`` rows a step) compiled and run at both settings, alternating; its work ``9 x 300 x b x d`` row
  gradients is what ``compiling.ONE_OFF_WORK`` bounds.
- ``first fit``: ``from_numpyro`` + ``auto_sample`` (4 x 2000 draws) on ``first_fit.py``'s models, each run in a fresh
  process, with the fast setting as the library applies it and with it off (``FAST_COMPILE`` emptied), alternating
  ``--fit-repeats`` times: the median seconds of each and their ratio.

Models: the robust Student-t regression of ``first_fit.py`` (a NumPyro model, d = 7), and the library's logistic
regression at d = 10, 100 and 300; 4 and 64 chains.

    .venv/bin/python benchmarks/compile_level.py [--results docs/results/compile_level.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from bench_results import add_results_option, save, table
from first_fit import MODELS, make_data
from jax.flatten_util import ravel_pytree

from minibatch_mcmc.compiling import FAST_COMPILE, ONE_OFF_WORK, RUN_WORK
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.interop import from_numpyro
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.samplers import build_kernel
from minibatch_mcmc.samplers.scaled_runner import make_scaled_runner
from minibatch_mcmc.warmup import lean, warmup
from minibatch_mcmc.warmup.multistart import adam_ends

COLUMNS = [
    "model",
    "d",
    "chains",
    "compile default s",
    "compile fast s",
    "us/chain-step default",
    "us/chain-step fast",
    "break-even chain-steps",
    "break-even x d",
]
SEARCH_COLUMNS = ["model", "d", "N", "b", "work", "default s", "fast s", "fast / default"]
FIT_COLUMNS = ["model", "N", "seconds default", "seconds fast", "fast / default"]
FIT = """import sys, time
sys.path.insert(0, {here!r})
if sys.argv[2] == "off":
    import minibatch_mcmc.compiling as c; c.FAST_COMPILE.clear()
from first_fit import MODELS, make_data
from minibatch_mcmc.interop import from_numpyro
from minibatch_mcmc.warmup import auto_sample
data = make_data(sys.argv[1], int(sys.argv[3]))
t = time.perf_counter()
conv = from_numpyro(MODELS[sys.argv[1]], *data)
auto_sample(conv.model, conv.data, conv.init, num_samples=2000, num_chains=4, key=1, progress=False)
print(time.perf_counter() - t)
"""


def setup(name: str, d: int, n: int):
    """Model, data and the warm-up (``auto_sample``'s defaults) of one configuration."""
    if name == "robust":
        conv = from_numpyro(MODELS["robust"], *make_data("robust", n))
        model, data, start = conv.model, conv.data, conv.init
    else:
        model = logistic_regression(prior_scale=10.0)
        data, _ = make_logistic_data(jax.random.key(0), n, d)
        start = jnp.zeros(d)
    return model, data, warmup(model, data, start, key=0)


def timings(model, data, w, n: int, chains: int, steps: int, repeats: int) -> dict[str, tuple[float, float]]:
    """``{setting: (compile seconds, seconds per chain-step)}``, the settings compiled and run alternately."""
    kernel = build_kernel(model, w.proposal, w.test, n, w.estimator)
    starts = jax.tree_util.tree_map(lambda a: jnp.stack([a] * chains), w.centre)
    states = jax.jit(jax.vmap(kernel.init))(starts)
    args = (
        jax.random.key(1),
        states,
        data,
        np.arange(steps, dtype=np.int32),
        np.ones(steps, np.float32),
        jnp.float32(1.0),
    )
    settings = {"default": None, "fast": FAST_COMPILE}
    comp, run = {k: [] for k in settings}, {k: [] for k in settings}
    for _ in range(repeats):
        for k, options in settings.items():
            fn = make_scaled_runner(lambda s: kernel, chains, compiler_options=options).run_block
            t0 = time.perf_counter()
            compiled = fn.lower(*args).compile()
            comp[k].append(time.perf_counter() - t0)
            jax.block_until_ready(compiled(*args))
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            run[k].append((time.perf_counter() - t0) / (steps * chains))
    return {k: (float(np.median(comp[k])), float(np.min(run[k]))) for k in settings}


def search_seconds(model, data, start, n: int, repeats: int) -> tuple[int, dict[str, float]]:
    """``b`` and the median seconds (compilation and run) of the lean warm-up's Adam search at each setting."""
    arrays, (flat, unravel) = as_data_source(data).arrays(), ravel_pytree(start)
    b = lean.adam_batch(n)
    real, seconds = jax.jit, {"default": [], "fast": []}
    for _ in range(repeats):
        for k, options in (("default", None), ("fast", FAST_COMPILE)):
            jax.jit = lambda f, options=options, **kw: real(
                f, **{**kw, "compiler_options": options}
            )  # this call's setting
            try:
                t0 = time.perf_counter()
                adam_ends(
                    model,
                    arrays,
                    n,
                    np.asarray(flat)[None],
                    unravel,
                    jax.random.key(0),
                    1.0,
                    lean.ADAM_STEPS,
                    b,
                    0.05,
                    shared=True,
                    dispersed=8,
                )
                seconds[k].append(time.perf_counter() - t0)
            finally:
                jax.jit = real
    return b, {k: float(np.median(v)) for k, v in seconds.items()}


def fit_seconds(name: str, n: int, setting: str) -> float:
    """Seconds of a first fit (conversion and ``auto_sample``) in a fresh process."""
    code = FIT.format(here=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code, name, setting, str(n)], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure every configuration and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--configs",
        nargs="+",
        default=["robust:7", "logistic:10", "logistic:100", "logistic:300"],
        help="model:d pairs (robust is d = 7)",
    )
    ap.add_argument("--chains", type=int, nargs="+", default=[4, 64])
    ap.add_argument(
        "--search",
        nargs="+",
        default=["robust:7:100000", "logistic:10:1000000", "logistic:100:100000", "logistic:100:1000000"],
        help="model:d:N of the search part",
    )
    ap.add_argument(
        "--fits", nargs="+", default=["robust", "poisson", "logistic"], help="first_fit.py models of the first-fit part"
    )
    ap.add_argument("--fit-n", type=int, default=100_000)
    ap.add_argument("--fit-repeats", type=int, default=3)
    add_results_option(ap)
    args = ap.parse_args()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].device_kind}, jax {jax.__version__}"
    print(f"machine: {machine}; load average at start {os.getloadavg()}")
    rows, values, work = [], {}, []
    for config in args.configs:
        name, d = config.split(":")[0], int(config.split(":")[1])
        model, data, w = setup(name, d, args.n)
        for chains in args.chains:
            t = timings(model, data, w, args.n, chains, args.steps, args.repeats)
            (c0, r0), (c1, r1) = t["default"], t["fast"]
            even = (c0 - c1) / (r1 - r0) if r1 > r0 else float("inf")
            work.append(even * d)
            rows.append(
                [
                    name,
                    str(d),
                    str(chains),
                    f"{c0:.2f}",
                    f"{c1:.2f}",
                    f"{1e6 * r0:.1f}",
                    f"{1e6 * r1:.1f}",
                    f"{even:.0f}",
                    f"{even * d:.3g}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
            values[f"compile_level.{name}{d}.c{chains}.saved_s"] = f"{c0 - c1:.2f}"
            values[f"compile_level.{name}{d}.c{chains}.break_even"] = f"{even:.0f}"
    values["compile_level.min_break_even_work"] = f"{min(work):.3g}"
    values["compile_level.run_work"] = f"{RUN_WORK:.3g}"
    print(f"smallest break-even chain-steps x d: {min(work):.3g} (RUN_WORK = {RUN_WORK:.3g})", flush=True)
    search_rows = []
    for config in args.search:
        name, d, n = config.split(":")[0], int(config.split(":")[1]), int(config.split(":")[2])
        model, data, w = setup(name, d, n)
        b, sec = search_seconds(model, data, w.centre, n, args.repeats)
        search_rows.append(
            [
                name,
                str(d),
                f"{n:.0e}",
                str(b),
                f"{9 * lean.ADAM_STEPS * b * d:.3g}",
                f"{sec['default']:.2f}",
                f"{sec['fast']:.2f}",
                f"{sec['fast'] / sec['default']:.2f}",
            ]
        )
        print(" | ".join(search_rows[-1]), flush=True)
    values["compile_level.one_off_work"] = f"{ONE_OFF_WORK:.3g}"
    fit_rows = []
    for name in args.fits:
        sec = {"on": [], "off": []}
        for _ in range(args.fit_repeats):
            for setting in ("off", "on"):
                sec[setting].append(fit_seconds(name, args.fit_n, setting))
        off, on = float(np.median(sec["off"])), float(np.median(sec["on"]))
        fit_rows.append([name, f"{args.fit_n:.0e}", f"{off:.2f}", f"{on:.2f}", f"{on / off:.2f}"])
        values[f"compile_level.fit.{name}.ratio"] = f"{on / off:.2f}"
        print(" | ".join(fit_rows[-1]), flush=True)
    print(f"load average at end {os.getloadavg()}")
    save(
        args.results,
        "compile_level",
        config=args,
        tables={
            "compile_level": table(COLUMNS, rows),
            "compile_level_search": table(SEARCH_COLUMNS, search_rows),
            "compile_level_fit": table(FIT_COLUMNS, fit_rows),
        },
        values=values,
        extra={"machine": machine},
    )


if __name__ == "__main__":
    main()
