"""Fast compilation for short runs: when it applies, that it leaves the chain as it is, and where auto_sample uses it."""

import importlib
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from draws_tolerance import mismatches
from reference_cases import flat_draws

from minibatch_mcmc import compiling
from minibatch_mcmc.compiling import FAST_COMPILE, ONE_OFF_WORK, RUN_WORK, compile_options
from minibatch_mcmc.data.arrays import as_data_source
from minibatch_mcmc.models import logistic_regression, make_logistic_data
from minibatch_mcmc.samplers import driver
from minibatch_mcmc.samplers.scaled_runner import make_scaled_runner
from minibatch_mcmc.warmup import auto_sample, warmup
from minibatch_mcmc.warmup import tuning as warmup_tuning
from minibatch_mcmc.warmup.context import WarmupContext

auto_module = importlib.import_module(
    "minibatch_mcmc.warmup.auto"
)  # the module defining auto_sample (patch the names it looks up there)

N, D, CHAINS, STEPS = 2000, 3, 4, 200


@pytest.fixture(scope="module")
def fitted():
    """A logistic regression and its warm-up at the defaults (proxy HMC, penalty test)."""
    model = logistic_regression(prior_scale=10.0)
    data, _ = make_logistic_data(jax.random.key(0), N, D)
    return model, data, warmup(model, data, jnp.zeros(D), key=0)


def test_compile_options_follow_the_work_and_the_backend(monkeypatch):
    """Fast compilation exactly up to the limit, on the CPU only (a GPU's compiler is another matter)."""
    assert jax.default_backend() == "cpu"
    for limit in (RUN_WORK, ONE_OFF_WORK):
        assert compile_options(limit, limit) == FAST_COMPILE
        assert compile_options(limit + 1, limit) is None
    assert compile_options(0, RUN_WORK) is not FAST_COMPILE  # a copy: a caller cannot change the module's options
    monkeypatch.setattr(compiling.jax, "default_backend", lambda: "gpu")
    assert compile_options(0, RUN_WORK) is None


def test_fast_compile_options_add_the_loop_emitters_where_xla_takes_them(monkeypatch):
    """``fast_compile_options``: ``FAST_COMPILE`` plus ``LOOP_EMITTERS`` up to the limit on the CPU, None past it; an
    option the backend does not know (another XLA version) is probed and left out, not passed to fail the compilation
    ("No such compile option"). Fails on the original code, which had no such options."""
    assert compiling.backend_knows("xla_no_such_option_here", False) is False
    assert compiling.backend_knows(*next(iter(compiling.LOOP_EMITTERS.items()))) is True  # this jaxlib takes it
    assert compiling.fast_compile_options(1, 1) == FAST_COMPILE | compiling.LOOP_EMITTERS
    assert compiling.fast_compile_options(2, 1) is None
    monkeypatch.setattr(compiling, "backend_knows", lambda name, value: False)
    assert compiling.fast_compile_options(1, 1) == FAST_COMPILE


def test_fast_compiled_runner_draws_the_same_chain(fitted, monkeypatch):
    """The default kernel compiled with ``FAST_COMPILE`` against XLA's defaults, same seed: every decision, batch size and
    row count identical, positions within the float32 rounding bound of ``draws_tolerance`` (the two compilations may
    round differently: unoptimised code does not fuse multiply-adds). Catches an option that changed what the kernel
    computes (fast-math reassociation, a flipped decision anywhere in 800 chain-steps), not only how fast it compiles.
    Left out: the CLT bound ``epsilon``, a ratio of float32 power sums to ``s2^(3/2)`` that no decision reads; where the
    control variate leaves ``s2`` near ``1e-7`` the sums cancel to a few digits and two compilations differ by ~1%
    there, beyond a rounding bound relative to the array's largest value (``s2`` itself is compared)."""
    model, data, w = fitted
    built = []
    monkeypatch.setattr(
        driver, "make_scaled_runner", lambda *a, **k: built.append(k["compiler_options"]) or make_scaled_runner(*a, **k)
    )
    starts = jax.tree_util.tree_map(lambda a: jnp.stack([a] * CHAINS), w.centre)
    runs = [
        driver.sample_compiled(
            model,
            data,
            starts,
            proposal=w.proposal,
            test=w.test,
            estimator=w.estimator,
            num_samples=STEPS,
            num_chains=CHAINS,
            key=3,
            run=driver.RunOptions(progress=False),
            batched_init=True,
            compiler_options=options,
        )
        for options in (None, dict(FAST_COMPILE))
    ]
    assert built == [None, FAST_COMPILE]  # the options reached the runner's jit
    assert 0.3 < np.mean(runs[0].records["accepted"]) < 1.0  # the chains move: equality is not vacuous
    got, want = ({k: v for k, v in flat_draws(r).items() if k != "rec_epsilon"} for r in runs)
    assert not (bad := mismatches(got, want, STEPS, N)), bad


