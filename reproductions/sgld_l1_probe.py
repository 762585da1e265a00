"""``reproduce sgld-l1 --probe``: each minibatch test's acceptance probability at fixed moves of the Section 4.2.4
model, against the exact test it approximates (AustereMH: Metropolis; MHminibatch: Barker)."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp

from minibatch_mcmc.models.l1_regression import L1DataSettings, L1RegressionSettings, l1_regression, make_l1_data
from reproductions.results import table
from reproductions.sgld_l1 import SGLDL1Config, method_tests
from reproductions.sgld_l1_report import markdown
from reproductions.timed import wall_clock

PROBE_PAIRS = ((0.0005, 0.002), (0.005, 0.008), (0.01, 0.012), (0.02, 0.023), (0.015, 0.02))
"""Moves ``theta -> theta'`` (and their reverses) at which :func:`probe_acceptance` measures each test's acceptance."""


def probe_acceptance(
    cfg: SGLDL1Config,
    pairs=PROBE_PAIRS,
    n_keys: int = 20_000,
    methods: tuple[str, ...] = ("AustereMH eps=0.1", "MHminibatch"),
) -> list[dict]:
    """Acceptance frequency of each minibatch test over ``n_keys`` draws at fixed moves, against the exact test it approximates.

    AustereMH approximates Metropolis ``min(1, e^Delta)``, MHminibatch approximates Barker ``sigmoid(Delta)``;
    ``psi`` is the prior ratio only (the per-step error does not depend on where ``psi`` comes from).
    """
    from minibatch_mcmc.acceptance import Statistics
    from minibatch_mcmc.acceptance.base import exact_delta

    data = make_l1_data(jax.random.key(cfg.data_seed), L1DataSettings(n_data=cfg.n_data))
    model = l1_regression(L1RegressionSettings(cfg.lam, cfg.lam0))
    tests = method_tests(cfg)
    moves = [m for a, b in pairs for m in ((a, b), (b, a))]
    rows = []
    for name in methods:
        test = tests[name]

        @jax.jit
        def decide_many(theta, theta_new, keys, data):
            """Exact ``Delta`` and the test's acceptance frequency and mean batch over ``keys`` at one move."""
            psi = model.log_prior(theta_new) - model.log_prior(theta)
            log_ratio = lambda b: model.log_lik(theta_new, b) - model.log_lik(theta, b)
            stats = Statistics(log_ratio, data, cfg.n_data, psi, jnp.float32(1.0))
            out = jax.vmap(lambda k: test.decide(k, stats))(keys)
            return exact_delta(stats)[0], jnp.mean(out.accepted), jnp.mean(out.batch_size)

        for i, (th, thp) in enumerate(moves):
            keys = jax.random.split(jax.random.fold_in(jax.random.key(cfg.seed + 1), i), n_keys)  # fresh draws per move
            d, a, b = decide_many(jnp.asarray([th], jnp.float32), jnp.asarray([thp], jnp.float32), keys, data)
            delta, acc = float(d), float(a)
            exact = 1.0 / (1.0 + math.exp(-delta)) if name == "MHminibatch" else math.exp(min(delta, 0.0))
            se = math.sqrt(max(exact * (1 - exact), acc * (1 - acc), 1.0 / n_keys) / n_keys)
            rows.append(
                {
                    "method": name,
                    "theta": th,
                    "theta_new": thp,
                    "delta": delta,
                    "exact": exact,
                    "observed": acc,
                    "z": (acc - exact) / se,
                    "data_fraction": float(b) / cfg.n_data,
                }
            )
    return rows


PROBE_COLUMNS = ("method", "theta -> theta'", "Delta", "exact P(accept)", "observed", "z", "data per test (% of N)")


def probe_table(rows: list[dict]) -> dict:
    """:func:`probe_acceptance`'s rows as a results table."""
    return table(
        PROBE_COLUMNS,
        [
            [
                r["method"],
                f"{r['theta']:.4f} -> {r['theta_new']:.4f}",
                f"{r['delta']:.3f}",
                f"{r['exact']:.4f}",
                f"{r['observed']:.4f}",
                f"{r['z']:+.1f}",
                f"{100 * r['data_fraction']:.1f}",
            ]
            for r in rows
        ],
    )


def format_probe(rows: list[dict]) -> str:
    """Markdown table of :func:`probe_acceptance`."""
    return markdown(probe_table(rows))


def probe_values(rows: list[dict]) -> dict[str, str]:
    """What the notes quote of the probe: AustereMH's acceptance where Metropolis accepts surely, and MHminibatch's
    signed errors (rightward moves under-accepted, leftward over-accepted) and their direction-signed z-scores."""
    values = {}
    aus = [r for r in rows if r["method"].startswith("AustereMH")]
    if aus:
        sure = [r["observed"] for r in aus if r["exact"] == 1.0]
        values["sgld_l1_probe.austere.sure_observed_min"] = f"{min(sure):.2f}" if sure else "-"
        values["sgld_l1_probe.austere.sure_observed_max"] = f"{max(sure):.2f}" if sure else "-"
        values["sgld_l1_probe.austere.max_abs_error"] = f"{max(abs(r['observed'] - r['exact']) for r in aus):.2f}"
    mb = [r for r in rows if r["method"] == "MHminibatch"]
    if mb:
        right = [r["exact"] - r["observed"] for r in mb if r["theta_new"] > r["theta"]]
        left = [r["observed"] - r["exact"] for r in mb if r["theta_new"] < r["theta"]]
        signed_z = [-r["z"] if r["theta_new"] > r["theta"] else r["z"] for r in mb]
        for side, errs in (("right_under", right), ("left_over", left)):
            pos = [e for e in errs if e > 0]
            values[f"sgld_l1_probe.mhminibatch.{side}_count"] = str(len(pos))
            values[f"sgld_l1_probe.mhminibatch.{side}_of"] = str(len(errs))
            values[f"sgld_l1_probe.mhminibatch.{side}_min"] = f"{min(pos):.4f}" if pos else "-"
            values[f"sgld_l1_probe.mhminibatch.{side}_max"] = f"{max(pos):.4f}" if pos else "-"
        values["sgld_l1_probe.mhminibatch.signed_z_sum"] = f"{sum(signed_z):.1f}"
        values["sgld_l1_probe.mhminibatch.signed_z_scaled"] = f"{sum(signed_z) / math.sqrt(len(signed_z)):.1f}"
        values["sgld_l1_probe.mhminibatch.moves"] = str(len(signed_z))
    return values


def run_probe(cfg: SGLDL1Config, out: Path, n_keys: int = 20_000) -> tuple[dict, dict[str, str]]:
    """Probe every move, print and write ``probe.md``; return the results table ``sgld_l1_probe`` and its values."""
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds = wall_clock(probe_acceptance, cfg, n_keys=n_keys)
    text = format_probe(rows)
    (out / "probe.md").write_text(text + "\n")
    print(text)
    values = {**probe_values(rows), "sgld_l1_probe.n_keys": f"{n_keys:,}", "sgld_l1_probe.wall_s": f"{seconds:.0f}"}
    return {"sgld_l1_probe": probe_table(rows)}, values
