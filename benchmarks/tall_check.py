"""``auto_sample`` end to end on a tall memory-mapped ``.npy`` data set: each phase's seconds, the check's share, peak memory.

A d = 10 logistic regression written by ``python -m minibatch_mcmc.data.generate --format npy`` (``--generate ROWS``: the
script writes it under ``--data`` in a child process first; ``--delete`` removes it afterwards) is opened with ``open_npy``
and sampled by ``auto_sample`` with its defaults, the post-sampling check of the proxy (``check_draws=100``) included, in
a fresh child process. The child reports the seconds of every warm-up phase (``Warmup.cost``), of sampling
(``SampleResult.wall_time``) and of the check (the ``check`` phase), the warnings raised, and its peak resident memory:
``ru_maxrss`` (``resource.getrusage``) and ``VmHWM``. The parent imports no JAX before the children run, so a peak it
could pass on through ``exec`` is small.

The bound the peak is held to is the one ``docs/usage.md`` documents for a memory map: mapped pages are dropped from the
resident set whenever they grow by 256 MiB (``MemmapReader.resident_bytes``), so the peak should stay within the same run's
memory on a small file (``--baseline-rows``, the memory of JAX, the model and the compiled runners) plus 256 MiB.

    python benchmarks/tall_check.py --data /tmp/tall-5e7 --generate 50000000 --baseline-rows 200000 --samples 1000 \
        --results docs/results/tall_check.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESIDENT_BYTES_MIB = 256
"""``MemmapReader``'s default ``resident_bytes``: the mapped pages a run may hold beyond its baseline (docs/usage.md)."""


def hwm_mib() -> float:
    """``VmHWM`` of this process in MiB (NaN off Linux)."""
    path = Path("/proc/self/status")
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return math.nan


def resident_mib() -> dict[str, float]:
    """``RssAnon`` and ``RssFile`` of this process in MiB (empty off Linux)."""
    path = Path("/proc/self/status")
    lines = path.read_text().splitlines() if path.exists() else []
    return {
        line.split(":")[0]: int(line.split()[1]) / 1024 for line in lines if line.startswith(("RssAnon", "RssFile"))
    }


def watch(peaks: dict, stop) -> None:
    """Until ``stop`` is set, the largest ``RssAnon`` and ``RssFile`` seen every 0.2 s, into ``peaks``."""
    while not stop.wait(0.2):
        for k, v in resident_mib().items():
            peaks[k] = max(peaks.get(k, 0.0), v)


def child(path: Path, samples: int, chains: int) -> None:
    """Open ``path``'s ``x.npy``/``y.npy``, run ``auto_sample`` with its defaults, print phases, warnings and peaks as JSON."""
    import threading
    import warnings

    import jax.numpy as jnp

    from minibatch_mcmc import auto_sample
    from minibatch_mcmc.data import open_npy
    from minibatch_mcmc.models import logistic_regression

    peaks, stop = {}, threading.Event()
    threading.Thread(target=watch, args=(peaks, stop), daemon=True).start()
    t0 = time.perf_counter()
    data = open_npy({"x": path / "x.npy", "y": path / "y.npy"})
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res, w = auto_sample(
            logistic_regression(), data, jnp.zeros(10), num_samples=samples, num_chains=chains, key=0, progress=True
        )
    total = time.perf_counter() - t0
    stop.set()
    chk = w.proxy_check
    print(
        json.dumps(
            {
                "n": data.n,
                "open_s": opened,
                "total_s": total,
                "sample_s": float(res.wall_time),
                "phases": {
                    k: {"seconds": float(c.seconds), "rows": int(c.data), "passes": float(c.passes)}
                    for k, c in w.cost.items()
                },
                "check": {
                    "ok": bool(chk.ok),
                    "rows_read": int(chk.rows_read),
                    "k_hat": float(chk.k_hat),
                    "log_ratio_sd": float(chk.log_ratio_sd),
                    "log_ratio_mc_sd": float(chk.log_ratio_mc_sd),
                    "acceptance_error": float(chk.acceptance_error),
                },
                "stratum_rows": 0 if w.influence is None else int(w.influence.rows.size),
                "proposal": w.kind,
                "warnings": [str(c.message)[:300] for c in caught],
                "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "vmhwm_mib": hwm_mib(),
                "peak_anon_mib": peaks.get("RssAnon", math.nan),
                "peak_file_mib": peaks.get("RssFile", math.nan),
                "file_gib": sum(os.path.getsize(path / f) for f in ("x.npy", "y.npy")) / 2**30,
            }
        ),
        flush=True,
    )


