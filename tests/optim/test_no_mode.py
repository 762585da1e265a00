"""No mode: separable logistic data with a weak or flat prior stop the warm-up with an error naming the
diverging coefficient and the cause; an end point within a fraction of a Laplace s.d. of the mode only warns."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.models import logistic_regression
from minibatch_mcmc.optim.mode import ModeResult
from minibatch_mcmc.optim.no_mode import NoModeError, check_mode, flat_names
from minibatch_mcmc.warmup import warmup


def separable(n=1000, seed=0):
    """``y = 1[z > 0]`` with ``x = (1, z, w)``: the classes are separated by the second coefficient."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    x = np.column_stack([np.ones(n), z, rng.standard_normal(n)]).astype(np.float32)
    return {"x": x, "y": (z > 0).astype(np.int32)}


@pytest.mark.parametrize("prior_scale, cause", [(1000.0, "of the curvature"), (10_000.0, "too weak"), (None, "improper posterior")])
def test_separable_data_stop_the_warmup(prior_scale, cause):
    """Before: a finite 'posterior' came back silently. Now: NoModeError naming theta[1], its value (in the hundreds
    after the Adam phase and 10 Newton steps) and the cause. Prior s.d. 1000 is the issue's case: there the prior gives ~1% of
    the curvature at the point reached, which the message reports."""
    with pytest.raises(NoModeError, match=r"Diverging parameters: theta\[1\] = [1-9]\d\d\.") as err:
        warmup(logistic_regression(prior_scale=prior_scale), separable(), jnp.zeros(3), key=0)
    assert "separable" in str(err.value) and cause in str(err.value)
    assert "theta[0]" not in str(err.value) and "theta[2]" not in str(err.value)


def fake_mode(grad, hessian):
    return ModeResult(theta_hat=jnp.zeros(2), log_posterior=-1.0, grad_norm=float(np.linalg.norm(grad)), hessian=np.asarray(hessian),
                      data_used=0, seconds=0.0, newton_steps_taken=0, converged=False, gradient=np.asarray(grad))


def test_near_mode_warns_far_or_not_concave_raises():
    """Newton decrement 0.1 (< 0.5 s.d.): a warning quoting it; 3 s.d.s away, or a saddle: NoModeError."""
    model = logistic_regression(prior_scale=1.0)
    with pytest.warns(UserWarning, match="0.1 Laplace s.d.s from the mode"):
        check_mode(model, fake_mode([0.1, 0.0], -np.eye(2)), 10, 10)
    with pytest.raises(NoModeError, match=r"3 Laplace s.d.s further on .* theta\[0\] = 0 \(Newton step \+3\)"):
        check_mode(model, fake_mode([3.0, 0.0], -np.eye(2)), 10, 10)
    with pytest.raises(NoModeError, match="not concave"):
        check_mode(model, fake_mode([0.01, 0.0], np.diag([1.0, -1.0])), 10, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_mode(model, fake_mode([3.0, 0.0], -np.eye(2))._replace(converged=True), 10, 10)


def test_flat_names_follow_ravel_order():
    assert flat_names({"b": jnp.zeros(()), "w": jnp.zeros((2, 2))}) == ["theta['b']", "theta['w'][0, 0]", "theta['w'][0, 1]",
                                                                      "theta['w'][1, 0]", "theta['w'][1, 1]"]
