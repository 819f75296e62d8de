# `make demo` and `make test` each set up .venv (once) with the package and what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/staticgrad: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/staticgrad
	$(BIN)/staticgrad demo

test: $(BIN)/staticgrad
	$(BIN)/python -m pytest

bench: $(BIN)/staticgrad
	$(BIN)/staticgrad bench

clean:
	rm -rf $(VENV) staticgrad-demo
