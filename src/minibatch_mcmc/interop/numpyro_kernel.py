"""Our sampler as a NumPyro ``MCMCKernel``: ``numpyro.infer.MCMC(MinibatchMH(model), ...)`` runs it as it runs NUTS.

``init`` (once for all chains) converts the model on the arguments ``MCMC.run`` passes (``from_numpyro``)
and runs the automatic warm-up (mode, Laplace covariance, Taylor proxy, tuned proposal: ``warmup.warmup``; with
``proposal=None`` the warm-up's rule picks it) unless a ``Warmup`` is given; each chain then starts from its ``init_params`` or from an over-dispersed
Laplace draw. ``sample`` is one step of the frozen kernel; step ``t`` of the chain given key ``k`` uses
``step_keys(k, t, 1)[0]``. ``MCMC(..., num_chains=C).run(key)`` gives chain ``c`` the key
``jax.random.split(key, C)[c]`` (with either chain method), so it draws what the native
``sample(..., key=jax.random.split(key, C), num_chains=C, batched_init=True)`` draws from the same starts, and a
one-chain ``MCMC`` what ``sample(..., key=key)`` draws (``samplers.keys``). A native run from one key,
``sample(..., key=key, num_chains=C)``, splits each step's key over the chains instead: other draws, same law.
``MCMC``'s ``num_warmup`` is the warm-up's tuning length, as NUTS's is its adaptation's: the first ``init`` tunes a tuned
proposal's scale for ``num_warmup`` steps (``tuning_windows``: windows of about ``WarmupSettings.window_size`` steps, at most
a window count short of it; ``num_warmup=0``: the warm-up's own default, ``num_windows x window_size``), and the
``num_warmup`` ``sample`` calls ``MCMC`` then makes before collecting are no steps at all (the state passes through: no
rows read), so no burn-in is added. An untuned (global) proposal, the default proxy HMC, has nothing to tune: its chains
sample from their over-dispersed Laplace starts, as ``auto_sample``'s do. With ``progress`` (the default), one line says what
the warm-up chose (proposal, test and its first minibatch, the why, the tuning steps); it is also logged. ``postprocess_fn`` is the converted
model's ``constrain``, so ``get_samples``, ``print_summary``, ``Predictive`` and ``az.from_numpyro`` see named
constrained values and deterministic sites (NumPyro's ``print_summary`` reduces the float32 draws in float32, off by
posterior s.d.s at millions of draws: cast ``get_samples`` to float64 first; ``SampleResult.summary`` does). ``extra_fields`` may name ``accepted``, ``batch_size`` (data read by
the test) and ``hidden_data``. Chains run with ``chain_method="sequential"`` or ``"vectorized"``; ``"parallel"``
traces ``init``, where the warm-up cannot run. The native ``sample``/``auto_sample`` keep out-of-core data,
sharding and checkpoints.

Importing this module imports NumPyro (an optional extra).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from minibatch_mcmc.acceptance.base import AcceptanceTest
from minibatch_mcmc.interop.numpyro import NumPyroModel, from_numpyro
from minibatch_mcmc.samplers.kernel import ChainState, Kernel, build_kernel
from minibatch_mcmc.samplers.keys import as_key, step_keys
from minibatch_mcmc.warmup import Warmup, WarmupSettings, dispersed_starts, warmup
from minibatch_mcmc.warmup.laplace_moves import GLOBAL

PyTree = Any


class MinibatchMHState(NamedTuple):
    """One chain's state under ``MCMC``: the unconstrained draw ``z``, the kernel's state and the last step's record."""

    z: dict
    """Unconstrained position by site (``sample_field``)."""
    chain: ChainState
    rng_key: jax.Array
    """The chain's base key: step ``t`` uses ``step_keys(rng_key, t, 1)[0]``."""
    step: jax.Array
    accepted: jax.Array
    batch_size: jax.Array
    """Data points the acceptance test read."""
    hidden_data: jax.Array
    """Data points read outside the test's minibatch (a gradient's rows)."""
    warmup_left: jax.Array
    """``MCMC``'s warm-up calls still to pass through (the tuning ran them in ``init``): no step while positive."""


