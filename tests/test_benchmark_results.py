"""The results files of the benchmark scripts: tables and prose values computed from known timings (no sampling: fast).

Each check feeds hand-made timings to the formatting function of one script and compares every cell with the
figure worked out by hand: a wrong ratio, a swapped column, a best-of taken as a mean or a value key the docs
do not expect would fail.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    """Import benchmark scripts by name (benchmarks/ is not a package; the scripts import their siblings)."""
    sys.path.insert(0, str(BENCH))
    try:
        import importlib

        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))


def test_save_writes_the_payload_with_the_exact_command_and_nothing_without_a_path(bench, tmp_path):
    """``--results FILE`` gets the command line (quoted as a shell would need it), tables and values; no path, no file."""
    br = bench("bench_results")
    out = tmp_path / "r.json"
    tab = br.table(["a", "b"], [[1, "x y"]])
    argv = ["benchmarks/peers.py", "--methods", "BlackJAX RWMH", "--results", str(out)]
    assert br.save(out, "peers", config={"k": 1}, tables={"t": tab}, values={"t.v": 2.5}, argv=argv) == out
    payload = json.loads(out.read_text())
    assert payload["command"] == f"python benchmarks/peers.py --methods 'BlackJAX RWMH' --results {out}"
    assert payload["tables"] == {"t": {"columns": ["a", "b"], "rows": [["1", "x y"]]}}
    assert payload["values"] == {"t.v": "2.5"} and payload["config"] == {"k": 1} and payload["experiment"] == "peers"
    assert br.save(None, "x", config={}, tables={}, values={}) is None


def test_step_cost_row_uses_best_times_and_median_of_per_repeat_ratios(bench):
    """Best SGD 1 ms and best MH 1.5 ms over 10 steps: 100 and 150 us/step, ratio 1.50; per-repeat ratios 1.5, 1.5, 1.0: median 1.50."""
    sc = bench("step_cost")
    row = sc.result_row(1, 10, np.array([2e-3, 1e-3, 3e-3]), np.array([3e-3, 1.5e-3, 3e-3]), 100.0)
    assert row == ["1", "10", "100.0", "150.0", "100.0", "1.50", "1.50"]
    row2 = sc.result_row(1024, 10, np.array([1e-3, 1e-3]), np.array([1.2e-3, 1.4e-3]), 101.0)
    assert row2[5:] == ["1.20", "1.30"]
    assert sc.results_values([row, row2]) == {
        "step_cost.ratio_best_1": "1.50",
        "step_cost.median_ratio_1": "1.50",
        "step_cost.ratio_best_1024": "1.20",
        "step_cost.median_ratio_1024": "1.30",
    }


def test_gpu_chains_rate_and_speedup(bench):
    """1 chain x 500 steps in 0.1 s = 5,000 chain-steps/s; 1024 x 10 in 1.024 s = 10,000: speedup 2.00."""
    gc = bench("gpu_chains")
    rows = [gc.result_row(1, 500, 3.0, 0.1, 100.0, 0.5), gc.result_row(1024, 10, 4.0, 1.024, 100.0, 0.48)]
    assert rows[0][4] == "5,000" and rows[0][5] == "200.0" and rows[1][4] == "10,000" and rows[1][5] == "102,400.0"
    vals = gc.results_values("gpu_chains_cpu", rows)
    assert vals["gpu_chains_cpu.speedup_1024"] == "2.00" and vals["gpu_chains_cpu.rate_1"] == "5,000"


def test_out_of_core_tables_and_values(bench):
    """Ratios to in-memory from best times, hits as 'hits/total', memory over the baseline as a difference."""
    oc = bench("out_of_core")
    best = {
        "in-memory": 0.1,
        "memmap (.npy)": 0.6,
        "Parquet (16k-row groups, all cached)": 7.0,
        "Parquet + prefetch": 3.5,
    }
    batch = dict.fromkeys(best, 100.5)
    tabs, vals = oc.part1_results(2_000_000, 8, 200, best, batch, {"Parquet + prefetch": (10, 200)})
    tab = tabs["out_of_core_chains8"]
    assert tab["columns"][0] == "source (N = 2,000,000, 8 chains, 200 steps)"
    assert tab["rows"][1] == ["memmap (.npy)", "333", "6.00x", "100.5", "-"]
    assert tab["rows"][3] == ["Parquet + prefetch", "57", "35.00x", "100.5", "10/200"]
    assert vals["out_of_core.c8.memmap_ratio"] == "6.0" and vals["out_of_core.c8.parquet_prefetch_gain"] == "2.0"
    assert vals["out_of_core.c8.memmap_ms_per_step"] == "3" and vals["out_of_core.c8.parquet_prefetch_hits"] == "10/200"
    run = {
        "n": 10**7,
        "file_gb": 0.41,
        "open_and_scan_s": 1.25,
        "sample_s": 30.2,
        "steps": 1000,
        "mean_batch": 101.0,
        "accept": 0.49,
        "peak_mb": 800.4,
        "status_mb": {},
    }
    big, v = oc.part2_results(run, {"seconds": 18.6, "peak_mb": 347.0}, dict(run, peak_mb=500.0), 200_000)
    assert big["rows"][-1] == ["same run on a 200,000-row file (JAX + model baseline)", "500 MiB"]
    assert v["out_of_core.big_over_baseline_mib"] == "300" and v["out_of_core.big_peak_mib"] == "800"
    assert v["out_of_core.big_generate_s"] == "19" and v["out_of_core.big_rows"] == "10,000,000"


def test_peers_prefixed_ratios_and_reference(bench):
    """MHminibatch over RWMH: draws/s 10/100 = 0.1, ESS/s 1/2 = 0.5; over HMCECS 1/40; the NUTS check row."""
    pr = bench("peers_report")

    def row(method, dps, ess, essw, frac):
        return {
            "method": method,
            "n": 100000,
            "draws": 10,
            "sampling_s": 1.0,
            "draws_per_s": dps,
            "accept": 0.2,
            "compile_s": 1.0,
            "warmup_s": 0.0,
            "warmup_data_over_n": None,
            "min_ess": ess,
            "ess_per_s": ess,
            "ess_per_s_with_warmup": essw,
            "t_mean_s": None,
            "t_sd_s": 0.5,
            "end_err_mean": 0.3,
            "end_err_sd": 0.1,
            "data_per_step_over_n": frac,
            "step_us": 1.0,
            "step_over_sgd_best": None,
            "step_over_sgd_median": None,
            "details": "d",
            "skipped": None,
        }

    rows = [
        row("MHminibatch", 10.0, 1.0, 1.0, 0.853),
        row("BlackJAX RWMH", 100.0, 2.0, 2.0, 1.0),
        row("NumPyro HMCECS", 20.0, 40.0, 4.0, 0.07),
    ]
    refs = {
        "100000": {
            "name": "NUTS (3000 draws)",
            "check": {"mean_diff": 0.0971, "mc_mean": 0.079, "sd_diff": 0.11, "mc_sd": 0.1, "ess": 994.0},
        }
    }
    tabs, vals = pr.prefixed_results("peers_plain", rows, refs)
    assert set(tabs) == {"peers_plain", "peers_plain_runs", "peers_plain_ratios", "peers_plain_reference"}
    assert tabs["peers_plain_ratios"]["rows"] == [
        ["1e5", "MHminibatch / BlackJAX RWMH", "0.1", "0.5", "0.5"],
        ["1e5", "MHminibatch / NumPyro HMCECS", "0.5", "0.025", "0.25"],
    ]
    assert tabs["peers_plain_reference"]["rows"] == [
        ["1e5", "NUTS (3000 draws)", "0.097", "0.079", "0.110", "0.100", "994"]
    ]
    assert vals["peers_plain.batch_fraction_100000"] == "0.85"
    assert vals["peers_plain.MHminibatch_over_BlackJAX_RWMH.ess_per_s_1e5"] == "0.5"
    assert tabs["peers_plain"]["rows"][0][9:11] == ["> 1", "0.5"]


def test_peers_exact_over_cv_ratios_and_rows_per_step(bench):
    """SMH-2 at 5 draws/s and 30 ESS/s over MHminibatch+CV MALA's 20 and 10: ratios 0.25 and 3; its 58.4 rows per step."""
    pr = bench("peers_report")

    def row(method, dps, ess, rows):
        return {
            "method": method,
            "n": 1000000,
            "draws": 10,
            "sampling_s": 1.0,
            "draws_per_s": dps,
            "accept": 0.9,
            "compile_s": 1.0,
            "warmup_s": 1.0,
            "warmup_data_over_n": 3.3,
            "min_ess": ess,
            "ess_per_s": ess,
            "ess_per_s_with_warmup": ess,
            "t_mean_s": 0.4,
            "t_sd_s": 0.4,
            "end_err_mean": 0.01,
            "end_err_sd": 0.01,
            "data_per_step_over_n": rows / 1e6,
            "data_per_step": rows,
            "step_us": 1.0,
            "step_over_sgd_best": None,
            "step_over_sgd_median": None,
            "details": "d",
            "skipped": None,
        }

    tabs, vals = pr.prefixed_results(
        "peers_exact", [row("MHminibatch+CV MALA", 20.0, 10.0, 50.0), row("SMH-2 indep.", 5.0, 30.0, 58.4)], {}
    )
    assert tabs["peers_exact_ratios"]["rows"] == [["1e6", "SMH-2 indep. / MHminibatch+CV MALA", "0.25", "3", "3"]]
    assert vals["peers_exact.SMH-2_indep_over_MHminibatch_CV_MALA.ess_per_s_1e6"] == "3"
    assert vals["peers_exact.SMH-2_indep.rows_per_step_1000000"] == "58.4"