def run_child(path: Path, args: argparse.Namespace) -> dict:
    """``child`` in a fresh process (its progress lines pass through to stderr); its JSON line."""
    cmd = [sys.executable, __file__, "--child", str(path), "--samples", str(args.samples), "--chains", str(args.chains)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def generate(path: Path, rows: int) -> float:
    """Write ``rows`` x 10 logistic rows under ``path`` (a child process, chunk by chunk); its seconds."""
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "minibatch_mcmc.data.generate",
            "--rows",
            str(rows),
            "--dim",
            "10",
            "--format",
            "npy",
            "--out",
            str(path),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def results(big: dict, base: dict | None, args: argparse.Namespace) -> tuple[dict, dict]:
    """The table of phases and memory, and the figures quoted in prose."""
    from bench_results import table

    phases = big["phases"]
    warm = sum(p["seconds"] for k, p in phases.items() if k != "check")
    check = phases.get("check", {"seconds": math.nan, "rows": 0})
    run = warm + big["sample_s"] + check["seconds"]
    rows = [
        [f"warm-up: {k}", f"{p['seconds']:.1f}", f"{p['passes']:.3g}", f"{p['seconds'] / run:.1%}"]
        for k, p in phases.items()
        if k != "check"
    ]
    rows.append(["sampling", f"{big['sample_s']:.1f}", "-", f"{big['sample_s'] / run:.1%}"])
    rows.append(
        [
            f"**check** ({big['check']['rows_read']:,} rows read)",
            f"**{check['seconds']:.1f}**",
            f"{check['rows'] / big['n']:.2g}",
            f"**{check['seconds'] / run:.1%}**",
        ]
    )
    bound = base["ru_maxrss_mib"] + RESIDENT_BYTES_MIB if base else math.nan
    rows.append(
        [
            "peak resident memory (`ru_maxrss`; `VmHWM`)",
            f"{big['ru_maxrss_mib']:.0f} MiB; {big['vmhwm_mib']:.0f} MiB",
            "-",
            f"bound {bound:.0f} MiB" if base else "-",
        ]
    )
    rows.append(
        [
            "of which anonymous; file-backed (largest seen, every 0.2 s)",
            f"{big.get('peak_anon_mib', math.nan):.0f} MiB; {big.get('peak_file_mib', math.nan):.0f} MiB",
            "-",
            "-",
        ]
    )
    if base:
        rows.append(
            [
                f"same run on {base['n']:,} rows (baseline)",
                f"{base['ru_maxrss_mib']:.0f} MiB",
                "-",
                f"{base.get('peak_anon_mib', math.nan):.0f}; {base.get('peak_file_mib', math.nan):.0f} MiB",
            ]
        )
    title = f"auto_sample, N = {big['n']:,} x 10 float32 ({big['file_gib']:.2f} GiB, `open_npy`), {args.chains} chains x {args.samples}"
    tab = table([title, "seconds", "passes over N", "share of the run"], rows)
    values = {
        "tall_check.n": f"{big['n']:,}",
        "tall_check.check_s": f"{check['seconds']:.1f}",
        "tall_check.check_share": f"{check['seconds'] / run:.1%}",
        "tall_check.sample_s": f"{big['sample_s']:.1f}",
        "tall_check.warmup_s": f"{warm:.0f}",
        "tall_check.peak_mib": f"{big['ru_maxrss_mib']:.0f}",
        "tall_check.bound_mib": f"{bound:.0f}",
        "tall_check.stratum_rows": str(big["stratum_rows"]),
        "tall_check.warnings": str(len(big["warnings"])),
    }
    return {"tall_check": tab}, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/tall-check"), help="directory of x.npy, y.npy")
    parser.add_argument("--generate", type=int, default=0, metavar="ROWS", help="write ROWS rows under --data first")
    parser.add_argument(
        "--baseline-rows", type=int, default=0, help="also run on a file of this many rows (the memory baseline)"
    )
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--delete", action="store_true", help="remove the generated files afterwards")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_results import add_results_option, save

    add_results_option(parser)
    args = parser.parse_args()
    if args.child is not None:
        return child(args.child, args.samples, args.chains)
    made = []
    if args.generate:
        print(f"generated {args.generate:,} rows in {generate(args.data, args.generate):.0f} s", flush=True)
        made.append(args.data)
    base = None
    if args.baseline_rows:
        small = args.data.with_name(args.data.name + f"-base{args.baseline_rows}")
        generate(small, args.baseline_rows)
        made.append(small)
        base = run_child(small, args)
        print(json.dumps(base), flush=True)
    big = run_child(args.data, args)
    print(json.dumps(big), flush=True)
    tables, values = results(big, base, args)
    for row in tables["tall_check"]["rows"]:
        print(" | ".join(row))
    save(args.results, "tall_check", config=args, tables=tables, values=values, extra={"big": big, "baseline": base})
    for path in made if args.delete else []:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
