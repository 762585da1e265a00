"""Trust-region Newton steps in the posterior's own scale (``optim.trust_region``), against closed forms and scipy."""

import numpy as np
import scipy.optimize

from minibatch_mcmc.optim.trust_region import climb, decrement, metric_length, trust_step


def test_step_is_newton_inside_and_on_the_boundary_outside():
    """Concave with the Newton step inside the radius: exactly ``(-H)^{-1} g``. Indefinite: a step of length ``radius``
    in the ``|H|`` metric whose predicted increase is positive and at least the pure-gradient step's of that length."""
    h, g = -np.array([[4.0, 1.0], [1.0, 2.0]]), np.array([1.0, -1.0])
    s = trust_step(g, h, 10.0)
    np.testing.assert_allclose(s.step, np.linalg.solve(-h, g), rtol=1e-12)
    assert abs(s.decrement - np.sqrt(g @ np.linalg.solve(-h, g))) < 1e-12 and s.concave
    h = np.array([[-4.0, 0.0], [0.0, 1.0]])  # convex along the second axis
    s = trust_step(g, h, 0.5)
    assert abs(metric_length(s.step, h) - 0.5) < 1e-9 and not s.concave
    quad = lambda d: g @ d + 0.5 * d @ h @ d  # noqa: E731
    assert abs(s.predicted - quad(s.step)) < 1e-12
    scaled = g / np.sqrt(np.abs(np.diag(h)))
    assert s.predicted >= quad(0.5 * scaled / np.linalg.norm(scaled) / np.sqrt(np.abs(np.diag(h)))) - 1e-12


def ridge(n=2000.0, c=0.3):
    """A group effect pinned by ``n`` rows, ``c = e^lt a``, with ``tau ~ HalfNormal(1)`` on ``lt`` and ``a ~ N(0, 1)``:
    the curved ridge of a non-centred hierarchical model in two dimensions, with exact gradient and Hessian."""

    def f(z):
        lt, a = z
        t = np.exp(lt)
        r = t * a - c
        value = -0.5 * n * r**2 - 0.5 * t**2 + lt - 0.5 * a**2
        grad = np.array([-n * r * t * a - t**2 + 1.0, -n * r * t - a])
        hess = np.array(
            [
                [-n * (t * a) ** 2 - n * r * t * a - 2 * t**2, -n * t * t * a - n * r * t],
                [-n * t * t * a - n * r * t, -n * t**2 - 1.0],
            ]
        )
        return value, grad, hess

    return f


class Eval:
    def __init__(self, out):
        self.value, self.grad, self.hessian = out


def test_climb_reaches_the_ridge_mode_of_scipy():
    """From the wrong end of the ridge (tau = e^1.5, a = 0.8: the log posterior not concave there), the climb stops
    within 1e-3 Laplace s.d.s (Newton decrement) of the mode scipy finds in float64, the values agreeing to 1e-6, in
    at most 30 evaluations. Catches a metric or multiplier error (the step would leave the region where the quadratic
    holds and be rejected until the evaluations run out)."""
    f = ridge()
    start = np.array([1.5, 0.8])
    assert np.any(np.linalg.eigvalsh(-f(start)[2]) <= 0)
    done = lambda e: decrement(e.grad, e.hessian) <= 1e-3 and np.all(np.linalg.eigvalsh(-e.hessian) > 0)  # noqa: E731
    out = climb(lambda x, _: Eval(f(x)), start, Eval(f(start)), max_steps=30, max_trials=30, done=done)
    best = scipy.optimize.minimize(
        lambda z: tuple(-v for v in f(z)[:2]), start, jac=True, method="BFGS", options={"gtol": 1e-10}
    )
    assert done(out.current) and out.trials <= 30
    assert abs(out.current.value + best.fun) < 1e-6  # a decrement of 1e-3 leaves at most 5e-7 nats


def eigen_step(g, h, radius):
    """The eigenbasis step of the module docstring for a concave ``h``, written out in float64: ``mu`` from the
    boundary condition by root finding, independent of the Cholesky route."""
    lam, vec = np.linalg.eigh(-h)
    gt = (vec.T @ g) / np.sqrt(lam)
    dec = np.linalg.norm(gt)
    mu = (
        0.0
        if dec <= radius
        else scipy.optimize.brentq(lambda m: np.linalg.norm(gt / (1 + m)) - radius, 0.0, dec / radius)
    )
    z = gt / (1 + mu)
    return vec @ (z / np.sqrt(lam)), g @ (vec @ (z / np.sqrt(lam))) - 0.5 * z @ z, np.linalg.norm(z), dec


def test_concave_route_matches_the_eigenbasis_step_at_d_1004():
    """At a GLMM-sized ``d = 1004`` (arrow-shaped ``-H``: 1,000 group diagonals, 4 dense fixed-effect rows and columns),
    inside and on the boundary, the Cholesky route's step, predicted rise, length and decrement agree with the
    eigenbasis step (to float64 rounding relative to the condition number). Catches a wrong ``1 + mu`` (e.g. the
    boundary step not shortened to ``radius``, or a predicted rise with ``H`` and not ``B``), or a transposed factor."""
    rng = np.random.default_rng(3)
    d, p = 1004, 4
    neg = np.diag(rng.uniform(5.0, 400.0, d))
    cross = rng.normal(0.0, 1.0, (d - p, p))
    neg[: d - p, d - p :], neg[d - p :, : d - p] = cross, cross.T
    neg[d - p :, d - p :] = np.diag(np.full(p, 1e4)) + 0.1
    g = rng.normal(0.0, 10.0, d)
    for radius in (1e6, 0.5):
        s = trust_step(g, -neg, radius)
        step, predicted, length, dec = eigen_step(g, -neg, radius)
        np.testing.assert_allclose(s.step, step, rtol=1e-8, atol=1e-12 * np.abs(step).max())
        assert abs(s.predicted - predicted) <= 1e-9 * abs(predicted) and s.concave
        assert abs(s.length - length) <= 1e-9 * length and abs(s.decrement - dec) <= 1e-9 * dec
        assert abs(metric_length(s.step, -neg) - length) <= 1e-9 * length
        assert abs(decrement(g, -neg) - dec) <= 1e-9 * dec
    assert abs(length - 0.5) < 1e-9  # the boundary step has the radius's length


def test_concave_points_need_no_eigendecomposition(monkeypatch):
    """Where ``-H`` is positive definite the step, decrement and length come from one Cholesky: with numpy's
    ``eigh``/``eigvalsh`` made to fail, they still run (the issue-31 GLMM warm-up spent most of its 1,458 s in
    ``d = 1004`` eigendecompositions). Fails on the eigenbasis-only code."""

    def refuse(*args, **kwargs):
        raise AssertionError("an eigendecomposition at a concave point")

    monkeypatch.setattr(np.linalg, "eigh", refuse)
    monkeypatch.setattr(np.linalg, "eigvalsh", refuse)
    h, g = -np.array([[4.0, 1.0], [1.0, 2.0]]), np.array([1.0, -1.0])
    s = trust_step(g, h, 0.1)
    assert abs(s.length - 0.1) < 1e-12 and abs(metric_length(s.step, h) - 0.1) < 1e-12
    assert abs(decrement(g, h) - np.sqrt(g @ np.linalg.solve(-h, g))) < 1e-12
