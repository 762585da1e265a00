"""Shared test settings: CPU, float32, fixed seeds; one persistent compilation cache per test session.

The cache: the package's persistent compilation cache (``minibatch_mcmc.compiling``) points at a temporary directory
made for this session (unless ``MINIBATCH_MCMC_COMPILATION_CACHE`` is set already), shared by the pytest-xdist workers
and the subprocesses tests start, which inherit the variable: a program compiled by one of them (the same model and
sampler built afresh by another test, in another worker) is read instead of compiled again. Starting empty, it
never carries a program from an earlier session or from the user's own cache; it is removed at exit.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

CACHE_ENV = "MINIBATCH_MCMC_COMPILATION_CACHE"  # minibatch_mcmc.compiling.CACHE_ENV, not imported: JAX loads later
if CACHE_ENV not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ:  # the controller, before workers start
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="minibatch-mcmc-test-cache-")
    atexit.register(shutil.rmtree, os.environ[CACHE_ENV], ignore_errors=True)
