# `make demo` and `make test` each set up .venv (once) with the package and what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-slow lint bench peers clean

$(BIN)/staticgrad: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/staticgrad
	$(BIN)/staticgrad demo

# The quick suite (a few minutes); .ci/run also runs the slow tests and the linter.
test: $(BIN)/staticgrad
	$(BIN)/python -m pytest -m "not slow"

test-slow: $(BIN)/staticgrad
	$(BIN)/python -m pytest -m slow

lint: $(BIN)/staticgrad
	$(BIN)/ruff check staticgrad tests benchmarks examples docs

# OpenBLAS kernel overrides slow a current numpy: unset them for measuring only, never for tests.
bench: $(BIN)/staticgrad
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BIN)/staticgrad bench

# The peers (torch, jax, pytensor, tensorflow) live in their own environment, never in the package's dependencies.
peers: $(BIN)/staticgrad
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/pip install -q -e . torch==2.13.0 jax jaxlib pytensor threadpoolctl numba
	.venv-peers/bin/pip install -q tensorflow-cpu || echo "tensorflow-cpu not available: the TF1 peer of R1/R2 will skip"

clean:
	rm -rf $(VENV) .venv-peers staticgrad-demo