def test_exact_mh_rows_and_values(bench):
    """SMH-2 indep. at 2,000 ESS/s and SMH-2 RW at 50 against MH-SS-2's 100: ratios 20.0 and 0.5; 64 chains at 9,000
    chain-steps/s over 1 chain's 1,000: 9.0; the row's cells in column order."""
    em = bench("exact_mh")
    base = dict(
        family="logistic",
        n=1000000,
        d=10,
        accept=0.9,
        ess_per_1000=900.0,
        ess_s_warm=1.0,
        data_per_ess=2.0,
        mean_err=0.01,
        sd_err=0.02,
        warm_s=3.0,
        steps=1000,
    )
    rows = [
        dict(base, method="SMH-2 indep.", points=1.5, ess_s=2000.0),
        dict(base, method="SMH-2 RW", points=0.3, ess_s=50.0),
        dict(base, method="PyMHSS MH-SS-2", points=1.0, ess_s=100.0),
    ]
    speeds = [dict(family="logistic", n=100000, d=10, one=1000.0, many=9000.0, chains=64)]
    vals = em.results_values(rows, speeds, 11.44)
    assert vals == {
        "exact_mh.load": "11.4",
        "exact_mh.logistic.1000000.10.SMH-2.points": "1.5",
        "exact_mh.logistic.1000000.10.SMH-2.ess_s": "2e+03",
        "exact_mh.logistic.1000000.10.ratio_indep": "20.0",
        "exact_mh.logistic.1000000.10.ratio_rw": "0.5",
        "exact_mh.logistic.1000000.10.PyMHSS.points": "1",
        "exact_mh.logistic.1000000.10.PyMHSS.ess_s": "100",
        "exact_mh.logistic.100000.chains_ratio": "9.0",
    }
    assert em.table_row(rows[0]) == [
        "logistic",
        "1,000,000",
        "10",
        "SMH-2 indep.",
        "1.5",
        "0.90",
        "900",
        "2e+03",
        "1",
        "2",
        "0.010",
        "0.020",
        "3.0",
        "1000",
    ]
    assert em.speed_row(speeds[0]) == ["logistic", "100,000", "10", "1000", "9000", "9.0"]


