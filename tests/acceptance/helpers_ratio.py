"""Synthetic ratio populations: ``Statistics`` whose per-datum log ratios are the data themselves."""

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.base import Statistics


def population(n: int, delta: float, sd_lambda: float, seed: int, skew: bool = False) -> tuple[np.ndarray, float]:
    """Per-datum log ratios ``r`` (so ``Lambda_i = n r_i``) with full-data ``Delta = sum r + psi`` and ``sd(Lambda_i)``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    if skew:
        z = rng.exponential(size=n) - 1.0
    z = (z - z.mean()) / z.std()
    r = z * sd_lambda / n
    psi = 0.3
    r = r + (delta - psi) / n
    return r.astype(np.float32), psi


def acceptance_draws(test, r: np.ndarray, psi: float, draws: int, seed: int, temperature: float = 1.0):
    """``draws`` independent decisions of ``test`` on the population ``r``: (accepted, batch_size)."""
    data = jnp.asarray(r)
    n = r.shape[0]

    @jax.jit
    def run(keys):
        def one(k):
            stats = Statistics(log_ratio=lambda b: b, data=data, n_data=n, psi=jnp.float32(psi), temperature=jnp.float32(temperature))
            out = test.decide(k, stats)
            return out.accepted, out.batch_size, out.delta_star

        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.key(seed), draws)
    acc, bs, ds = run(keys)
    return np.asarray(acc), np.asarray(bs), np.asarray(ds)


def exact_delta(r: np.ndarray, psi: float, temperature: float = 1.0) -> float:
    """Full-data ``Delta`` in float64."""
    return float(np.sum(r.astype(np.float64)) / temperature + psi)