def tuning_windows(num_warmup: int, window_size: int = WarmupSettings().window_size) -> tuple[int, int] | None:
    """``(num_windows, window_size)`` whose product is ``num_warmup`` or at most ``num_windows - 1`` short of it (windows of
    about ``window_size`` steps); None for ``num_warmup=0`` (the warm-up's defaults)."""
    if num_warmup <= 0:
        return None
    windows = max(1, round(num_warmup / window_size))
    return windows, num_warmup // windows


def chosen_line(w: Warmup, n: int, num_warmup: int, steps: int | None) -> str:
    """What the warm-up chose, in one line: proposal and why, test and its first minibatch, the tuning steps."""
    rows = int(jnp.size(w.test.first_rows(jax.random.key(0), n)))
    tuning = (
        "a given Warmup: no tuning"
        if steps is None
        else f"{w.kind} is not tuned (its scale comes from the Laplace fit)"
        if w.kind in GLOBAL
        else f"scale tuned for {steps} steps"
    )
    return (
        f"MinibatchMH: proposal {w.kind} ({w.why}), test {w.test.name} ("
        + (f"first minibatch {rows} of {n} rows" if rows else f"all {n} rows")
        + f"); {tuning}; "
        f"num_warmup={num_warmup}: no further steps before sampling"
    )


