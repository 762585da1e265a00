"""Warm-up faults: a data file changed during any phase is a ``DataChangedError`` naming the file; a bad row is
named; ``N`` below the default minibatch is sampled with the minibatch capped at ``N``."""

import importlib

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc import models
from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.data import open_npy
from minibatch_mcmc.data.host import DataChangedError
from minibatch_mcmc.warmup import DEFAULT_PROPOSAL, auto_sample, warmup

warmup_module = importlib.import_module(
    "minibatch_mcmc.warmup.api"
)  # the module defining the warm-up (mm.warmup is the function)
auto_module = importlib.import_module("minibatch_mcmc.warmup.auto")  # the module defining auto_sample

SMALL = dict(num_windows=2, window_size=20, num_starts=0)


def gaussian_file(tmp_path, n=5000):
    path = tmp_path / "x.npy"
    np.save(path, (np.random.default_rng(0).standard_normal((n, 2)) + 1.0).astype(np.float32))
    return path


@pytest.mark.parametrize("phase", ["mode", "tuning"])
def test_file_truncated_during_warmup_is_data_changed_error(tmp_path, monkeypatch, phase):
    """Before: jax.errors.JaxRuntimeError 'CpuCallback error'. Now: DataChangedError naming the file, from the
    mode search (file truncated before it) and from tuning (file truncated as tuning starts; MALA: the default proxy HMC
    has no tuning phase)."""
    path = gaussian_file(tmp_path)
    src = open_npy(path)
    truncate = lambda: np.save(path, np.zeros((10, 2), np.float32))  # noqa: E731 - rewriting the file in place
    if phase == "mode":
        truncate()
    else:
        original = warmup_module.tune

        def tune_after_truncation(*args, **kwargs):
            truncate()
            return original(*args, **kwargs)

        monkeypatch.setattr(warmup_module, "tune", tune_after_truncation)
    with pytest.raises(DataChangedError, match=r"x\.npy .* changed during the run"):
        warmup(models.gaussian_mean(), src, jnp.zeros(2), key=0, proposal="langevin", **SMALL)


@pytest.mark.parametrize("n, proposal", [(1, "langevin"), (20, DEFAULT_PROPOSAL)])
def test_n_below_the_default_minibatch_caps_it(n, proposal):
    """Before: 'batch_size m=50 exceeds the number of data points N=1', a default never set. Now: the exact Metropolis
    test on all N rows (what the default penalty test on a minibatch of N would be), with MALA's scale tuned to its
    target acceptance, and with the default proxy HMC untuned."""
    x = (np.random.default_rng(1).standard_normal((n, 2)) + 1.0).astype(np.float32)
    w = warmup(models.gaussian_mean(), x, jnp.zeros(2), key=0, proposal=proposal, **SMALL)
    assert isinstance(w.test, MetropolisTest) and w.kind == proposal and np.isfinite(w.scale) and w.scale > 0
    assert np.isfinite(w.acceptance) == (proposal == "langevin")


def test_row_with_an_absurd_value_is_named():
    """Before: 'non-finite full-data log posterior ... check theta0 and the model's support', no row. Now: row 1234."""
    x = (np.random.default_rng(2).standard_normal((3000, 2)) + 1.0).astype(np.float32)
    x[1234, 1] = 1e30
    with pytest.raises(ValueError, match=r"datum 1234 \(row 1234 of the data\) has log-likelihood -inf"):
        warmup(models.gaussian_mean(), x, jnp.zeros(2), key=0, **SMALL)


@pytest.mark.slow
def test_auto_sample_resume_restores_the_warmup(tmp_path, monkeypatch):
    """Before: a resumed auto_sample redid the whole warm-up. Now: it is restored from the checkpoint directory
    (the warm-up is not called again) and the resumed draws equal an uninterrupted run's."""
    x = (np.random.default_rng(3).standard_normal((2000, 2)) + 1.0).astype(np.float32)
    kw = dict(num_chains=2, key=4, progress=False, block_size=50, num_starts=0)
    whole, _ = auto_sample(
        models.gaussian_mean(), x, jnp.zeros(2), num_samples=100, checkpoint_dir=tmp_path / "a", **kw
    )
    auto_sample(models.gaussian_mean(), x, jnp.zeros(2), num_samples=50, checkpoint_dir=tmp_path / "b", **kw)

    def no_warmup(*args, **kwargs):
        raise AssertionError("the warm-up was redone")

    monkeypatch.setattr(auto_module, "warmup", no_warmup)
    resumed, w = auto_sample(
        models.gaussian_mean(), x, jnp.zeros(2), num_samples=100, checkpoint_dir=tmp_path / "b", resume=True, **kw
    )
    np.testing.assert_array_equal(np.asarray(resumed.positions), np.asarray(whole.positions))
    assert w.cost["mode"].data > 0 and (w.kind, w.why) == (
        "proxy_hmc",
        "rule: no exact stratum, one mode",
    )  # kept with the warm-up
    with pytest.raises(ValueError, match="cannot resume with the warm-up saved in .* other settings"):
        auto_sample(
            models.gaussian_mean(), x, jnp.ones(2), num_samples=100, checkpoint_dir=tmp_path / "b", resume=True, **kw
        )
