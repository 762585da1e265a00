"""AustereMH(c)'s pilot on the one loop: its ``|mu_std|`` against a float64 recomputation, on any data source."""

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.data import open_npy
from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.proposals import random_walk
from minibatch_mcmc.samplers.keys import split_step, step_keys
from minibatch_mcmc.samplers.pilot import pilot_mu_std

N, STEPS, T = 600, 12, 2.0


def _data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, 2)).astype(np.float32)
    y = (rng.random(N) < 1 / (1 + np.exp(-(x @ np.float32([1.0, -0.5]))))).astype(np.int32)
    return {"x": x, "y": y}


def _float64_pilot(data, proposal, key):
    """The pilot's chain recomputed in float64 numpy from the same candidates and uniforms (``sample``'s keys)."""
    x, y = data["x"].astype(np.float64), data["y"].astype(np.float64)

    def log_lik(theta):
        eta = x @ theta
        return y * eta - np.logaddexp(0.0, eta)

    def log_prior(theta):
        return float(logistic_regression().log_prior(jnp.asarray(theta, jnp.float32)))

    theta, out = np.zeros(2), []
    for t in range(STEPS):
        k_proposal, k_test = split_step(step_keys(key, t, 1)[0])
        cand = np.asarray(proposal.sample(k_proposal, jnp.asarray(theta, jnp.float32))[0], np.float64)
        terms = (log_lik(cand) - log_lik(theta)) / T
        mu0 = (np.log(float(jax.random.uniform(k_test, minval=1e-12))) - (log_prior(cand) - log_prior(theta))) / N
        out.append(abs(terms.mean() - mu0) * np.sqrt(N) / terms.std(ddof=1))
        theta = cand if terms.mean() > mu0 else theta
    return np.asarray(out)


def test_pilot_matches_float64_and_reads_out_of_core_data(tmp_path):
    """12 exact Metropolis steps of a random walk on a 600-row logistic regression at temperature 2: every |mu_std|
    equals the float64 recomputation from the same candidates and uniforms to 1e-3 relative (float32 sums of 600
    terms; a wrong s.d. divisor, temperature or decision moves them by more), and the same run on memory-mapped .npy
    files gives the same values (the earlier pilot evaluated the likelihood on the source's arrays and failed there)."""
    data, proposal, key = _data(), random_walk(scale=0.15), jax.random.key(7)
    got = pilot_mu_std(logistic_regression(), data, proposal, jnp.zeros(2), key, STEPS, T)
    np.testing.assert_allclose(got, _float64_pilot(data, proposal, key), rtol=1e-3)
    np.save(tmp_path / "x.npy", data["x"])
    np.save(tmp_path / "y.npy", data["y"])
    source = open_npy({"x": tmp_path / "x.npy", "y": tmp_path / "y.npy"})
    np.testing.assert_allclose(
        pilot_mu_std(logistic_regression(), source, proposal, jnp.zeros(2), key, STEPS, T), got, rtol=1e-5
    )