class MinibatchMH(MCMCKernel):
    """Minibatch Metropolis-Hastings with a Taylor-proxy control variate, warmed up automatically, for ``numpyro.infer.MCMC``.

    ``MCMC(MinibatchMH(model), num_warmup=W, num_samples=S).run(key, *args)`` converts the model on ``args``
    (``from_numpyro``), runs ``warmup`` once in ``init`` (``W``: the steps that tune a tuned proposal's scale) and then
    takes one frozen minibatch MH step per draw.

    Args:
        model: The NumPyro model, its observations in one ``numpyro.plate``.
        test: The acceptance test; None: the warm-up's default (``warmup.DEFAULT_TEST``, the penalty test).
        proposal: A name of ``warmup.PROPOSALS``; None: the warm-up's rule (``Warmup.why`` says which it took).
        temperature: The likelihood's temperature ``K`` (1: the posterior).
        recentre: Rebuild the proxy at the mean of a short tuned run (``warmup(recentre=True)``).
        warmup_key: The warm-up's seed or key (the draws' keys are ``MCMC.run``'s).
        warmup: A ``Warmup`` found already, used instead of warming up.
        converted: The model converted already by ``from_numpyro`` on the run's arguments.
        progress: Print the line saying what the warm-up chose (it is logged at INFO either way).
    """

    sample_field = "z"

    def __init__(
        self,
        model: Callable,
        *,
        test: AcceptanceTest | None = None,
        proposal: str | None = None,
        temperature: float = 1.0,
        recentre: bool = False,
        warmup_key: jax.Array | int = 0,
        warmup: Warmup | None = None,
        converted: NumPyroModel | None = None,
        progress: bool = True,
    ):
        self._model = model
        self._options = dict(test=test, proposal=proposal, temperature=temperature, recentre=recentre, key=warmup_key)
        self._temperature = float(temperature)
        self.warmup = warmup
        """The ``Warmup`` used (found by the first ``init`` unless given)."""
        self.converted = converted
        """The model converted on ``MCMC.run``'s arguments (by the first ``init`` unless given)."""
        self._kernel: Kernel | None = None
        self._progress = progress
        self.tuning_steps: int | None = None
        """Steps the warm-up tuned the scale for (0 for an untuned proposal; None for a given ``Warmup``)."""

    @property
    def model(self) -> Callable:
        """The NumPyro model."""
        return self._model

    @property
    def default_fields(self) -> tuple[str, ...]:
        """Fields collected by default: the draws."""
        return ("z",)

    def prepare(self, model_args: tuple, model_kwargs: dict | None, num_warmup: int = 0) -> None:
        """Convert the model, warm up (unless a ``Warmup`` was given; a tuned scale for ``num_warmup`` steps) and build the
        frozen kernel, once (on the first run's arguments: a new data set needs a new kernel); say what it chose."""
        if self._kernel is not None:
            return
        if self.converted is None:
            self.converted = from_numpyro(self._model, *model_args, **(model_kwargs or {}))
        model = self.converted.model
        if self.warmup is None:
            windows = tuning_windows(num_warmup)
            s = WarmupSettings() if windows is None else WarmupSettings(num_windows=windows[0], window_size=windows[1])
            self.warmup = warmup(model, self.converted.data, self.converted.init, settings=s, **self._options)
            self.tuning_steps = 0 if self.warmup.kind in GLOBAL else s.num_windows * s.window_size
        w = self.warmup
        line = chosen_line(w, self.converted.layout.n, num_warmup, self.tuning_steps)
        logging.getLogger(__name__).info(line)
        if self._progress:
            print(line, flush=True)
        self._kernel = build_kernel(
            model, w.proposal, w.test, self.converted.layout.n, w.estimator
        )  # with its exact stratum

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """Warm up once (host side), then each chain's state from ``init_params`` or a dispersed Laplace draw."""
        if isinstance(rng_key, jax.core.Tracer):
            raise ValueError(
                "MinibatchMH warms up on the host when MCMC initialises a chain; chain_method='parallel' traces that "
                "step: use chain_method='sequential' or 'vectorized'"
            )
        self.prepare(model_args, model_kwargs, num_warmup)
        batched = not is_prng_key(rng_key)
        if init_params is None:
            first = rng_key[0] if batched else rng_key
            starts = dispersed_starts(self.warmup, len(rng_key) if batched else 1, jax.random.fold_in(as_key(first), 1))
            init_params = starts if batched else jax.tree_util.tree_map(lambda a: a[0], starts)
        one = lambda key, start: self.start(key, start, num_warmup)  # noqa: E731
        return jax.vmap(one)(rng_key, init_params) if batched else one(rng_key, init_params)

    def start(self, rng_key: jax.Array, position: PyTree, num_warmup: int = 0) -> MinibatchMHState:
        """A chain's state at ``position``, ``num_warmup`` of ``MCMC``'s warm-up calls to pass through (a dict by site
        flattened for a recognised GLM, whose parameter is flat)."""
        if isinstance(position, dict) and not isinstance(self.converted.init, dict):
            position = ravel_pytree(position)[0]
        chain = self._kernel.init(position)
        zero = jnp.zeros((), jnp.int32)
        return MinibatchMHState(
            chain.position, chain, rng_key, zero, jnp.zeros((), bool), zero, zero, jnp.asarray(num_warmup, jnp.int32)
        )

    def step(self, state: MinibatchMHState) -> MinibatchMHState:
        """One MH step of one chain."""
        key = step_keys(as_key(state.rng_key), state.step, 1)[0]
        temperature = jnp.asarray(self._temperature, jnp.float32)
        chain, outcome = self._kernel.step(key, state.chain, self.converted.data, temperature)
        return MinibatchMHState(
            chain.position,
            chain,
            state.rng_key,
            state.step + 1,
            outcome.accepted,
            jnp.asarray(outcome.batch_size, jnp.int32),
            jnp.asarray(outcome.hidden_data, jnp.int32),
            state.warmup_left,
        )

    def sample(self, state, model_args, model_kwargs):
        """The next state (every chain's, for ``chain_method="vectorized"``); during ``MCMC``'s warm-up calls, the same
        state with one call fewer left (the tuning ran in ``init``)."""
        batched = bool(jnp.ndim(state.step))
        step = jax.vmap(self.step) if batched else self.step
        left = state.warmup_left[0] if batched else state.warmup_left  # the same for every chain

        def passed(s: MinibatchMHState) -> MinibatchMHState:
            zero = jnp.zeros_like(s.batch_size)
            return s._replace(
                warmup_left=s.warmup_left - 1, accepted=jnp.zeros_like(s.accepted), batch_size=zero, hidden_data=zero
            )

        return jax.lax.cond(left > 0, passed, step, state)

    def postprocess_fn(self, model_args, model_kwargs):
        """Unconstrained draw -> named constrained and deterministic values (the converted model's ``constrain``)."""
        self.prepare(model_args, model_kwargs)
        return self.converted.model.constrain

    def get_diagnostics_str(self, state) -> str:
        """Progress-bar text: the data read by the last test."""
        return f"{int(jnp.mean(state.batch_size))} rows/test"
