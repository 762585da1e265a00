"""CMINT: the exact step-size schedule and snapshots, its one minibatch size, and the
epoch loop against the exact (tempered) posterior of the conjugate Gaussian model."""

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.acceptance import MetropolisTest, mint
from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models import GaussianMeanSettings, exact_posterior, gaussian_mean
from minibatch_mcmc.samplers.cmint import (
    cmint,
    cmint_schedule,
    cmint_test,
    ensemble_predict_proba,
    make_epoch_runner,
    run_langevin_epochs,
)

SETTINGS = GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0)


@pytest.fixture(scope="module")
def conjugate():
    rng = np.random.default_rng(7)
    return rng.normal([1.0, -0.5], 1.0, size=(5000, 2)).astype(np.float32)


def test_schedule_step_sizes_and_snapshots_exact():
    s = cmint_schedule(1.0, decay_every=2, decay_factor=0.5, cycle_length=5, increase_factor=2.0, num_cycles=3)
    # round 1: 1, 1, .5, .5, .25 | snapshot, x2 -> .5 | round 2: .5, .5, .25, .25, .125 | snapshot, x2 -> .25 | ...
    expected = [1, 1, 0.5, 0.5, 0.25, 0.5, 0.5, 0.25, 0.25, 0.125, 0.25, 0.25, 0.125, 0.125, 0.0625]
    np.testing.assert_allclose(s.epoch_step_sizes(), expected, rtol=0, atol=0)
    assert s.snapshot_epochs() == (5, 10, 15)
    assert s.total_epochs == 15 and s.decays_per_cycle == 2
    assert s.step_size_at(9) == 0.125


def test_paper_schedule():
    s = cmint_schedule(0.22)  # r=5, x0.9, R=50, x2, K=10 as in Section 4.3.2
    alphas = s.epoch_step_sizes()
    assert alphas.shape == (500,) and s.snapshot_epochs() == tuple(range(50, 501, 50))
    np.testing.assert_allclose(alphas[:10], [0.22] * 5 + [0.22 * 0.9] * 5)
    assert alphas[49] == pytest.approx(0.22 * 0.9**9)  # last epoch before the first snapshot
    assert alphas[50] == pytest.approx(2 * 0.22 * 0.9**9)  # doubled right after it
    ratios = alphas[1:] / alphas[:-1]
    changes = np.flatnonzero(~np.isclose(ratios, 1.0)) + 1
    np.testing.assert_array_equal(changes, [e for e in range(5, 500, 5)])
    np.testing.assert_allclose(ratios[changes - 1], [2.0 if e % 50 == 0 else 0.9 for e in changes])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(step_size=0.0), "step_size"),
        (dict(step_size=float("nan")), "step_size"),
        (dict(step_size=1.0, decay_every=0), "decay_every"),
        (dict(step_size=1.0, decay_every=6, cycle_length=5), "must not exceed cycle_length"),
        (dict(step_size=1.0, decay_factor=1.0), "decay_factor"),
        (dict(step_size=1.0, decay_factor=0.0), "decay_factor"),
        (dict(step_size=1.0, increase_factor=1.0), "increase_factor"),
        (dict(step_size=1.0, num_cycles=0), "num_cycles"),
        (dict(step_size=1.0, cycle_length=2.5), "cycle_length"),
    ],
)
def test_bad_schedule_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cmint_schedule(**kwargs)


def test_bad_run_arguments_raise(conjugate):
    model, start = gaussian_mean(SETTINGS), jnp.zeros(2)
    common = dict(batch_size=100, test=MetropolisTest())
    with pytest.raises(ValueError, match="step sizes must be positive"):
        run_langevin_epochs(model, conjugate, start, step_sizes=[0.1, -1.0], **common)
    with pytest.raises(ValueError, match="snapshot epochs"):
        run_langevin_epochs(model, conjugate, start, step_sizes=[0.1], snapshot_epochs=[2], **common)
    with pytest.raises(ValueError, match="batch_size"):
        run_langevin_epochs(model, conjugate, start, step_sizes=[0.1], batch_size=10**6, test=MetropolisTest())
    other = make_epoch_runner(model, MetropolisTest(), 5000, 100, 7)
    with pytest.raises(ValueError, match="different steps_per_epoch"):
        run_langevin_epochs(model, conjugate, start, step_sizes=[0.1], runner=other, **common)
    with pytest.raises(ValueError, match="CMINTSchedule"):
        cmint(model, conjugate, start, {"step_size": 0.1}, batch_size=100)
    with pytest.raises(ValueError, match="epoch"):
        cmint_schedule(1.0, cycle_length=5, num_cycles=2).step_size_at(10)
    with pytest.raises(ValueError, match="empty"):
        ensemble_predict_proba(lambda p, x: x, [], 0.0)


def test_cmint_has_one_minibatch_size(conjugate):
    """``batch_size`` sets the MINT test's minibatch too; a MINT test of another size is refused."""
    assert cmint_test(100, 5000) == mint(batch_size=100, alpha=0.99)
    assert cmint_test(100, 5000, mint(batch_size=100, alpha=0.5)) == mint(batch_size=100, alpha=0.5)
    assert cmint_test(100, 5000, MetropolisTest()) == MetropolisTest()
    with pytest.raises(ValueError, match="draws m=50 points but batch_size=100"):
        cmint_test(100, 5000, mint(batch_size=50, alpha=0.99))
    sched = cmint_schedule(0.01, decay_every=1, cycle_length=1, num_cycles=1)
    with pytest.raises(ValueError, match="share one size"):
        cmint(
            gaussian_mean(SETTINGS), conjugate, jnp.zeros(2), sched, batch_size=100, test=mint(batch_size=64, alpha=0.9)
        )


