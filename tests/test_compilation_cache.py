"""The persistent compilation cache: on by default in the documented directory, set when the library first compiles
(not at import), kept off by ``MINIBATCH_MCMC_COMPILATION_CACHE=off``, and never in place of a directory the user set
in JAX.

Each case runs in a fresh interpreter (JAX's cache settings are process-wide) and reads JAX's configuration and the
directories afterwards: the default case through a short ``mm.sample`` (the entry point sets the cache), the others
through ``use_compilation_cache`` (what every entry point calls) and one small compiled function, which is cheaper.
On the code before issue 33 the default case fails (JAX's cache directory stays unset and nothing is written), as does
the chosen-directory case; the opt-out and user-directory cases guard against the cache overriding a choice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minibatch_mcmc.compiling import CACHE_ENV, cache_directory

RUN = """
import json, sys
import jax, numpy as np
import minibatch_mcmc as mm
from minibatch_mcmc.models import gaussian_mean
imported = jax.config.jax_compilation_cache_dir
data = np.random.default_rng(0).normal(size=(200, 1)).astype(np.float32)
mm.sample(gaussian_mean(), data, np.zeros(1, np.float32), proposal=mm.random_walk(scale=0.1),
          test=mm.BarkerTest(), num_samples=5, progress=False)
print(json.dumps({"imported": imported, "dir": jax.config.jax_compilation_cache_dir,
                  "min_seconds": jax.config.jax_persistent_cache_min_compile_time_secs}))
"""
CALL = """
import json
import jax
from minibatch_mcmc.compiling import use_compilation_cache
imported = jax.config.jax_compilation_cache_dir
use_compilation_cache()
jax.jit(lambda x: x * 2.0 + 1.0)(1.0)
print(json.dumps({"imported": imported, "dir": jax.config.jax_compilation_cache_dir,
                  "min_seconds": jax.config.jax_persistent_cache_min_compile_time_secs}))
"""


def _run(tmp_path: Path, code: str = CALL, **env: str) -> dict:
    """``code`` in a fresh interpreter with ``XDG_CACHE_HOME`` in ``tmp_path``, JAX's and our cache variables unset, then
    ``env``; its JSON line."""
    base = {k: v for k, v in os.environ.items() if k not in (CACHE_ENV, "JAX_COMPILATION_CACHE_DIR")}
    base.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=base, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(directory: Path) -> int:
    """Files in ``directory`` (0 if it does not exist)."""
    return sum(1 for p in directory.rglob("*") if p.is_file()) if directory.exists() else 0


def test_cache_is_set_on_first_compile_in_the_user_cache_directory(tmp_path):
    """Default: nothing at import; the first run points JAX at ``$XDG_CACHE_HOME/minibatch-mcmc/jax`` and writes its
    programs there (catches a cache never enabled, enabled at import, or written nowhere: JAX's 1 s floor keeps
    every program of a short run out of it)."""
    out = _run(tmp_path, RUN)
    want = tmp_path / "xdg" / "minibatch-mcmc" / "jax"
    assert out["imported"] is None
    assert out["dir"] == str(want)
    assert out["min_seconds"] == 0.0
    assert _entries(want) > 0


def test_cache_directory_can_be_chosen(tmp_path):
    """``MINIBATCH_MCMC_COMPILATION_CACHE=<dir>``: the programs go there, not to the user cache directory."""
    chosen = tmp_path / "chosen"
    out = _run(tmp_path, **{CACHE_ENV: str(chosen)})
    assert out["dir"] == str(chosen) and _entries(chosen) > 0
    assert not (tmp_path / "xdg" / "minibatch-mcmc").exists()


def test_opt_out_leaves_jax_config_untouched(tmp_path):
    """``MINIBATCH_MCMC_COMPILATION_CACHE=off``: JAX's cache directory and thresholds stay as JAX set them, no directory
    is made (catches an opt-out that still turns the cache on, or changes JAX's settings)."""
    out = _run(tmp_path, **{CACHE_ENV: "off"})
    assert out == {"imported": None, "dir": None, "min_seconds": 1.0}
    assert not (tmp_path / "xdg").exists()


def test_a_directory_set_in_jax_is_kept(tmp_path):
    """``JAX_COMPILATION_CACHE_DIR`` set by the user: kept, with JAX's own threshold, and our directory never made."""
    mine = tmp_path / "users-own"
    out = _run(tmp_path, JAX_COMPILATION_CACHE_DIR=str(mine))
    assert out["dir"] == str(mine) and out["min_seconds"] == 1.0
    assert not (tmp_path / "xdg").exists()


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "No", "none", " off "])
def test_off_values(value):
    """Every documented spelling of ``off`` turns the cache off."""
    assert cache_directory({CACHE_ENV: value}) is None


def test_a_path_value_is_the_directory(tmp_path):
    """A path (``~`` expanded) is the directory; an empty value is the default."""
    assert cache_directory({CACHE_ENV: str(tmp_path)}) == tmp_path
    assert cache_directory({CACHE_ENV: "~/c"}) == Path.home() / "c"
    assert cache_directory({CACHE_ENV: ""}).parts[-2:] == ("minibatch-mcmc", "jax")
