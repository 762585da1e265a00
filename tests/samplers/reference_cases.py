"""Fixed-seed runs of every sampler and acceptance test, whose draws a refactor must keep.

``python tests/samplers/reference_cases.py`` writes ``reference_draws.npz`` beside this file;
``test_same_draws.py`` reruns every case and compares with it. Regenerate only for an intended
change of draws, and say which cases changed and why in the commit message.
"""

from __future__ import annotations

import pathlib
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

REFERENCE = pathlib.Path(__file__).with_name("reference_draws.npz")
N_DATA = 3000
STEPS = 40
CHAINS = 2


def _mixture():
    from minibatch_mcmc.models import gaussian_mixture, make_mixture_data

    return gaussian_mixture(), make_mixture_data(jax.random.key(5), N_DATA), np.zeros(2, np.float32)


def _logistic():
    from minibatch_mcmc.models import logistic_regression, make_logistic_data

    data, _ = make_logistic_data(jax.random.key(3), N_DATA, 3)
    return logistic_regression(prior_scale=10.0), data, np.zeros(3, np.float32)


def flat_draws(result) -> dict[str, np.ndarray]:
    """A ``SampleResult``'s positions (every leaf) and per-step records as named arrays (compared by ``draws_tolerance``)."""
    out = {f"pos{i}": np.asarray(a) for i, a in enumerate(jax.tree_util.tree_leaves(result.positions))}
    out.update({f"rec_{k}": np.asarray(v) for k, v in result.records.items()})
    return out


def _run(model, data, start, proposal, test, temperature=1.0, key=11, **kw) -> dict[str, np.ndarray]:
    from minibatch_mcmc.samplers import sample

    res = sample(
        model,
        data,
        start,
        proposal=proposal,
        test=test,
        num_samples=STEPS,
        num_chains=CHAINS,
        temperature=temperature,
        key=key,
        progress=False,
        block_size=STEPS,
        **kw,
    )
    return flat_draws(res)


def _sampler_cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    import minibatch_mcmc.acceptance as acc
    from minibatch_mcmc.acceptance.austere_design import design_adaptive, design_table
    from minibatch_mcmc.proposals import langevin, random_walk

    # The data, and the adaptive test's design table, are built when a case runs, not when the cases are listed:
    # pytest lists them in every worker while collecting, runs each in one.
    def mix(test, temperature=30.0, proposal=None):
        return lambda: _run(*_mixture(), proposal or random_walk(scale=0.3), test, temperature)

    def logi(test, proposal=None):
        return lambda: _run(*_logistic(), proposal or random_walk(scale=0.05), test, 1.0)

    def adaptive():
        table = design_table(N_DATA, [0.0, 0.5, 2.0, 8.0], batch_sizes=(50, 100), epsilons=(0.01, 0.1), n_paths=200)
        return acc.austere_mh_adaptive(design_adaptive(table, 0.05))

    return {
        "metropolis": mix(acc.MetropolisTest()),
        "barker": mix(acc.BarkerTest()),
        "mhminibatch": mix(acc.mh_minibatch(batch_size=50, sigma=1.0)),
        "mhminibatch_delta": mix(acc.mh_minibatch(batch_size=40, sigma=1.2, delta=0.2)),
        "mhminibatch_logistic": logi(acc.mh_minibatch(batch_size=30)),
        "austere_c": mix(acc.austere_mh(batch_size=50, epsilon=0.05)),
        "austere_nc": lambda: mix(adaptive())(),
        "mhsublhd": mix(acc.mh_sublhd()),
        "mhsublhd_fpc": mix(acc.mh_sublhd(batch_size=60, gamma=2.0, delta=0.05, finite_population=True)),
        "mhsublhd_range": logi(acc.mh_sublhd(range_bound=lambda stats: jnp.asarray(50.0))),
        "naive": mix(acc.naive_minibatch(100)),
        "penalty": mix(acc.penalty_test(batch_size=50)),
        "mint": mix(acc.mint(0.7, 0.3), temperature=1.0),
        "mint_alpha": mix(acc.mint(batch_size=100, alpha=0.5), temperature=1.0),
        "sgld": mix(acc.no_test(), proposal=langevin(1e-3, batch_size=50)),
        "langevin_mhminibatch": mix(acc.mh_minibatch(batch_size=50), proposal=langevin(1e-3, batch_size=50)),
        "mala": logi(acc.MetropolisTest(), proposal=langevin(2e-3)),
        "langevin_mint": mix(acc.mint(0.7, 0.3), temperature=1.0, proposal=langevin(1e-3, batch_size=40)),
        "langevin_austere": logi(acc.austere_mh(batch_size=50, epsilon=0.05), proposal=langevin(2e-3, batch_size=100)),
        "langevin_sublhd": logi(acc.mh_sublhd(), proposal=langevin(2e-3, batch_size=100)),
    }


