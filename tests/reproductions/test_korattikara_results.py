"""Results files of the Korattikara et al. experiments (irls, figure4 + Figure 5, rj-selection, ica, sgld-l1 --probe).

No sampling here except the one small ``ica`` run marked slow: the tables and values are built from made-up
curves, chains and rows whose right answers are known, so a wrong column, a mislabelled row, a value taken
from the wrong row or a Figure 5 summary over the wrong draws fails.
"""

import json

import numpy as np
import pytest

from minibatch_mcmc.diagnostics.risk import RiskCurve
from reproductions import figure4, risk_vs_time, rj_selection, stiefel_ica
from reproductions import figure4_results as f4r
from reproductions import sequential_irls as irls
from reproductions.sgld_l1_probe import probe_values


def test_irls_results_table_and_values_follow_the_curves():
    """Batch reaches 90% of the gap at t=3; a 4x faster copy at 0.75 (ratio 0.25); a method that never gets there says so."""
    batch = irls.Curve("batch IRLS", np.array([1.0, 2.0, 3.0]), np.array([0.9, 0.5, 0.4]), np.array([10, 20, 30]))
    curves = [
        batch,
        batch._replace(method="seq", times=batch.times / 4),
        batch._replace(method="deb", metric=np.full(3, 0.95)),
        batch,
    ]
    setup = irls.QUICK["lad"]._replace(n_train=10)
    tables, values = irls.results_of(setup, curves, start=1.0)
    tab = tables["irls_lad"]
    assert tab["columns"][2] == "test MAE" and [r[0] for r in tab["rows"]] == ["batch IRLS", "seq", "deb", "batch IRLS"]
    assert tab["rows"][1][4:6] == ["0.750", "0.25"] and tab["rows"][2][4:] == ["never"] * 4
    assert values["irls.lad.start"] == "1.0000" and values["irls.lad.sequential.t10"] == "0.750"
    assert values["irls.lad.sequential.speedup1"] == "4" and values["irls.lad.debiased.speedup1"] == "never"
    assert values["irls.lad.batch.passes"] == "3.00"
    assert (values["irls.lad.sequential.late_min"], values["irls.lad.sequential.late_max"]) == ("0.4000", "0.5000")


def fake_chains(rng, eps, secs_per_draw, steps=40, chains=3, dim=4):
    """A ``figure4.TimedChains`` with known draws and clock."""
    wall = np.cumsum(np.full((chains, steps), secs_per_draw), axis=1)
    pos = rng.standard_normal((chains, steps, dim)) + np.arange(dim)
    return figure4.TimedChains(rng.random((chains, steps, 5)), wall, 0.5 if eps else 1.0, 0.4, pos, steps * 10)


def test_figure4_and_figure5_results_from_known_chains(tmp_path):
    """Tables a, b and Figure 5's marginals: counts, pooled moments and per-step time ratios from the made-up chains."""
    rng = np.random.default_rng(0)
    chains = {0.0: fake_chains(rng, 0.0, 0.1), 0.01: fake_chains(rng, 0.01, 0.3)}
    curves = {
        e: (RiskCurve(np.geomspace(0.1, 4, 6), *(np.geomspace(1e-3, 1e-4, 6),) * 3), ch) for e, ch in chains.items()
    }
    rows = [figure4.AuditRow(0.01, 0.7, 0.03, 0.004, 0.42)]
    tables, values = f4r.figure4_tables(rows, curves, 1.7e-6)
    assert tables["figure4_a"]["rows"] == [
        ["0 (exact)", "100.0", "0.00", "-", "-"],
        ["0.01", "70.0", "3.00", "0.40", "0.420"],
    ]
    assert tables["figure4_b"]["columns"][1:5] == [
        "risk at t=0.1 s",
        "risk at t=0.34 s",
        "risk at t=1.2 s",
        "risk at t=4 s",
    ]
    assert values["figure4.seconds_per_chain.eps_0.01"] == "12.0" and values["figure4.time_per_step_ratio_max"] == "3.0"
    assert values["figure4.ref_se2"] == "1.7e-06" and values["figure4.data_pct_min"] == "50"

    runs = {e: (ch.positions[..., :2], ch.wall_times) for e, ch in chains.items()}
    times = f4r.snapshot_times([w for _, w in runs.values()])
    np.testing.assert_allclose(times, 4.0 * np.array(f4r.FIGURE5_FRACTIONS))  # the exact chains end at 40 x 0.1 s
    reference = rng.standard_normal((500, 2))
    marg = f4r.figure5_table(runs, reference, times)["figure5_marginals"]["rows"]
    first = marg[0]  # eps 0 at 0.2 s: the first 2 draws of each chain
    pooled = runs[0.0][0][:, :2].reshape(-1, 2)
    assert (
        first[:3] == ["0", "0.2", "2"]
        and first[3] == f"{pooled[:, 0].mean():.4f}"
        and first[4] == f"{pooled[:, 0].std(ddof=1):.4f}"
    )
    assert marg[5][2] == "13"  # eps 0.01 by 4 s: 13 draws of 0.3 s each
    assert marg[-1][0].startswith("reference") and marg[-1][5] == f"{reference[:, 1].mean():.4f}"
    mean, cov = f4r.moments2(reference)
    edge = f4r.ellipse(mean, cov) - mean
    np.testing.assert_allclose(np.einsum("ni,ij,nj->n", edge, np.linalg.inv(cov), edge), 4.0, rtol=1e-9)
    assert f4r.plot_figure5(runs, reference, times, tmp_path / "f5.png", "t").stat().st_size > 0


