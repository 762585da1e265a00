"""GLMM designs shared by the GLMM proxy's tests (``test_glmm_proxy``, ``test_glmm_sums``)."""

import numpy as np

from minibatch_mcmc.models.glmm_design import GLMMDesign, GroupFactor


def crossed(family: str, n: int, seed: int = 0) -> GLMMDesign:
    """Two fixed effects, a random intercept ``g`` (6 levels, unequal sizes) crossed with a random intercept and slope ``h``."""
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(n), rng.normal(size=n)]
    g = rng.choice(6, n, p=[0.4, 0.25, 0.15, 0.1, 0.07, 0.03])
    h = rng.integers(0, 3, n)
    eta = 0.3 * x[:, 1] - 0.2 + 0.3 * rng.normal(size=6)[g]
    y = {"bernoulli": rng.random(n) < 1 / (1 + np.exp(-eta)), "poisson": rng.poisson(np.exp(eta + 0.5))}.get(
        family, eta + rng.standard_t(5, n)
    )
    return GLMMDesign(
        y=np.asarray(y, np.float64),
        x=x,
        fixed=("Intercept", "x1"),
        factors=(
            GroupFactor("g", g, np.ones((n, 1)), tuple("abcdef"), ("1",)),
            GroupFactor("h", h, np.c_[np.ones(n), x[:, 1]], ("p", "q", "r"), ("1", "x1")),
        ),
        offset=rng.normal(0.0, 0.3, n) if family == "poisson" else None,
    )


def grouped_design(family: str, n: int, levels: int, seed: int, noise: tuple = (1.0, 5.0)) -> GLMMDesign:
    """A random intercept of s.d. 0.4 over ``levels`` groups of sizes falling geometrically 10:1, two covariates;
    poisson with an offset, student-t with scale and ``nu`` ``noise``."""
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(1.0, 0.1, levels)
    g = rng.permutation(np.repeat(np.arange(levels), np.round(sizes / sizes.sum() * n).astype(int)))
    n = g.size
    x = np.c_[np.ones(n), rng.normal(size=(n, 2))]
    offset = rng.normal(0.0, 0.3, n) if family == "poisson" else None
    eta = x @ np.array([-0.3, 0.4, -0.2]) + 0.4 * rng.normal(size=levels)[g] + (0.0 if offset is None else offset)
    y = {
        "poisson": lambda: rng.poisson(np.exp(eta)),
        "bernoulli": lambda: rng.random(n) < 1.0 / (1.0 + np.exp(-eta)),
        "student_t": lambda: eta + noise[0] * rng.standard_t(noise[1], n),
    }[family]()
    return GLMMDesign(
        y=np.asarray(y, np.float64),
        x=x,
        fixed=("Intercept", "x1", "x2"),
        factors=(GroupFactor("g", g, np.ones((n, 1)), tuple(str(i) for i in range(levels)), ("1",)),),
        offset=offset,
    )
