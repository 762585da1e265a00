"""PhaseClock: a phase's rows, passes over N, wall and compile seconds, and its progress line."""

import jax
import jax.numpy as jnp

from minibatch_mcmc.samplers.phase_cost import PhaseClock


def test_clock_separates_compilation_and_shows_the_phase(capsys):
    """A fresh jitted function compiled inside the phase shows as compile seconds (within the wall seconds); a
    second call compiles nothing; with progress the phase's status line ends with its cost."""
    f = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x).T + 1.2345)
    with PhaseClock("mode", 1000, progress=True) as clock:
        f(jnp.ones((3, 3))).block_until_ready()
    cost = clock.cost(2500)
    assert cost.data == 2500 and cost.passes == 2.5 and 0 < cost.compile_seconds <= cost.seconds
    with PhaseClock("tuning", 1000) as again:
        f(jnp.ones((3, 3))).block_until_ready()
    assert again.cost(0).compile_seconds == 0.0
    err = capsys.readouterr().err
    assert "warm-up: mode" in err and "2.50 passes (2,500 rows)" in err and "compiling" in err
