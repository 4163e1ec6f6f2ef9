# The two commands of the README. Each sets itself up: a virtual environment in .venv,
# (re)installed whenever pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[tf,test,dev]'
	touch $(STAMP)

## demo: make sample data (once) and train a tiny Keras model fed by local h5feed workers
demo: $(STAMP)
	$(BIN)/h5feed demo

## test: lint, type-check and the whole test suite (what CI runs)
test: $(STAMP)
	$(BIN)/ruff check h5feed tests benchmarks
	$(BIN)/ruff format --check h5feed tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest

## bench: the core benchmark (prints clips/s and trainer CPU per clip)
bench: $(STAMP)
	$(BIN)/python benchmarks/core_bench.py --json docs/bench/core-2cores.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
