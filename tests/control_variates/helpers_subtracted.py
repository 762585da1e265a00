"""A Taylor proxy's residuals with each row's difference a float32 subtraction, as before each row's difference was
integrated (``models.shared_term.row_difference``): the rounding the tests show the library no longer carries."""

from __future__ import annotations

from typing import Any, Callable

from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.models import Model


def subtracted_residuals(proxy: TaylorProxy, model: Model, current: Any, candidate: Any) -> Callable[[Any], Any]:
    """``rows -> (l_i(theta') - l_i(theta)) - q_i``, the difference a plain subtraction (a few ``eps |l_i|`` off)."""
    u, half_v = proxy.directions(current, candidate)
    return lambda rows: (
        (model.log_lik(candidate, rows) - model.log_lik(current, rows)) - proxy.per_datum(model, rows, u, half_v)
    )
