"""How much XLA optimises a compiled function: fully, or for fast compilation when its work is too small to repay it.

On the CPU a first fit is mostly compilation (at ``N = 10^5`` about 7 of its 8 seconds), and most of each
compilation is LLVM's optimisation of the generated code. ``FAST_COMPILE`` turns the backend's LLVM passes off
(XLA's own HLO optimisations stay): compilation takes about 40% less, the compiled code runs 2-6x slower. A function
whose total work is small finishes sooner that way. ``compile_options(work, limit)`` gives ``FAST_COMPILE`` for a
CPU function of at most ``limit`` work (in the caller's unit), XLA's defaults otherwise; each caller's limit is
below the break-even ``benchmarks/compile_level.py`` measured for that kind of function.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

from typing import Any

import jax

FAST_COMPILE = {"xla_backend_optimization_level": 0}
"""XLA's options for fast compilation: the CPU backend's LLVM optimisation off."""
RUN_WORK = 200_000
"""Largest ``chain-steps x d`` of a sampling run whose block runner compiles fast: below every break-even
``benchmarks/compile_level.py`` measured (``2.7e5`` to ``1.6e6`` over models, d = 7 to 300 and 4 or 64 chains; the
smallest, the robust regression at 4 chains, moved between ``2.7e5`` and ``3.6e5`` from run to run)."""
ONE_OFF_WORK = 10_000_000
"""Largest ``row evaluations x d`` of a function run once (the minibatch Adam search, the batch sizing's residuals,
the NumPyro start) that compiles fast (measured break-even of the Adam search: about ``3e7``)."""


def compile_options(work: float, limit: float) -> dict[str, Any] | None:
    """``FAST_COMPILE`` on the CPU backend for a function of at most ``limit`` work, else None (XLA's defaults)."""
    return dict(FAST_COMPILE) if work <= limit and jax.default_backend() == "cpu" else None