def test_auto_sample_cost_summary_takes_medians_over_repeats(bench):
    """Before totals 10, 14, 12 s (median 12), after 8, 6, 7 (median 7): ratio 0.58; tuning + sampling and the after
    variant's warm-up and sampling seconds are medians too."""
    ac = bench("auto_sample_cost")

    def run(variant, total, tuning, sampling, warm):
        return {
            "proposal": "langevin",
            "variant": variant,
            "total_seconds": total,
            "sampling_seconds": sampling,
            "summary": {"total_seconds": warm, "phases": {"tuning": {"seconds": tuning}}},
        }

    runs = [
        run("before", 10, 3, 4, 5),
        run("before", 14, 5, 4, 6),
        run("before", 12, 4, 5, 7),
        run("after", 8, 3, 0.5, 6),
        run("after", 6, 2, 0.25, 5),
        run("after", 7, 4, 0.75, 7),
    ]
    rows, values = ac.summary_rows(runs, ["langevin"])
    assert rows == [
        ["langevin", "12.00", "7.00", "0.58", "9.00", "3.50", "6.00", "0.50"]
    ]  # tuning + sampling: 7, 9, 9 and 3.5, 2.25, 4.75
    assert values == {
        "auto_sample_cost.before_total_langevin": "12.0",
        "auto_sample_cost.after_total_langevin": "7.0",
        "auto_sample_cost.ratio_langevin": "0.58",
    }