def test_risk_vs_time_rows_become_labelled_tables_and_keyed_values():
    """Labels as the docs show them, the time budget in the steps column, one value per row and field."""
    rows = {
        "eps=0": {"steps": 500, "risk": 3e-4},
        "eps=0.1": {"steps": 7250, "risk": 2.7e-3},
        "MHminibatch": {"steps": 50, "risk": 1.0},
    }
    fmt = {"steps": "d", "risk": ".2e"}
    tab = risk_vs_time.result_table(("test", "steps", "risk"), rows, fmt, 20.0)
    assert tab["columns"] == ["test", "steps per chain in 20 s", "risk"]
    assert [r[0] for r in tab["rows"]] == ["eps=0 (exact MH)", "AustereMH eps=0.1", "MHminibatch"]
    values = risk_vs_time.row_values("x", rows, fmt)
    assert values["x.eps_0.1.steps"] == "7250" and values["x.mhminibatch.risk"] == "1.00e+00" and len(values) == 6


@pytest.mark.parametrize("module, name", [(rj_selection, "rj-selection"), (stiefel_ica, "ica")])
def test_setup_tables_describe_the_run_given(module, name):
    """The set-up table's "this run" column states the chains and time budget actually used (e.g. a reduced run)."""
    cfg, _ = module.parse_config(["--trials", "2", "--time-budget", "8"])
    tab = module.setup_table(cfg) if module is rj_selection else module.setup_table(cfg, 0.01)
    runs = dict((r[0], r[2]) for r in tab["rows"])["runs"]
    assert tab["columns"] == ["", "paper", "this run"] and runs.endswith("2 chains x 8 s each")


def test_rj_reference_values_name_the_true_features():
    """True features come from the non-zero coefficients; the minimum includes the intercept's probability."""
    beta = np.array([0.5, 0.0, 1.0, 0.0, -1.0])
    incl = np.array([0.9, 0.05, 1.0, 0.3, 0.95])
    v = rj_selection.reference_values(incl, beta)
    assert v["rj_selection.true_features"] == "2, 4" and v["rj_selection.ref_incl_true_min"] == "0.90"
    assert v["rj_selection.ref_incl_other_max"] == "0.30" and v["rj_selection.ref_incl_others_above_0.1"] == "1"


def test_probe_values_sign_the_errors_by_direction():
    """MHminibatch: rightward moves under-accepted, leftward over-accepted, z-scores signed by direction."""
    rows = [
        {"method": "MHminibatch", "theta": 0.0, "theta_new": 1.0, "exact": 0.5, "observed": 0.49, "z": -2.0},
        {"method": "MHminibatch", "theta": 1.0, "theta_new": 0.0, "exact": 0.5, "observed": 0.52, "z": 3.0},
        {"method": "MHminibatch", "theta": 2.0, "theta_new": 1.0, "exact": 0.5, "observed": 0.49, "z": -1.0},
        {"method": "AustereMH eps=0.1", "theta": 0.0, "theta_new": 1.0, "exact": 1.0, "observed": 0.93, "z": -9.0},
    ]
    v = probe_values(rows)
    assert (
        v["sgld_l1_probe.mhminibatch.right_under_count"] == "1"
        and v["sgld_l1_probe.mhminibatch.right_under_min"] == "0.0100"
    )
    assert (v["sgld_l1_probe.mhminibatch.left_over_count"], v["sgld_l1_probe.mhminibatch.left_over_of"]) == ("1", "2")
    assert v["sgld_l1_probe.mhminibatch.signed_z_sum"] == "4.0"  # +2 + 3 - 1
    assert v["sgld_l1_probe.austere.sure_observed_min"] == "0.93" and v["sgld_l1_probe.austere.max_abs_error"] == "0.07"


@pytest.mark.slow
def test_small_ica_run_writes_its_results_file(tmp_path):
    """``reproduce ica`` (tiny) writes results.json and the --results copy with both tables and the run's values."""
    copy = tmp_path / "ica.json"
    argv = [
        "--quick",
        "--time-budget",
        "0.3",
        "--trials",
        "2",
        "--reference-samples",
        "300",
        "--epsilons",
        "0,0.1",
        "--out",
        str(tmp_path),
        "--results",
        str(copy),
    ]
    assert stiefel_ica.main(argv) == 0
    payload = json.loads(copy.read_text())
    assert payload == json.loads((tmp_path / "ica" / "results.json").read_text())
    assert set(payload["tables"]) == {"ica_setup", "ica_table"} and payload["command"].startswith(
        "minibatch-mcmc reproduce ica --quick"
    )
    assert [r[0] for r in payload["tables"]["ica_table"]["rows"]] == ["eps=0 (exact MH)", "AustereMH eps=0.1"]
    assert {"ica.reference_amari", "ica.eps_0.1.risk", "ica.wall_min"} <= payload["values"].keys()
