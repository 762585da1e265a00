"""The penalty test (Ceperley and Dewing 1999): a Metropolis test on a noisy minibatch estimate of ``Delta``.

If ``delta_star ~ N(Delta, sigma^2)`` with ``sigma`` known and the same for the move and its reverse, accepting
with probability ``min(1, exp(delta_star - sigma^2 / 2))`` satisfies detailed balance exactly: its mean
acceptance ``a(Delta) = Phi((Delta - sigma^2/2)/sigma) + e^Delta Phi((-Delta - sigma^2/2)/sigma)`` obeys
``a(Delta) = e^Delta a(-Delta)``, and ``a -> min(1, e^Delta)`` as the noise vanishes (Barker-type tests stay
below 1/2 however good the proposal). Here ``sigma^2`` is estimated from the same ``b`` rows (``x = s2``, with
``b - 1`` degrees of freedom), so the penalty is the paper's series for an estimated variance,
``u_B(x) = x/2 + x^2/(4(b+1)) + x^3/(3(b+1)(b+3))``, chosen so that ``E exp(-u_B(x)) = exp(-sigma^2/2)`` to that
order when ``x`` is a scaled chi-square (``docs/notes-on-the-papers.md``, "Penalty test").

The minibatch and its growth are MHminibatch's (``read_minibatch``: chunks of ``m`` rows without replacement
while ``s2 >= sigma_max^2``, up to all ``N``); with all ``N`` rows ``s2 = 0``, ``u_B = 0`` and the test is the
exact Metropolis test. The random bits are MHminibatch's too, so both read the same rows for one key.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from minibatch_mcmc.acceptance.base import Statistics, TestOutcome, check_batch_fits, untempered
from minibatch_mcmc.acceptance.mhminibatch import first_chunk_indices, minibatch_outcome, read_estimate
from minibatch_mcmc.checks import check_int, check_real

SIGMA_MAX = 1.0
"""Default bound on the s.d. of ``delta_star``: a perfect proposal is accepted with probability at least
``2 Phi(-1/2) = 0.62`` (notes: the trade-off against rows read, and MHminibatch's ``sigma`` for side-by-side runs)."""
SIGMA_MAX_LIMIT = 2.0
"""Largest ``sigma_max`` allowed: beyond it a perfect proposal is accepted less often than ``2 Phi(-1) = 0.32``
and the variance series errs by more than ``1e-3`` in the log ratio at ``m = 50``."""


def penalty(s2: jax.Array, count: jax.Array) -> jax.Array:
    """``u_B``: the penalty for a variance ``s2`` of ``delta_star`` estimated from ``count`` rows (0 when ``s2 = 0``)."""
    b = jnp.maximum(count, 2).astype(s2.dtype)
    return s2 / 2.0 + s2 * s2 / (4.0 * (b + 1.0)) + s2**3 / (3.0 * (b + 1.0) * (b + 3.0))


class PenaltyTest(NamedTuple):
    """The penalty test: Metropolis on ``delta_star - u_B(s2)``, the minibatch grown while ``s2 >= sigma_max^2``."""

    batch_size: int
    """Initial minibatch size ``m``, also the growth increment."""
    sigma_max: float
    """Bound on the estimated s.d. of ``delta_star``; the minibatch grows while ``s2 >= sigma_max^2``."""
    name: str = "penalty"
    decision_rule = "metropolis"

    def validate(self, n_data: int) -> None:
        """Check ``m`` against the data size ``N``."""
        check_batch_fits(self.batch_size, n_data)

    temperature_factor = staticmethod(untempered)

    def first_rows(self, key: jax.Array, n_data: int) -> jax.Array:
        """The first chunk of ``m`` rows (MHminibatch's for the same key)."""
        return first_chunk_indices(key, self.batch_size, n_data)

    def decide(self, key: jax.Array, stats: Statistics) -> TestOutcome:
        """Grow the minibatch until ``s2 < sigma_max^2``, then accept iff ``log u < delta_star - u_B(s2)``."""
        read = read_estimate(key, stats, self.batch_size, self.sigma_max, None)
        return minibatch_outcome(
            jnp.log(read.uniforms[0]) < read.delta_star - penalty(read.st.s2, read.mom.count), read
        )


def penalty_test(batch_size: int = 50, sigma_max: float = SIGMA_MAX) -> PenaltyTest:
    """Ceperley and Dewing's penalty test: Metropolis on a minibatch estimate, less a penalty for its estimated variance.

    Args:
        batch_size: ``m``, the first minibatch and the rows added while too noisy (at least 2).
        sigma_max: The minibatch grows until the estimate's s.d. is below it (at most ``SIGMA_MAX_LIMIT``).
    """
    batch_size = check_int(batch_size, "batch_size m", low=2, why="the sample variance needs two points")
    sigma_max = check_real(
        sigma_max,
        "sigma_max",
        0.0,
        SIGMA_MAX_LIMIT,
        low_open=True,
        why="the s.d. of delta_star the minibatch grows down to; larger values accept a perfect move "
        "less than 32% of the time and the estimated-variance penalty loses accuracy",
    )
    return PenaltyTest(batch_size=batch_size, sigma_max=sigma_max)