def test_tall_check_shares_and_memory_bound(bench):
    """Warm-up 60 + 20 s, sampling 10 s, check 10 s: the check's share is 10.0% of the 100 s run; the bound is the 700 MiB
    baseline plus the reader's 256 MiB, 956 MiB; the check's passes are its rows over N (32,768 / 1e7)."""
    import argparse

    tc = bench("tall_check")
    phase = lambda s, rows: {"seconds": s, "rows": rows, "passes": rows / 1e7}  # noqa: E731
    big = {
        "n": 10_000_000,
        "sample_s": 10.0,
        "file_gib": 0.41,
        "stratum_rows": 0,
        "warnings": [],
        "ru_maxrss_mib": 900.2,
        "vmhwm_mib": 901.0,
        "check": {"rows_read": 32_768},
        "phases": {"mode": phase(60.0, 2e7), "proxy": phase(20.0, 1e7), "check": phase(10.0, 32_768)},
    }
    tables, values = tc.results(big, {"n": 200_000, "ru_maxrss_mib": 700.0}, argparse.Namespace(chains=4, samples=1000))
    rows = {r[0]: r[1:] for r in tables["tall_check"]["rows"]}
    assert rows["warm-up: mode"] == ["60.0", "2", "60.0%"] and rows["sampling"] == ["10.0", "-", "10.0%"]
    assert rows["**check** (32,768 rows read)"] == ["**10.0**", "0.0033", "**10.0%**"]
    assert rows["peak resident memory (`ru_maxrss`; `VmHWM`)"] == ["900 MiB; 901 MiB", "-", "bound 956 MiB"]
    assert (
        values["tall_check.check_share"] == "10.0%"
        and values["tall_check.warmup_s"] == "80"
        and values["tall_check.bound_mib"] == "956"
    )


def test_glmm_agreement_standard_errors_hold_for_antithetic_chains(bench):
    """``glmm.agreement``'s z's are calibrated where NUTS's draws are antithetic: two independent runs of 4 Gaussian
    AR(1) chains with coefficient -0.6 (bulk ESS about 4 times the draws, the squared deviations' about 0.47 times),
    200 effects each, should give a largest |z| over 200 near 2.9 for the means and the s.d.s (above 4.0 with
    probability about 1.3%). The s.d.'s standard error from the draws' bulk ESS, ``sd / sqrt(2 ESS_bulk)``, is about
    3 times too small here and gives a largest z near 8: that fails."""
    glmm = bench("glmm")
    rng = np.random.default_rng(0)

    def run():
        x = np.empty((4, 500, 200))
        x[:, 0] = rng.normal(size=(4, 200))
        for t in range(1, 500):
            x[:, t] = -0.6 * x[:, t - 1] + np.sqrt(1 - 0.36) * rng.normal(size=(4, 200))
        return glmm.effect_stats({"e": x})

    _, _, z_mean, z_sd = glmm.agreement(run(), run())
    assert 1.5 < z_mean < 4.0 and 1.5 < z_sd < 4.0, (z_mean, z_sd)


def test_glmm_large_param_rows_pick_levels_by_rows_and_the_least_ess(bench):
    """``glmm_large.param_rows`` on hand-made statistics: a 2-entry global gives one row per entry, the effects the
    levels with the fewest, the median and the most rows, then the level of least ESS with the largest R-hat of all;
    ESS per kept sweep and per CPU second divide by the given counts. A level picked by code instead of by rows, or an
    R-hat not the largest, fails."""
    glmm_large = bench("glmm_large")
    sizes = np.array([5, 1, 40, 12, 7])
    stats = {
        "beta": (np.array([200.0, 300.0]), np.array([1.01, 1.0])),
        "u": (np.array([10.0, 20.0, 30.0, 40.0, 50.0]), np.array([1.0, 1.2, 1.0, 1.0, 1.1])),
    }
    rows = glmm_large.param_rows(stats, sizes, kept=400, cpu=100.0)
    assert rows[0] == ["beta[0]", "all", "200", "0.500", "2.000", "1.010"]
    assert rows[1][0] == "beta[1]" and rows[1][3] == "0.750"
    assert [r[1] for r in rows[2:5]] == ["1", "7", "40"]  # fewest (level 1), median (level 4), most (level 2)
    assert rows[2][0].startswith("u[1]") and rows[3][0].startswith("u[4]") and rows[4][0].startswith("u[2]")
    assert rows[5][1:] == ["5", "10", "0.025", "0.100", "1.200"]
