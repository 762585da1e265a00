"""``warmup.group_gibbs``'s row passes in chunks (issue 31, memory at ``N = 10^7``): same sums, no per-row arrays.

A sweep's only row-level work is ``level_fit`` (step 1) and ``globals_fit`` (step 4). Read in chunks of
``Problem.chunk`` rows, each returns the sums it returned over all rows at once (a chunk boundary that drops or repeats
the last rows fails the first test), and the compiled passes' scratch memory, as XLA counts it before running
anything, holds no array of all ``N`` rows, per chain or shared (an ``N``-row array of derivatives or Jacobians per
chain, as before, fails the second by a factor of hundreds).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from test_group_gibbs import slope_design

from minibatch_mcmc.models.glmm import dimension, glmm_model
from minibatch_mcmc.warmup import group_gibbs as gg
from minibatch_mcmc.warmup.gibbs_route import problem_for


def passes(problem: gg.Problem):
    """``(state, base, data) -> (level fit, its change, globals fit, its value)``: both row passes from ``base``."""

    def run(state, base, data):
        fit, change = gg.level_fit(problem, state, 0, data, base)
        glob, value = gg.globals_fit(problem, state, data)(gg.globals_vector(state), gg.globals_vector(base))
        return fit, change, glob, value

    return run


def fits(problem: gg.Problem):
    """``(state, data) -> (level fit, globals fit)``: each pass as ``effects_step`` and ``newton_mh`` first call it."""

    def run(state, data):
        return gg.level_fit(problem, state, 0, data)[0], gg.globals_fit(problem, state, data)(gg.globals_vector(state))

    return run


def states(layout, count: int, seed: int) -> gg.GibbsState:
    """``count`` random chains' states (leading axis), effects of s.d. about 0.4."""
    theta = np.random.default_rng(seed).normal(0.0, 0.4, (count, dimension(layout))).astype(np.float32)
    return jax.vmap(lambda t: gg.from_flat(layout, t))(jnp.asarray(theta))


def test_chunked_passes_sum_what_one_pass_sums():
    """31 rows in chunks of 7 (four whole chunks and 3 rows left) give each level's gradient, curvature and
    log-likelihood change, and the globals' gradient, Hessian and row change, that one chunk of all rows gives, to
    float32 rounding (a dropped or repeated row moves a level's sums by a whole row's term, 1e-2 or more)."""
    model, data = glmm_model(slope_design([3, 8, 20]), "bernoulli")
    problem = problem_for(model, data)
    rows = {k: jnp.asarray(v) for k, v in data.items()}
    here, base = (jax.tree_util.tree_map(lambda a: a[0], states(problem.layout, 1, s)) for s in (4, 5))
    whole = jax.jit(passes(problem._replace(chunk=1000)))(here, base, rows)
    chunked = jax.jit(passes(problem._replace(chunk=7)))(here, base, rows)
    for got, want in zip(jax.tree_util.tree_leaves(chunked), jax.tree_util.tree_leaves(whole)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_row_passes_hold_no_array_of_all_rows():
    """Compiled (not run) for 3 chains on 2^26 rows, both passes' scratch memory stays under one byte per row: the
    chains share the rows and each holds one chunk's terms. Before, each chain held its rows' derivatives and Jacobians,
    over 60 bytes per row per chain."""
    model, data = glmm_model(slope_design([3, 8, 20]), "bernoulli")
    problem = problem_for(model, data)
    n, chains = 1 << 26, 3
    rows = {k: jax.ShapeDtypeStruct((n,) + v.shape[1:], v.dtype) for k, v in data.items()}
    st = jax.eval_shape(lambda: states(problem.layout, chains, 0))
    fn = jax.jit(jax.vmap(fits(problem), in_axes=(0, None)))
    temp = fn.lower(st, rows).compile().memory_analysis().temp_size_in_bytes
    assert temp < n, f"{temp / 1e6:.0f} MB of scratch for {n} rows"
