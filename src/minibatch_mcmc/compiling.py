"""How much XLA optimises a compiled function: fully, or for fast compilation when its work is too small to repay it.

On the CPU a first fit is mostly compilation (at ``N = 10^5`` about 7 of its 8 seconds), and most of each
compilation is LLVM's optimisation of the generated code. ``FAST_COMPILE`` turns the backend's LLVM passes off
(XLA's own HLO optimisations stay): compilation takes about 40% less, the compiled code runs 2-6x slower. A function
whose total work is small finishes sooner that way. ``compile_options(work, limit)`` gives ``FAST_COMPILE`` for a
CPU function of at most ``limit`` work (in the caller's unit), XLA's defaults otherwise; each caller's limit is
below the break-even ``benchmarks/compile_level.py`` measured for that kind of function.

The persistent compilation cache: ``use_compilation_cache()``, called by the entry points (``from_numpyro``,
``warmup``, ``auto_sample``, ``sample``, ``MinibatchMH``) before they compile anything, points JAX's on-disk cache
(``jax_compilation_cache_dir``) at ``cache_directory()`` so a new process reads the programs an earlier one compiled
instead of compiling them again. It sets nothing where the user configured a directory in JAX (or turned JAX's cache
off), nor with ``MINIBATCH_MCMC_COMPILATION_CACHE=off``; importing the package sets nothing.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import numpy as np
import platformdirs

FAST_COMPILE = {"xla_backend_optimization_level": 0}
"""XLA's options for fast compilation: the CPU backend's LLVM optimisation off."""
RUN_WORK = 200_000
"""Largest ``chain-steps x d`` of a sampling run whose block runner compiles fast: below every break-even
``benchmarks/compile_level.py`` measured (``2.7e5`` to ``1.6e6`` over models, d = 7 to 300 and 4 or 64 chains; the
smallest, the robust regression at 4 chains, moved between ``2.7e5`` and ``3.6e5`` from run to run)."""
ONE_OFF_WORK = 10_000_000
"""Largest ``row evaluations x d`` of a function run once (the minibatch Adam search, the batch sizing's residuals,
the NumPyro start) that compiles fast (measured break-even of the Adam search: about ``3e7``)."""


LOOP_EMITTERS = {"xla_cpu_use_fusion_emitters": False}
"""XLA's CPU option for its loop emitters instead of its MLIR fusion emitters: with ``FAST_COMPILE`` the posterior
check's step (``diagnostics.exact_twin``) compiles sooner and runs as fast; at XLA's default level the check's gathered
sums ran slower a row, so ``fast_compile_options`` adds it only to ``FAST_COMPILE`` (docs/benchmarks.md, the check's
cost)."""


def compile_options(work: float, limit: float) -> dict[str, Any] | None:
    """``FAST_COMPILE`` on the CPU backend for a function of at most ``limit`` work, else None (XLA's defaults)."""
    return dict(FAST_COMPILE) if work <= limit and jax.default_backend() == "cpu" else None


@functools.lru_cache(maxsize=None)
def backend_knows(name: str, value: Any) -> bool:
    """Whether the default backend's compiler takes the option ``name=value`` (XLA's options vary by version): a
    trivial function compiled with it, once per process."""
    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(np.float32(0)).compile()
    except RuntimeError:  # XLA: "No such compile option"
        return False
    return True


def fast_compile_options(work: float, limit: float) -> dict[str, Any] | None:
    """``compile_options``, with ``LOOP_EMITTERS`` added to ``FAST_COMPILE`` where the backend takes them."""
    options = compile_options(work, limit)
    if options is None:
        return None
    return options | {name: value for name, value in LOOP_EMITTERS.items() if backend_knows(name, value)}


CACHE_ENV = "MINIBATCH_MCMC_COMPILATION_CACHE"
"""Environment variable choosing the persistent compilation cache's directory, or ``off`` (also ``0``, ``false``, ``no``,
``none``) for no cache."""
CACHE_OFF = frozenset({"off", "0", "false", "no", "none"})
"""Values of ``CACHE_ENV`` that turn the cache off (any case)."""
CACHE_MIN_COMPILE_SECONDS = 0.0
"""Shortest compilation written to the cache: JAX's default, 1 s, would leave out all but the largest of a fit's
programs on the CPU (of a first fit's ~70, most are small eager operations); set only where JAX's is at its default."""


@functools.cache
def malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), looked up once (``find_library`` runs ``ldconfig``); None off glibc."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_heap() -> bool:
    """Hand the heap memory freed since the last call back to the OS: glibc's ``malloc_trim(0)``. XLA's compilation of
    a large program (LLVM's work) frees most of what it allocated, but glibc keeps those pages mapped, so without this
    the process's resident memory carries the compilation's peak through the run that follows. Whether it could
    (False where the C library has no ``malloc_trim``, off glibc: nothing done)."""
    trim = malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def cache_directory(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The persistent cache's directory: ``CACHE_ENV``'s path, None where it says ``off``, else the user's cache
    directory's ``minibatch-mcmc/jax`` (``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, as ``platformdirs`` gives it)."""
    value = environ.get(CACHE_ENV, "").strip()
    if value.lower() in CACHE_OFF:
        return None
    if value:
        return Path(value).expanduser()
    return Path(platformdirs.user_cache_dir("minibatch-mcmc", appauthor=False)) / "jax"


def use_compilation_cache(environ: Mapping[str, str] = os.environ) -> str | None:
    """Point JAX's persistent compilation cache at ``cache_directory()`` unless the user set a directory in JAX, turned
    JAX's cache off, or set ``CACHE_ENV=off``; the directory JAX caches in (None: no cache). Safe to call often."""
    config = jax.config
    if config.jax_compilation_cache_dir or not config.jax_enable_compilation_cache:
        return config.jax_compilation_cache_dir if config.jax_enable_compilation_cache else None
    directory = cache_directory(environ)
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # a cache is trusted code: the user's own
    except OSError:
        return None  # no writable cache directory (read-only home): compile as without a cache
    config.update("jax_compilation_cache_dir", str(directory))
    if (
        config.jax_persistent_cache_min_compile_time_secs == 1.0
        and "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ
    ):
        config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    return str(directory)
