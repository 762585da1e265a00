"""SGD with the annealed step size ``C1 (C2 + t)^{-C3}`` (the baseline of Korattikara et al., Section 4.1)."""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from minibatch_mcmc.checks import check_int, check_positive, check_real
from minibatch_mcmc.optim.sequential_irls import IRLSProblem, check_regression_data


class SGDConfig(NamedTuple):
    """Annealing constants of ``step_t = c1 (c2 + t)^{-c3}`` and the minibatch size (the paper used 1)."""

    c1: float = 0.01
    c2: float = 1.0
    c3: float = 0.5
    batch_size: int = 1

    def validate(self, n_data: int) -> SGDConfig:
        """Check the constants: ``c1 > 0``, ``c2 > 0``, ``c3`` in ``(0, 1]``, ``1 <= batch_size <= N``."""
        check_positive(self.c1, "c1")
        check_positive(self.c2, "c2")
        check_real(self.c3, "c3", 0.0, 1.0, low_open=True)
        check_int(self.batch_size, "batch_size", 1, n_data)
        return self


def annealed_schedule(config: SGDConfig) -> optax.Schedule:
    """The step-size schedule ``t -> c1 (c2 + t)^{-c3}``."""
    return lambda t: config.c1 * (config.c2 + t) ** (-config.c3)


def make_sgd_epoch(
    problem: IRLSProblem, config: SGDConfig, n_data: int, steps: int
) -> Callable[[jax.Array, optax.OptState, dict, jax.Array], tuple[jax.Array, optax.OptState]]:
    """A jitted run of ``steps`` SGD updates on the mean loss, minibatches drawn uniformly with replacement."""
    opt = optax.sgd(annealed_schedule(config))

    def grad(theta, x, y):
        return jax.grad(lambda th: jnp.mean(problem.loss(th, x, y)))(theta)

    def run(theta, state, data, key):
        def one(carry, k):
            th, st = carry
            idx = jax.random.randint(k, (config.batch_size,), 0, n_data)
            g = grad(th, jnp.take(data["x"], idx, axis=0), jnp.take(data["y"], idx, axis=0))
            upd, st = opt.update(g, st, th)
            return (optax.apply_updates(th, upd), st), None

        (theta, state), _ = jax.lax.scan(one, (theta, state), jax.random.split(key, steps))
        return theta, state

    return jax.jit(run), opt


class SGDTrace(NamedTuple):
    """Iterates after each chunk of updates ``thetas (C+1, D)``, updates done so far and cumulative seconds."""

    thetas: np.ndarray
    num_updates: np.ndarray
    wall_times: np.ndarray


def run_sgd(
    problem: IRLSProblem,
    data: dict,
    theta0: jax.Array,
    num_updates: int,
    key: jax.Array,
    config: SGDConfig = SGDConfig(),
    num_checkpoints: int = 20,
) -> SGDTrace:
    """Run ``num_updates`` annealed-step SGD updates, recording the iterate at ``num_checkpoints`` equal chunks."""
    n, _ = check_regression_data(data, theta0)
    cfg = config.validate(n)
    num_checkpoints = check_int(num_checkpoints, "num_checkpoints", low=1)
    num_updates = check_int(num_updates, "num_updates", low=num_checkpoints, why="at least one update per checkpoint")
    chunk = num_updates // num_checkpoints
    run, opt = make_sgd_epoch(problem, cfg, n, chunk)
    theta = jnp.asarray(theta0, data["x"].dtype)
    state = opt.init(theta)
    jax.block_until_ready(run(theta, state, data, key))  # compile outside the clock
    thetas, counts, times = [np.asarray(theta)], [0], [0.0]
    elapsed = 0.0
    for c in range(num_checkpoints):
        start = time.perf_counter()
        theta, state = jax.block_until_ready(run(theta, state, data, jax.random.fold_in(key, c)))
        elapsed += time.perf_counter() - start
        thetas.append(np.asarray(theta))
        counts.append((c + 1) * chunk * cfg.batch_size)
        times.append(elapsed)
    return SGDTrace(np.stack(thetas), np.array(counts), np.array(times))
