# `make demo` and `make test` each set up .venv (once) with the package and what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench peers clean

$(BIN)/staticgrad: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/staticgrad
	$(BIN)/staticgrad demo

test: $(BIN)/staticgrad
	$(BIN)/python -m pytest

# OpenBLAS kernel overrides slow a current numpy: unset them for measuring only, never for tests.
bench: $(BIN)/staticgrad
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BIN)/staticgrad bench

# The peers (torch, jax, pytensor) live in their own environment, never in the package's dependencies.
peers: $(BIN)/staticgrad
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/pip install -q -e . torch==2.13.0 jax jaxlib pytensor threadpoolctl numba

clean:
	rm -rf $(VENV) .venv-peers staticgrad-demo
