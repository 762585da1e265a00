"""MINTEE vs the full-data equi-energy sampler on the same ladder: cost per lowest-temperature sample.

Li and Wong (Section 5.2) claim ``O(N n)`` for MINTEE against ``O(K^2 N n)`` for the EE sampler when
``m_{K-1} gamma^(K-1) = n``. Both samplers here share the temperatures, energy levels, ``p_ee``,
proposals and seeds (``MINTEEConfig.full_data`` switches every chain to all ``n`` points); they run
side by side in one process on the tied-mean mixture, once with all chains started together and
once with Algorithm 2's staggered starts (chain ``k`` starts ``B + N`` sweeps after chain ``k+1``,
the source of the ``K^2``). Reported per post-burn-in draw of chain 0: data points evaluated (all
chains, burn-in included) and wall seconds (compilation excluded), with ratios to the full-data
EE sampler of the same schedule. Also: the ``padded`` layout and Algorithm 2's cached EE energies.

    .venv/bin/python benchmarks/mintee_cost.py [--n 16000] [--samples 500] [--burn-in 100] [--results docs/results/mintee_cost.json]

``--results FILE`` writes the table (``STEM_table``, STEM the file's name) and the ratios the docs quote
(``STEM.*``) to FILE; without it nothing is written.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import repository  # noqa: F401  (the repository root on sys.path, for reproductions/)

from minibatch_mcmc.models.tied_mixture import make_tied_mixture_data, tied_mixture, tied_mixture_truth
from minibatch_mcmc.samplers.mintee import MINTEEConfig, full_data_energy, mintee
from reproductions.results import results_payload, save_results, table


def main() -> None:
    """Run the variants and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16_000)
    ap.add_argument("--components", type=int, default=10)
    ap.add_argument("--chains", type=int, default=6)
    ap.add_argument("--gamma", type=float, default=1.5)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--burn-in", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--results", default=None, metavar="FILE", help="write the results file (e.g. docs/results/mintee_cost.json)"
    )
    a = ap.parse_args()

    model = tied_mixture(a.components)
    truth = tied_mixture_truth(a.components)
    data = make_tied_mixture_data(jax.random.key(a.seed), a.n, truth)
    h0 = full_data_energy(model, data, jnp.asarray(truth))
    top = int(a.n / a.gamma ** (a.chains - 1))  # m_{K-1} gamma^(K-1) ~ n, the paper's assumption
    base = MINTEEConfig(
        num_chains=a.chains,
        smallest_batch=top,
        gamma=a.gamma,
        alpha=0.995,
        lowest_full_data=False,
        h0=h0,
        initial_step=0.02,
        burn_in=a.burn_in,
        ring_capacity=256,
    )
    stagger = a.burn_in + a.samples
    variants = [
        ("EE full data", "together", base._replace(full_data=True)),
        ("MINTEE", "together", base),
        ("MINTEE, padded layout", "together", base._replace(layout="padded")),
        ("MINTEE, cached EE energies", "together", base._replace(ee_energy="cached")),
        ("EE full data", "staggered", base._replace(full_data=True, stagger=stagger)),
        ("MINTEE", "staggered", base._replace(stagger=stagger)),
    ]
    start = jnp.zeros(a.components, jnp.float32)
    rows = []
    for name, sched, cfg in variants:
        r = mintee(model, data, start, cfg, num_samples=a.samples, key=a.seed + 1)
        rows.append((name, sched, r))
    print(
        f"# MINTEE cost, n={a.n}, {a.components}-component tied mixture, K={a.chains}, gamma={a.gamma}, "
        f"batches {rows[1][2].ladder.batch_sizes}, N={a.samples}, B={a.burn_in}\n"
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
        f"{jax.devices()[0].platform}"
    )
    cols = ["sampler", "starts", "data / lowest sample", "ratio to EE", "s / lowest sample", "ratio to EE", "compile s"]
    ref = {sched: r for name, sched, r in rows if name == "EE full data"}
    cells, ratios = [], {}
    for name, sched, r in rows:
        d, s = r.data_per_lowest_sample(), r.seconds_per_lowest_sample()
        d0, s0 = ref[sched].data_per_lowest_sample(), ref[sched].seconds_per_lowest_sample()
        cells.append(
            [name, sched, f"{d:,.0f}", f"{d / d0:.3f}", f"{s * 1e3:.2f} ms", f"{s / s0:.3f}", f"{r.compile_time:.1f}"]
        )
        ratios[(name, sched)] = (d / d0, s / s0)
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in cells:
        print("| " + " | ".join(row) + " |")
    if a.results:
        stem = Path(a.results).stem
        values = {
            f"{stem}.data_ratio_together": f"{ratios[('MINTEE', 'together')][0]:.3f}",
            f"{stem}.data_ratio_staggered": f"{ratios[('MINTEE', 'staggered')][0]:.3f}",
            f"{stem}.time_ratio_together": f"{ratios[('MINTEE', 'together')][1]:.3f}",
            f"{stem}.time_ratio_staggered": f"{ratios[('MINTEE', 'staggered')][1]:.3f}",
            f"{stem}.padded_over_ee": f"{ratios[('MINTEE, padded layout', 'together')][1]:.2f}",
            f"{stem}.padded_over_loop": f"{ratios[('MINTEE, padded layout', 'together')][1] / ratios[('MINTEE', 'together')][1]:.1f}",
            f"{stem}.batches": ", ".join(str(b) for b in rows[1][2].ladder.batch_sizes),
        }
        payload = results_payload(
            "mintee_cost",
            " ".join(["python", *sys.argv]),
            config=vars(a),
            tables={f"{stem}_table": table(cols, cells)},
            values=values,
        )
        print(f"wrote {save_results(a.results, payload)}")


if __name__ == "__main__":
    main()
