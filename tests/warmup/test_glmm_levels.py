"""warmup.glmm_levels: each level's log-likelihood along its effect, read on a grid in the proxy's pass, against the
exact full-data log-likelihood (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
from test_glmm_mode import logistic_groups

from minibatch_mcmc.control_variates.glmm import glmm_proxy
from minibatch_mcmc.models.glmm import initial_theta
from minibatch_mcmc.warmup.glmm_levels import grid_knots, grid_reader, level_correction


def test_level_grid_follows_each_levels_log_likelihood():
    """A logistic GLMM (4,000 rows, 20 levels of 200) expanded where every effect is 0 and the s.d. 1 (so each level's
    parameter is its effect ``u``, whatever its centring): moving five levels' effects by up to 1.5 on the ``eta``
    scale, inside their grids, the second-order proxy misses the log-likelihood's change by over 1 nat, the proxy plus
    the grids' correction by under 1% of that (measured: 7.26 nats against 0.002); moving along the intercept's ridge
    (``beta_0 + c``, every ``u - c``), which leaves every ``eta``, the correction stays 0 (one in the effects' own move,
    without the intercept's, is off there by about the quadratic's error)."""
    with jax.enable_x64(True):
        model, data = logistic_groups(4000, 20)
        data = {k: jnp.asarray(v, jnp.float64) if v.dtype == np.float32 else jnp.asarray(v) for k, v in data.items()}
        x = np.zeros(np.asarray(initial_theta(model)).size)
        x[0] = -0.5
        centre = jnp.asarray(x)
        proxy = glmm_proxy(model, data, centre, cubic_info=None)
        knots = grid_knots(proxy, x, 3.0)
        each, result = grid_reader(
            model.glmm.layout, model.glmm.row_log_density, model.glmm.split(centre), knots, jnp.float64
        )
        proxy = glmm_proxy(model, data, centre, cubic_info=None, each=each)
        grids = result()
        assert [g.factor for g in grids] == [0]
        total = jax.jit(lambda t: jnp.sum(model.log_lik(t, data)))
        base = float(total(centre))
        proxy_sum = jax.jit(proxy.proxy_sum)  # one program each, not op by op
        correction = jax.jit(lambda t: level_correction(proxy, grids, t))
        quadratic_errors, grid_errors = [], []
        for scale in (0.5, 1.0, 1.5):
            y = x.copy()
            y[3:8] += scale * np.array([1.0, -1.0, 0.5, 0.8, -0.6])  # five levels' effects (centred: u itself)
            assert np.all(np.abs(y[3:8]) <= knots[0][:5, -1])  # inside each level's grid
            exact = float(total(jnp.asarray(y))) - base
            q = float(proxy_sum(jnp.asarray(y)))
            c = float(correction(jnp.asarray(y)))
            quadratic_errors.append(abs(q - exact))
            grid_errors.append(abs(q + c - exact))
        assert max(quadratic_errors) > 1.0, quadratic_errors
        assert max(grid_errors) <= 0.01 * max(quadratic_errors), (grid_errors, quadratic_errors)
        ridge = x.copy()
        ridge[0] += 0.6
        ridge[3:23] -= 0.6
        assert abs(float(total(jnp.asarray(ridge))) - base) < 1e-6
        assert abs(float(correction(jnp.asarray(ridge)))) < 1e-6