def _structured_cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch
    from minibatch_mcmc.models import ica, make_ica_data, make_selection_data, selection_state, variable_selection
    from minibatch_mcmc.proposals import reversible_jump, stiefel_random_walk

    def rj():
        data, _ = make_selection_data(seed=1, n=N_DATA, d=4, n_active=2)
        d = int(np.shape(data["x"])[1])
        start = selection_state(np.full(d, 0.1), np.ones(d))
        return _run(
            variable_selection(d, lam=3.0),
            data,
            start,
            reversible_jump(d, update_sd=0.3, birth_sd=0.5),
            mh_minibatch(batch_size=100),
        )

    def stiefel():
        d = make_ica_data(seed=0, n=N_DATA)
        return _run(
            ica(),
            {"x": jnp.asarray(d.data["x"][:, :2], jnp.float32)},
            jnp.eye(2),
            stiefel_random_walk(0.1),
            MetropolisTest(),
        )

    return {"rj_mhminibatch": rj, "stiefel_metropolis": stiefel}


def _epoch_cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    from minibatch_mcmc.acceptance import MetropolisTest, mh_minibatch
    from minibatch_mcmc.models import GaussianMeanSettings, gaussian_mean
    from minibatch_mcmc.samplers.cmint import cmint, cmint_schedule, run_langevin_epochs

    data = np.random.default_rng(7).normal([1.0, -0.5], 1.0, size=(N_DATA, 2)).astype(np.float32)
    model = gaussian_mean(GaussianMeanSettings(prior_mean=0.0, prior_scale=10.0, noise_scale=1.0))

    def cm():
        sched = cmint_schedule(1e-3, decay_every=1, cycle_length=2, num_cycles=2)
        res = cmint(model, data, jnp.zeros(2), sched, batch_size=100, key=4, steps_per_epoch=10)
        return {
            "final": np.asarray(res.final.position),
            "snaps": np.stack([np.asarray(s) for s in res.snapshots]),
            "acc": res.acceptance,
        }

    def epochs():
        res = run_langevin_epochs(
            model,
            data,
            jnp.zeros(2),
            step_sizes=[1e-3, 5e-4],
            batch_size=100,
            test=mh_minibatch(batch_size=50),
            key=2,
            steps_per_epoch=10,
            snapshot_epochs=[1, 2],
        )
        return {
            "final": np.asarray(res.final.position),
            "snaps": np.stack([np.asarray(s) for s in res.snapshots]),
            "acc": res.acceptance,
        }

    def epochs_exact():
        res = run_langevin_epochs(
            model,
            data,
            jnp.zeros(2),
            step_sizes=[1e-3],
            batch_size=100,
            test=MetropolisTest(),
            key=2,
            steps_per_epoch=10,
        )
        return {"final": np.asarray(res.final.position), "acc": res.acceptance}

    return {"cmint": cm, "langevin_epochs_mhminibatch": epochs, "langevin_epochs_metropolis": epochs_exact}


def _mintee_cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    from minibatch_mcmc.models import Model
    from minibatch_mcmc.samplers.mintee import MINTEEConfig, mintee

    x = np.random.default_rng(0)
    signs = np.where(x.random(400) < 0.5, 1.0, -1.0)
    data = jnp.asarray(signs * 1.5 + x.standard_normal(400), jnp.float32)
    model = Model(
        log_prior=lambda t: -0.5 * jnp.sum((t - 0.27) ** 2),
        log_lik=lambda t, b: jnp.logaddexp(-0.5 * (b - t[0]) ** 2, -0.5 * (b + t[0]) ** 2),
        name="pair",
    )
    base = MINTEEConfig(
        num_chains=3,
        smallest_batch=8,
        gamma=2.0,
        alpha=0.3,
        p_ee=0.3,
        h0=-300.0,
        initial_step=2e-3,
        burn_in=30,
        ring_capacity=16,
        adapt_window=5,
    )

    def run(cfg):
        def go():
            res = mintee(
                model, data, jnp.asarray([-1.5]), cfg, num_samples=60, key=3, block_size=50, keep_all_chains=True
            )
            out = {
                "lowest": np.asarray(res.lowest.positions),
                "all": np.asarray(res.all_positions),
                "ring_count": np.asarray(res.ring_count),
            }
            out.update({f"rec_{k}": np.asarray(v) for k, v in res.records.items()})
            return out

        return go

    return {
        "mintee": run(base),
        "mintee_cached_padded": run(base._replace(ee_energy="cached", layout="padded", lowest_full_data=False)),
        "mintee_full_data_stagger": run(base._replace(full_data=True, stagger=5)),
    }


def all_cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    """Every reference case by name."""
    return {**_sampler_cases(), **_structured_cases(), **_epoch_cases(), **_mintee_cases()}


def run_case(name: str) -> dict[str, np.ndarray]:
    """The arrays of one case."""
    return all_cases()[name]()


def write_reference() -> None:
    """Run every case and write ``reference_draws.npz``."""
    arrays = {}
    for name, fn in all_cases().items():
        for k, v in fn().items():
            arrays[f"{name}/{k}"] = v
        print(name, flush=True)
    np.savez_compressed(REFERENCE, **arrays)


def update_reference(prefix: str) -> None:
    """Rewrite only the cases whose name starts with ``prefix`` (an intended change of those draws)."""
    with np.load(REFERENCE) as f:
        arrays = {k: f[k] for k in f.files if not k.startswith(prefix)}
    for name, fn in all_cases().items():
        if name.startswith(prefix):
            arrays.update({f"{name}/{k}": v for k, v in fn().items()})
    np.savez_compressed(REFERENCE, **arrays)


if __name__ == "__main__":
    import sys

    update_reference(sys.argv[1]) if len(sys.argv) > 1 else write_reference()
