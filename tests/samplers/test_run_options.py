"""``sample``'s run options as one ``RunOptions`` record, the keywords still accepted, and no compile-level option on a
public signature (``auto_sample`` decides compilation itself)."""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest

import minibatch_mcmc as mm
from minibatch_mcmc import models
from minibatch_mcmc.acceptance import MetropolisTest
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers import RunOptions, sample

X = np.random.default_rng(0).normal(1.0, 1.0, (40, 2)).astype(np.float32)


def draws(**kw):
    """Two chains, 20 steps, in blocks of 10 (so the run options matter to how the steps run)."""
    res = sample(
        models.gaussian_mean(),
        X,
        jnp.zeros(2),
        proposal=random_walk(scale=0.3),
        test=MetropolisTest(),
        num_samples=20,
        num_chains=2,
        key=1,
        **kw,
    )
    return np.asarray(res.positions)


def test_record_and_keywords_run_the_same_chains():
    """Would catch a record field not reaching the run (or a keyword dropped): the record, the keywords and a mix of the
    two draw the same chains in the same process, and an unknown option is refused with the fields named."""
    by_keywords = draws(block_size=10, progress=False)
    np.testing.assert_array_equal(draws(run=RunOptions(block_size=10, progress=False)), by_keywords)
    np.testing.assert_array_equal(draws(run=RunOptions(block_size=10), progress=False), by_keywords)
    with pytest.raises(
        TypeError, match="block_sise.*block_size, progress, devices, data_sharding, checkpoint_dir, resume"
    ):
        draws(block_sise=10)
    with pytest.raises(TypeError, match="is not a RunOptions"):
        draws(run={"block_size": 10})


def test_record_replaces_a_field_with_a_keyword(tmp_path):
    """A keyword replaces its field of ``run``: the checkpoint directory given as a keyword is the one written."""
    draws(
        run=RunOptions(block_size=10, progress=False, checkpoint_dir=tmp_path / "unused"),
        checkpoint_dir=tmp_path / "used",
    )
    assert (tmp_path / "used").exists() and not (tmp_path / "unused").exists()


@pytest.mark.parametrize("name", ["sample", "auto_sample", "warmup", "MinibatchMH", "glmm"])
def test_no_compile_level_option_on_a_public_signature(name):
    """Would catch ``compiler_options`` or a compiled ``runner`` reaching a public entry point again."""
    params = inspect.signature(getattr(mm, name)).parameters
    assert not {"compiler_options", "runner"} & set(params), sorted(params)