def test_cmint_snapshots_are_the_states_after_each_round(conjugate):
    sched = cmint_schedule(0.02, decay_every=1, decay_factor=0.8, cycle_length=3, increase_factor=1.5, num_cycles=3)
    seen = {}

    def cb(epoch, state, stats):
        seen[epoch] = np.asarray(state.position)
        assert 0.0 <= float(stats.acceptance_rate) <= 1.0

    res = cmint(
        gaussian_mean(SETTINGS), conjugate, jnp.zeros(2), sched, batch_size=100, key=1, steps_per_epoch=4, callback=cb
    )
    assert sorted(seen) == list(range(1, 10))
    assert res.snapshot_epochs == (3, 6, 9) and len(res.snapshots) == 3
    for snap, epoch in zip(res.snapshots, res.snapshot_epochs):
        np.testing.assert_array_equal(snap, seen[epoch])
    np.testing.assert_allclose(res.step_sizes, sched.epoch_step_sizes())
    assert res.acceptance.shape == (9,) and res.steps_per_epoch == 4
    # the ensemble averages the members' predictions
    np.testing.assert_allclose(
        ensemble_predict_proba(lambda p, x: p * x, res.snapshots, 2.0), 2.0 * np.mean(res.snapshots, axis=0), rtol=1e-6
    )


@pytest.mark.parametrize(
    "test, temperature, grad_batch",
    [
        (MetropolisTest(), 1.0, 5000),
        (mint(batch_size=500, alpha=0.5), 5000 ** (1 - 0.5 * np.log(500) / np.log(5000)), 100),
    ],
    ids=["mala-full-data", "mint-tempered"],
)
def test_langevin_epochs_recover_exact_posterior(conjugate, test, temperature, grad_batch):
    """MALA (full-data gradient and test) and MINT with a minibatch-gradient proposal tempered at MINT's T."""
    mean, var = exact_posterior(conjugate, temperature, SETTINGS)
    sd = float(np.sqrt(var))
    draws = []
    res = run_langevin_epochs(
        gaussian_mean(SETTINGS),
        conjugate,
        jnp.asarray(mean + 3 * sd, jnp.float32),
        step_sizes=np.full(500, 1.5 * var),  # MALA step alpha ~ 1.5 sigma^2
        batch_size=grad_batch,
        test=test,
        key=11,
        steps_per_epoch=6,
        callback=lambda e, st, stats: draws.append(np.asarray(st.position)),
    )
    chk = check_moments(np.asarray(draws)[None, 50:], mean, var)
    assert np.all(chk.ess > 200), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4), (chk.mean, chk.exact_mean, chk.se_mean)
    assert np.all(np.abs(chk.z_var()) < 4), (chk.var, chk.exact_var, chk.se_var)
    assert 0.3 < res.acceptance.mean() < 0.99


def test_epochs_draw_what_sample_draws(conjugate):
    """The epochs run on the block runner with ``sample``'s key schedule: two epochs of 15 MALA steps (Metropolis,
    full-data gradient, step twice the posterior variance, from the posterior mean) end where ``sample`` with that proposal, one chain and the same key ends after 30
    steps, with the same acceptance per epoch and the epoch's position sums equal to the sums of ``sample``'s draws
    (float32 rounding of 15-term sums: 1e-5 relative). A private key schedule (the loop's own ``fold_in`` by epoch)
    would flip decisions and fail; so would epoch 2 restarting at step 0."""
    from minibatch_mcmc.proposals.langevin import tempered_langevin
    from minibatch_mcmc.samplers.driver import sample

    mean, var = exact_posterior(conjugate, 1.0, SETTINGS)
    model, start, alpha = gaussian_mean(SETTINGS), jnp.asarray(mean, jnp.float32), 2 * float(var)
    sums = []
    res = run_langevin_epochs(
        model,
        conjugate,
        start,
        step_sizes=[alpha, alpha],
        batch_size=len(conjugate),
        test=MetropolisTest(),
        key=5,
        steps_per_epoch=15,
        callback=lambda e, st, stats: sums.append(np.asarray(stats.position_sum)),
    )
    ref = sample(
        model,
        conjugate,
        start,
        proposal=tempered_langevin(model.log_prior, alpha, len(conjugate)),
        test=MetropolisTest(),
        num_samples=30,
        key=5,
        block_size=30,
        progress=False,
    )
    accepted = ref.records["accepted"][0]
    assert 5 < accepted.sum() < 25, accepted.sum()  # decisions that another key would change
    np.testing.assert_array_equal(np.round(res.acceptance * 15), [accepted[:15].sum(), accepted[15:].sum()])
    draws = np.asarray(ref.positions)[0]
    np.testing.assert_allclose(np.asarray(res.final.position), draws[-1], rtol=1e-5)
    np.testing.assert_allclose(sums, [draws[:15].sum(axis=0), draws[15:].sum(axis=0)], rtol=1e-5)