def test_auto_sample_compiles_short_runs_fast(fitted, monkeypatch, tmp_path):
    """``auto_sample`` asks for fast compilation for a run of at most ``RUN_WORK`` chain-steps x d, not for a longer one,
    and not with a checkpoint (a resumed run may be longer, and must compile as the first did)."""
    model, data, w = fitted
    seen, asked = [], []

    class Sampled(Exception):
        pass

    def spy(*args, **kwargs):
        seen.append(kwargs.get("compiler_options"))
        raise Sampled  # the compile level is all this test needs: no run

    monkeypatch.setattr(auto_module, "stored_warmup", lambda *a, **k: asked.append(a[4]) or w)
    monkeypatch.setattr(auto_module, "sample_compiled", spy)
    longest = RUN_WORK // (CHAINS * D)
    for num_samples, extra in ((longest, {}), (longest + 1, {}), (10, {"checkpoint_dir": tmp_path / "unused"})):
        with pytest.raises(Sampled):
            auto_sample(
                model,
                data,
                jnp.zeros(D),
                num_samples=num_samples,
                num_chains=CHAINS,
                progress=False,
                check_draws=0,
                **extra,
            )
    assert seen == [FAST_COMPILE, None, None]
    assert [o.get("num_samples") for o in asked] == [
        longest,
        longest + 1,
        None,
    ]  # the tuned runner's run, not with a checkpoint


def test_tuned_runner_counts_tuning_and_sampling(fitted, monkeypatch):
    """The runner a tuned proposal shares between tuning and sampling compiles fast only if both together stay within
    ``RUN_WORK``, and keeps XLA's defaults when the sampling length is not known (a user's own ``warmup(num_chains=C)``,
    whose runner may then run any length)."""
    model, data, w = fitted
    seen = []

    class Built(Exception):
        pass

    def spy(*args, **kwargs):
        seen.append(kwargs["compiler_options"])
        raise Built  # the compile level is all this test needs: no tuning

    monkeypatch.setattr(warmup_tuning, "make_scaled_runner", spy)
    starts = jax.tree_util.tree_map(lambda a: jnp.stack([a] * CHAINS), w.centre)
    num_windows, window_size = 20, 50
    tuning = max(warmup_tuning.MIN_WINDOWS, -(-num_windows // CHAINS)) * window_size
    longest = RUN_WORK // (CHAINS * D) - tuning
    for steps in (longest, longest + 1, None):
        with pytest.raises(Built):
            ctx = WarmupContext(model, as_data_source(data), w.test, w.estimator, 1.0, "metropolis")
            warmup_tuning.tune(
                ctx,
                lambda s: w.proposal,
                starts,
                jax.random.key(0),
                0.234,
                "random_walk",
                num_windows,
                window_size,
                None,
                steps,
            )
    with pytest.raises(Built):  # warmup hands its num_samples on
        warmup(model, data, jnp.zeros(D), key=0, proposal="random_walk", num_chains=CHAINS, num_samples=longest)
    assert seen == [FAST_COMPILE, None, None, FAST_COMPILE]


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the resident set size from Linux's /proc")
def test_release_freed_heap_returns_freed_pages():
    """64 MB of 64 KB blocks written, then freed below a block still held (so ``free`` cannot trim the heap's top
    itself): ``release_freed_heap`` hands at least half of them back, where glibc keeps them resident without it (a
    call that does nothing, or trims only the top, fails)."""
    if not compiling.release_freed_heap():
        pytest.skip("no malloc_trim in this C library")

    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    blocks = [b"x" * 65_000 for _ in range(1000)]
    held = b"y" * 65_000
    before = rss()
    del blocks
    freed = rss()
    compiling.release_freed_heap()
    assert before - rss() > 32e6, (
        f"resident {before / 1e6:.0f} MB, {freed / 1e6:.0f} after free, {rss() / 1e6:.0f} after"
    )
    assert held
