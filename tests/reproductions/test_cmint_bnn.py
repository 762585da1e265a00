"""``reproduce cmint-bnn`` end to end on a tiny synthetic problem, and its option checks."""

import csv
import json

import numpy as np
import pytest

from reproductions import cmint_bnn
from reproductions.nn_baselines import sgd_optimizer

TINY = [
    "--source",
    "synthetic",
    "--n-train",
    "400",
    "--n-test",
    "300",
    "--epochs",
    "3",
    "--hidden",
    "16",
    "--batch-size",
    "50",
    "--cycle-epochs",
    "2",
    "--decay-every",
    "1",
    "--cycles",
    "2",
    "--mint-lr",
    "0.02",
]


@pytest.mark.slow  # a reproduction's end-to-end run (20-90 s): `make test-slow`
def test_main_tiny(tmp_path, capsys):
    results = tmp_path / "cmint_bnn_tiny.json"
    assert (
        cmint_bnn.main([*TINY, "--out", str(tmp_path), "--name", "t", "--no-progress", "--results", str(results)]) == 0
    )
    out = tmp_path / "t"
    with open(out / "test_error.csv") as f:
        rows = list(csv.DictReader(f))
    by = {(r["method"], r["estimator"]): [] for r in rows}
    for r in rows:
        by[(r["method"], r["estimator"])].append((int(r["epoch"]), float(r["test_error"])))
    for key in [("sgd", "current"), ("sgd-m", "current"), ("sgld", "average"), ("mint", "average")]:
        assert [e for e, _ in by[key]] == [1, 2, 3], key
    assert [e for e, _ in by[("cmint", "ensemble")]] == [2, 4]  # snapshots after rounds of R=2 epochs
    # SGD learns the teacher's labels: well below the 90% error of guessing among 10 classes
    assert by[("sgd", "current")][-1][1] < 0.75
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["cmint"]["snapshot_epochs"] == [2, 4]
    np.testing.assert_allclose(
        summary["methods"]["cmint"]["learning_rate_by_epoch"], [0.02, 0.018, 0.036, 0.0324], rtol=1e-6
    )
    assert 0.0 < summary["methods"]["mint"]["temperature"] < 400
    assert (out / "test_error.png").stat().st_size > 0
    assert "cmint" in capsys.readouterr().out
    # the results file: named after --results' file, cells equal to the CSV's last errors
    res = json.loads(results.read_text())
    assert res == json.loads((out / "results.json").read_text()) and res["command"].startswith(
        "minibatch-mcmc reproduce cmint-bnn"
    )
    tab = res["tables"]["cmint_bnn_tiny_errors"]
    cells = {(r[0], r[1]): r[3] for r in tab["rows"]}
    assert cells[("SGD", "current weights")] == f"{by[('sgd', 'current')][-1][1]:.3f}"
    assert cells[("CMINT", "ensemble of the 2 snapshots")] == f"{by[('cmint', 'ensemble')][-1][1]:.3f}"
    assert res["values"]["cmint_bnn_tiny.cmint_snapshots"] == ", ".join(
        f"{e:.3f}" for _, e in by[("cmint", "ensemble")]
    )


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--methods", "sgd,adam"], "methods"),
        (["--epochs", "0"], "epochs"),
        (["--mint-lr", "-1"], "mint_lr"),
        (["--batch-size", "500", "--n-train", "400"], "batch_size"),
        (["--decay", "1.5"], "decay"),
    ],
)
def test_bad_options_raise(tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        cmint_bnn.config_from_argv(extra)


def test_shared_options_that_do_not_apply_raise():
    with pytest.raises(ValueError, match="--epochs"):
        cmint_bnn.config_from_argv(["--num-samples", "100"])
    with pytest.raises(ValueError, match="--seed"):
        cmint_bnn.config_from_argv(["--trials", "3"])
    with pytest.raises(ValueError, match="mutually exclusive"):
        cmint_bnn.config_from_argv(["--quick", "--full"])
    quick = cmint_bnn.config_from_argv(["--quick", "--epochs", "5"])
    assert (quick.n_train, quick.epochs, quick.cycle_epochs, quick.cycles) == (2000, 5, 2, 3)


def test_bad_optimizer_settings_raise():
    with pytest.raises(ValueError, match="momentum"):
        sgd_optimizer(0.1, momentum=1.0)
    with pytest.raises(ValueError, match="learning_rate"):
        sgd_optimizer(0.0)
    with pytest.raises(ValueError, match="l2"):
        sgd_optimizer(0.1, l2=-1.0)


def test_sgld_matches_the_exact_stationary_law_of_unadjusted_langevin():
    """With identical data points every minibatch gradient is exact, so SGLD is the unadjusted Langevin
    AR(1) chain ``theta' = theta - (alpha P / 2)(theta - mu) + sqrt(alpha) z`` on the N(mu, 1/P) posterior:
    stationary mean ``mu`` and variance ``1 / (P (1 - alpha P / 4))`` (inflated, as SGLD is biased)."""
    import jax
    import jax.numpy as jnp

    from minibatch_mcmc.diagnostics import check_moments
    from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean
    from reproductions.nn_baselines import make_sgld_epoch

    n, b = 600, 200
    settings = GaussianMeanSettings(prior_mean=0.0, prior_scale=1.0, noise_scale=5.0)
    x = np.full((n, 1), 0.7, np.float32)
    mu, post_var = exact_posterior(x, 1.0, settings)
    precision = 1.0 / post_var
    lr = 1.0 * n / (2.0 * precision)  # alpha = 2 lr / N gives alpha P = 1: AR(1) coefficient 1/2
    run = make_sgld_epoch(gaussian_mean(settings), n, b)
    theta, draws = jnp.asarray(mu, jnp.float32), []
    for e in range(700):
        theta, _ = run(jax.random.fold_in(jax.random.key(5), e), theta, jnp.asarray(x), np.float32(lr))
        draws.append(np.asarray(theta))
    draws = np.asarray(draws)[None, 20:]
    chk = check_moments(draws, mu, np.full(1, 1.0 / (precision * 0.75)))
    assert np.all(chk.ess > 300), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.mean, chk.var, chk.exact_var)
    assert np.all(np.abs((chk.var - post_var) / chk.se_var) > 4)  # the posterior's own variance is rejected
