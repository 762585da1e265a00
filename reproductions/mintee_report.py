"""What ``reproduce mintee`` reports (Li and Wong 5.3): Table 3, the energy-ring occupancy of each chain, as text and
for the results file beside the paper's rows, and the figures the docs' prose quotes from a run."""

from __future__ import annotations

from minibatch_mcmc.samplers.mintee import MINTEEResult
from reproductions.results import table

PAPER_TABLE3 = (
    (51.08, 4.76, 6.45, 8.44, 10.00, 9.73, 9.55),
    (40.15, 5.01, 7.14, 9.63, 12.20, 12.72, 13.16),
    (34.80, 4.91, 7.16, 10.11, 13.09, 14.37, 15.57),
    (29.93, 4.78, 7.05, 10.23, 13.97, 15.82, 18.22),
    (22.20, 4.17, 6.42, 9.93, 14.40, 18.17, 24.71),
    (13.60, 3.16, 5.12, 8.45, 13.69, 20.02, 35.96),
    (6.08, 1.74, 3.07, 5.60, 10.44, 18.71, 54.37),
)
"""The paper's Table 3: percentage of chain ``k``'s samples in each energy ring (its chain 0: all data, ``T = 1``)."""
PAPER_LADDER = (
    (1.00, 100000),
    (19.41, 5378),
    (27.13, 3841),
    (37.93, 2743),
    (53.02, 1959),
    (74.06, 1400),
    (103.51, 1000),
)
"""The paper's ``(T_k, m_k)`` of Table 3."""


def ring_table(result: MINTEEResult) -> str:
    """Table 3: per chain ``T_k``, ``m_k`` and the percentage of post-burn-in states in each energy ring."""
    occ = result.ring_occupancy() * 100
    k = occ.shape[0]
    heads = ["< H_1"] + [f"[H_{j}, H_{j + 1})" for j in range(1, k - 1)] + [f">= H_{k - 1}"]
    lines = ["| chain | T_k | m_k | " + " | ".join(heads) + " |", "|" + "---|" * (3 + k)]
    for c in range(k):
        cells = " | ".join(f"{v:.2f}" for v in occ[c])
        lines.append(
            f"| theta^({c}) | {result.ladder.temperatures[c]:.2f} | {result.ladder.batch_sizes[c]} | {cells} |"
        )
    return "\n".join(lines)


def results_table3(result: MINTEEResult, name: str) -> dict:
    """Table 3 for the results file: our rows, each followed by the paper's when the ladder has its 7 chains."""
    occ = result.ring_occupancy() * 100
    k = occ.shape[0]
    heads = ["< H_1"] + [f"[H_{j}, H_{j + 1})" for j in range(1, k - 1)] + [f">= H_{k - 1}"]
    paper = k == len(PAPER_TABLE3)
    rows = []
    for c in range(k):
        rows.append(
            [
                f"theta^({c})",
                "ours",
                f"{result.ladder.temperatures[c]:.2f}",
                str(result.ladder.batch_sizes[c]),
                *(f"{v:.2f}" for v in occ[c]),
            ]
        )
        if paper:
            rows.append(
                [
                    f"theta^({c})",
                    "paper",
                    f"{PAPER_LADDER[c][0]:.2f}",
                    str(PAPER_LADDER[c][1]),
                    *(f"{v:.2f}" for v in PAPER_TABLE3[c]),
                ]
            )
    return {name: table(["chain", "", "T_k", "m_k", *heads], rows)}


def results_values(summary: dict, result: MINTEEResult, prefix: str) -> dict:
    """The figures the docs' prose quotes from one run, keyed ``PREFIX.*``."""
    m, pl, cfg = summary["mintee"], summary["plain_mcmc"], summary["config"]
    n, draws = cfg["n_data"], cfg["num_samples"]
    rates = m["move_rates"]
    occ0 = result.ring_occupancy()[0] * 100
    v = {
        "wall_s": f"{m['wall_time_s']:.0f}",
        "data_per_lowest": f"{m['data_per_lowest_sample']:,.0f}",
        "data_per_lowest_over_n": f"{m['data_per_lowest_sample'] / n:.2f}",
        "theta1_peak_ratio": f"{m['theta1_peak_ratio']:.1f}",
        "min_basin_percent": f"{100 * m['min_basin_fraction']:.2f}",
        "max_basin_percent": f"{100 * m['max_basin_fraction']:.1f}",
        "basins_visited": str(m["basins_visited"]),
        "basin_switches": f"{m['basin_switches']:,}",
        "basin_switches_per_sweep": f"{m['basin_switches'] / draws:.2f}",
        "modes_visited": str(m["modes_visited"]),
        "percent_in_a_mode": f"{100 * m['fraction_in_a_mode']:.0f}",
        "percent_outside_modes": f"{100 * (1 - m['fraction_in_a_mode']):.0f}",
        "max_mode_percent": f"{100 * m['max_mode_fraction']:.2f}",
        "mode_switches": f"{m['mode_switches']:,}",
        "kmeans_elbow": str(m["kmeans_elbow"]),
        "median_max_coordinate": f"{m['median_max_coordinate']:.2f}",
        "temperature0": f"{result.ladder.temperatures[0]:.2f}",
        "chain0_ring0_percent": f"{occ0[0]:.2f}",
        "chain0_ring1_percent": f"{occ0[1]:.2f}" if occ0.size > 1 else "-",
        "chain0_ee_attempts": f"{rates['ee_attempt'][0] * draws:.0f}",
        "chain0_ee_accept": f"{rates['ee_accept'][0]:.3f}",
        "plain_basins_visited": str(pl["basins_visited"]),
        "plain_basin_switches": str(pl["basin_switches"]),
        "plain_basin_switches_per_step": f"{pl['basin_switches'] / pl['steps']:.2f}",
        "plain_modes_visited": str(pl["modes_visited"]),
        "plain_max_mode_percent": f"{100 * pl['max_mode_fraction']:.0f}",
        "plain_median_max_coordinate": f"{pl['median_max_coordinate']:.2f}",
        "plain_acceptance": f"{pl['acceptance_rate']:.2f}",
        "plain_steps_to_leave_start": "never"
        if pl["steps_to_leave_start"] is None
        else str(pl["steps_to_leave_start"]),
        "plain_median_distance_from_start": f"{pl['median_distance_from_start']:.1f}",
        "plain_wall_s": f"{pl['wall_time_s']:.0f}",
    }
    return {f"{prefix}.{k}": x for k, x in v.items()}
