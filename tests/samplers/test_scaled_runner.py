"""The block runner with the proposal scale traced: at a fixed scale it draws what ``sample`` draws with that scale, and
tuning on it then sampling with it compiles the block function once."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches

from minibatch_mcmc import models
from minibatch_mcmc.acceptance import BarkerTest, mh_minibatch
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.proposals.scaled import scaled_random_walk
from minibatch_mcmc.samplers.driver import RunOptions, sample, sample_compiled
from minibatch_mcmc.samplers.kernel import build_kernel
from minibatch_mcmc.samplers.scaled_runner import at_scale, make_scaled_runner
from minibatch_mcmc.warmup.context import WarmupContext
from minibatch_mcmc.warmup.tuning import laplace_starts, tune

N, CHAINS, STEPS = 2_000, 3, 100


@pytest.fixture(scope="module")
def problem():
    x = np.asarray(jax.random.normal(jax.random.key(1), (N, 2)), np.float32) + np.float32([1.0, -2.0])
    mean, var = models.exact_posterior(x)
    var = var * np.eye(2)
    factor = np.linalg.cholesky(var).astype(np.float32)
    starts = laplace_starts(jnp.asarray(mean, jnp.float32), var, (), CHAINS, jax.random.key(2))
    return x, factor, starts, var


def test_runner_at_a_fixed_scale_draws_what_sample_draws(problem):
    """Barker's exact test with a Laplace-shaped random walk at scale 0.9, 3 chains x 100 steps: ``sample`` with the
    shared runner (chunks of 25 steps, the scale a traced argument) against ``sample``
    compiling its own 100-step block with the scale a constant. Decisions, batch sizes and data counts exactly; floats
    to the float32 rounding bound of ``draws_tolerance`` (100 steps of sums of at most N terms); the keys depend on the
    step index alone, so chunking changes nothing else."""
    x, factor, starts, _ = problem
    test, model = BarkerTest(), models.gaussian_mean()
    kw = dict(
        test=test, num_samples=STEPS, num_chains=CHAINS, key=4, batched_init=True, block_size=STEPS, progress=False
    )
    plain = sample(model, x, starts, proposal=scaled_random_walk(factor, 0.9), **kw)
    runner = make_scaled_runner(lambda s: build_kernel(model, scaled_random_walk(factor, s), test, N), CHAINS, chunk=25)
    shared = sample_compiled(
        model,
        x,
        starts,
        proposal=scaled_random_walk(factor, 0.9),
        runner=at_scale(runner, 0.9, starts),
        run=RunOptions(block_size=STEPS, progress=False),
        **{k: v for k, v in kw.items() if k not in RunOptions._fields},
    )
    want = {"positions": np.asarray(plain.positions), **plain.records}
    got = {"positions": np.asarray(shared.positions), **shared.records}
    assert not mismatches(got, want, STEPS, N), mismatches(got, want, STEPS, N)
    assert 0.1 < plain.records["accepted"].mean() < 0.9  # decisions that could differ
    assert runner.compilations() == 1  # four chunks of 25 steps, one compiled scan


def test_tuning_then_sampling_compile_the_block_function_once(problem):
    """``tune`` (5 windows of 25 steps over 3 chains, the scale changing every window) then ``sample`` on its
    runner at the tuned scale (2 blocks of 50 steps, from the tuned chains): the block function is traced, so compiled,
    once for all of it. Sampling goes on from the tuned chains' positions and runs the tuned kernel (its acceptance
    within 0.15 of the Barker target the scale was tuned to)."""
    x, factor, starts, _ = problem
    test, model = mh_minibatch(batch_size=50), models.gaussian_mean()
    ctx = WarmupContext(model, as_data_source(x), test, None, 1.0, "barker")
    tuned, runner = tune(
        ctx, lambda s: scaled_random_walk(factor, s), starts, jax.random.key(5), 0.159, "random_walk", 5, 25
    )
    assert tuned.compilations == 1 and len(np.unique(tuned.acceptance)) > 1
    res = sample_compiled(
        model,
        x,
        tuned.position,
        proposal=scaled_random_walk(factor, tuned.scale),
        test=test,
        num_samples=STEPS,
        num_chains=CHAINS,
        key=6,
        batched_init=True,
        run=RunOptions(block_size=50, progress=False),
        runner=runner,
    )
    assert runner.compilations() == 1
    assert abs(res.records["accepted"].mean() - 0.159) < 0.15


def test_runner_refuses_other_chains_or_devices(problem):
    x, factor, starts, _ = problem
    test, model = mh_minibatch(batch_size=50), models.gaussian_mean()
    runner = at_scale(
        make_scaled_runner(lambda s: build_kernel(model, scaled_random_walk(factor, s), test, N), CHAINS), 1.0, starts
    )
    with pytest.raises(ValueError, match="runner runs 3 chains"):
        sample_compiled(
            model,
            x,
            jnp.zeros(2),
            proposal=scaled_random_walk(factor, 1.0),
            test=test,
            num_samples=10,
            num_chains=2,
            runner=runner,
            run=RunOptions(progress=False),
        )


def test_carry_hook_folds_the_steps_the_block_runner_draws(problem):
    """A ``StepHook`` carried through the scan (40 steps, 3 chains, Barker, Laplace random walk): summing each chain's
    decisions and positions without keeping the draws gives the sums of the plain runner's draws (decisions exactly,
    positions to float32 rounding of 40-term sums, 1e-4 relative); a hook that sets each step's scale from its carry
    (0.9 carried, 0.3 passed) draws what the plain runner draws at 0.9. A hook whose carry were not updated, or whose
    scale were ignored (0.3 instead of 0.9 flips decisions), would fail."""
    from minibatch_mcmc.samplers.keys import as_key
    from minibatch_mcmc.samplers.scaled_runner import StepHook, make_hooked_runner, scale_array

    x, factor, starts, _ = problem
    test, model = BarkerTest(), models.gaussian_mean()
    family = lambda s: build_kernel(model, scaled_random_walk(factor, s), test, N)  # noqa: E731
    states = jax.vmap(family(1.0).init)(starts)
    key, steps, temps = as_key(4), np.arange(40, dtype=np.int32), np.ones(40, np.float32)
    _, pos, recs = make_scaled_runner(family, CHAINS).run_block(key, states, x, steps, temps, scale_array(0.9, starts))

    def add(carry, t, new_states, rec):
        return carry[0] + rec["accepted"].astype(jnp.int32), carry[1] + new_states.position

    summed = make_hooked_runner(family, CHAINS, StepHook(add), keep_draws=False)
    zero = (jnp.zeros(CHAINS, jnp.int32), jnp.zeros_like(starts))
    _, no_pos, no_recs, (accepted, position_sum) = summed(key, states, x, steps, temps, scale_array(0.9, starts), zero)
    assert no_pos is None and no_recs is None
    np.testing.assert_array_equal(accepted, np.sum(recs["accepted"], axis=0))
    np.testing.assert_allclose(position_sum, np.sum(pos, axis=0), rtol=1e-4)
    assert 0 < int(np.sum(accepted)) < 40 * CHAINS

    scaled = make_hooked_runner(family, CHAINS, StepHook(lambda c, t, s, r: c, scale=lambda c, s: c))
    _, pos_h, recs_h, _ = scaled(key, states, x, steps, temps, scale_array(0.3, starts), scale_array(0.9, starts))
    assert not mismatches({"positions": np.asarray(pos_h), **recs_h}, {"positions": np.asarray(pos), **recs}, 40, N)
