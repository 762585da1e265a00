"""The converted model's start: NumPyro's own ``find_valid_initial_params`` start, from one compiled function."""

from __future__ import annotations

import numpy as np
import pytest

numpyro = pytest.importorskip("numpyro")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer.initialization import init_to_median  # noqa: E402
from numpyro.infer.util import find_valid_initial_params  # noqa: E402

from minibatch_mcmc.interop import from_numpyro  # noqa: E402


def scaled_regression(x, y):
    """Student-t regression with a positive scale (a constrained site) and a vector site."""
    beta = numpyro.sample("beta", dist.Normal(0.0, 5.0).expand([x.shape[1]]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.StudentT(4.0, x @ beta, s), obs=y)


def test_start_is_numpyros_find_valid_initial_params():
    """``from_numpyro``'s start (NumPyro's first ``init_to_median`` try, compiled with the conversion's checks) equals
    NumPyro's whole search run by NumPyro on the same key. Would catch a start drawn from another key or split (each
    median of 15 prior draws then moves by about a tenth of a prior s.d., far above the float32 tolerance used here),
    a missing inverse transform of the positive site, or a site left out."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5, 0.2]) + rng.standard_t(4, size=300)).astype(np.float32)
    conv = from_numpyro(scaled_regression, jnp.asarray(x), jnp.asarray(y))
    proto = {"beta": jnp.zeros(3), "s": jnp.zeros(())}
    (want, _, _), valid = jax.jit(
        lambda k: find_valid_initial_params(
            k, lambda: scaled_regression(x, y), init_strategy=init_to_median, prototype_params=proto
        )
    )(jax.random.PRNGKey(0))
    assert bool(valid)
    assert set(conv.init) == {"beta", "s"}
    for k in conv.init:
        np.testing.assert_allclose(np.asarray(conv.init[k]), np.asarray(want[k]), rtol=1e-5, atol=1e-6)
    assert float(np.max(np.abs(np.asarray(want["beta"])))) > 0.01  # a median of prior draws, not the prototype's zeros
