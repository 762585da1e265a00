"""A built wheel is complete: it carries every module and the correction tables, builds without setuptools
deprecation warnings, and installed into a fresh virtual environment (no source tree on the path) runs one
``sample`` with MHminibatch, which reads the shipped correction table; it holds no reproductions, and its
``reproduce`` says they ship with the repository; the README's first example runs there too.

Offline: the wheel is built with the installed setuptools (``--no-build-isolation --no-index``), installed
with ``--no-deps``, and the new environment sees the current one's packages through a ``.pth`` file."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SKIP_COPY = (".git", ".venv", "site", "build", "dist", "runs", "__pycache__", "*.egg-info", ".pytest_cache", "*.pyc")
MIN_SETUPTOOLS = 77  # the first release reading ``license = "MIT"`` (an SPDX string)

SAMPLE = """
import jax.numpy as jnp, numpy as np
import minibatch_mcmc
from minibatch_mcmc import mh_minibatch, random_walk, sample
from minibatch_mcmc.acceptance.correction import SHIPPED_PATH
from minibatch_mcmc.models import gaussian_mean
x = np.random.default_rng(0).normal(1.0, 1.0, size=(2000, 1)).astype(np.float32)
res = sample(gaussian_mean(), x, jnp.ones(1), proposal=random_walk(scale=0.02), test=mh_minibatch(batch_size=50),
             num_samples=200, temperature=10.0, key=0, progress=False)
assert res.positions.shape == (1, 200, 1) and np.all(np.isfinite(res.positions)), res.positions
print(minibatch_mcmc.__file__)
print(SHIPPED_PATH)
"""


def _clean_env() -> dict[str, str]:
    """The environment without ``PYTHONPATH`` (which would put the source tree first)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def _run(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """Run a command; fail with its output if it fails."""
    proc = subprocess.run(args, cwd=cwd, env=_clean_env(), capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _site_dirs() -> list[str]:
    """This interpreter's package directories (not the source tree), for the new environment's ``.pth``."""
    src = str(SRC)
    return [p for p in sys.path if ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p) and p != src]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    major = int(importlib.metadata.version("setuptools").split(".")[0])
    if major < MIN_SETUPTOOLS:
        pytest.skip(
            f"setuptools {major} < {MIN_SETUPTOOLS} cannot build the SPDX license offline: pip install 'setuptools>={MIN_SETUPTOOLS}'"
        )
    tmp = tmp_path_factory.mktemp("wheel")
    tree = tmp / "tree"  # a copy, so the build leaves no build/ or egg-info in the checkout
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*SKIP_COPY))
    out = tmp / "dist"
    proc = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(tree),
        ],
        tmp,
    )
    log = proc.stdout + proc.stderr
    assert "SetuptoolsDeprecationWarning" not in log, f"building the wheel warns:\n{log[-4000:]}"
    (built,) = out.glob("minibatch_mcmc-*.whl")
    return built


def test_wheel_carries_every_module_and_the_correction_tables(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = SRC / "minibatch_mcmc"
    wanted = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    missing = [str(p.relative_to(SRC)) for p in wanted if str(p.relative_to(SRC).as_posix()) not in names]
    assert not missing, f"{wheel.name} lacks {missing}"
    assert any(n.startswith("minibatch_mcmc/acceptance/tables/") and n.endswith(".npz") for n in names), sorted(names)
    assert any(n.endswith("entry_points.txt") for n in names), "no console script entry point"
    outside = sorted({n.split("/")[0] for n in names if not n.startswith(("minibatch_mcmc/", "minibatch_mcmc-"))})
    assert not outside, f"{wheel.name} carries {outside}: the wheel holds the package alone (no reproductions/)"
    assert not any("/experiments/" in n or "reproductions" in n for n in names), sorted(names)


def test_the_package_holds_no_reproductions():
    """What setuptools' package finding (pyproject's ``packages.find``) puts in a wheel: ``minibatch_mcmc`` and its
    subpackages, without the papers' reproductions (``minibatch_mcmc.experiments`` before issue 30)."""
    import importlib.util
    import tomllib

    from setuptools import find_namespace_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_namespace_packages(where=str(ROOT / find["where"][0]), include=find.get("include", ["*"]))
    assert "minibatch_mcmc" in packages and "minibatch_mcmc.samplers.mintee" in packages, packages
    assert all(p.split(".")[0] == "minibatch_mcmc" for p in packages), packages
    assert not [p for p in packages if "experiments" in p or "reproductions" in p], packages
    assert importlib.util.find_spec("minibatch_mcmc.experiments") is None
    assert (ROOT / "reproductions" / "registry.py").is_file()


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """A fresh virtual environment with the wheel installed (this environment's packages through a ``.pth``) and an
    empty working directory outside the source tree: ``(venv, workdir)``."""
    tmp = tmp_path_factory.mktemp("installed")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        tmp,
    )
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp).stdout.strip()
    pathlib.Path(site, "outer_env.pth").write_text(
        "\n".join(_site_dirs()) + "\n"
    )  # numpy, jax, ... from this environment
    work = tmp / "work"
    work.mkdir()
    return venv, work


@pytest.mark.slow
def test_installed_wheel_runs_one_sample(installed):
    venv, tmp_path = installed
    python = venv / "bin" / "python"
    lines = _run([str(python), "-c", SAMPLE], tmp_path).stdout.split()
    module_file, table = pathlib.Path(lines[-2]), pathlib.Path(lines[-1])
    assert module_file.is_relative_to(venv), (
        f"minibatch_mcmc was imported from {module_file}, not from the wheel in {venv}"
    )
    assert table.is_relative_to(venv) and table.exists(), f"the correction table {table} is not the installed one"
    script = venv / "bin" / "minibatch-mcmc"
    assert "reproduce" in _run([str(script), "--help"], tmp_path).stdout
    outside = subprocess.run(
        [str(script), "reproduce", "--list"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True
    )
    assert outside.returncode == 2 and "ship with the repository" in outside.stderr, outside.stderr


@pytest.mark.slow
def test_readme_first_example_runs_from_the_installed_wheel(installed):
    """The README's first example (``from_numpyro`` + ``auto_sample`` + ``fit_cost`` + ``to_netcdf``), at the small size
    ``test_docs_snippets`` runs it, in the environment the wheel was installed into, from a directory outside the
    source tree: what a user gets from ``pip install ".[numpyro]"`` with no ``make``. Would catch a first example that
    needs a module, data file or setting only the repository has (``test_docs_snippets`` runs it from the source
    tree)."""
    from test_docs_snippets import small, snippets

    venv, work = installed
    _, code = snippets(ROOT / "README.md")[0]
    code = small(code) + "import minibatch_mcmc\nprint('FROM', minibatch_mcmc.__file__)\n"
    out = _run([str(venv / "bin" / "python"), "-c", code], work).stdout
    module_file = pathlib.Path(out.split("FROM ")[-1].strip())
    assert module_file.is_relative_to(venv), f"minibatch_mcmc was imported from {module_file}, not the wheel"
    assert (work / "posterior.nc").stat().st_size > 0
