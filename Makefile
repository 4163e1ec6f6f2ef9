# The two commands of the README. Each sets itself up: a virtual environment in .venv,
# (re)installed whenever pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-processes test-containers test-bench lint bench backends docs diagrams clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[tf,test,dev,docs]'
	touch $(STAMP)

## demo: make sample data (once) and train a tiny Keras model fed by local h5feed workers
demo: $(STAMP)
	$(BIN)/h5feed demo

# Keras 3 on JAX and PyTorch without TensorFlow (tests/system/test_backends.py runs its scripts here):
# jax[cpu], keras and h5feed without the tf extra, and torch: the CPU wheel where one lies on disk
# (BACKENDS_TORCH_WHEEL, 192 MB), else PyPI's torch. PyPI has no CPU build for x86_64 Linux: its
# torch is the CUDA build, about 3.0 GB to download (torch 2.15.0 539 MB, NVIDIA's CUDA libraries
# 2.1 GB, triton 286 MB) and the smallest thing from PyPI that works: torch without the CUDA
# libraries (pip --no-deps) fails at `import torch` (libcudnn.so.9 missing), even on CPU.
BACKENDS := .venv-backends
BACKENDS_STAMP := $(BACKENDS)/.installed
BACKENDS_TORCH_WHEEL ?= /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
BACKENDS_TORCH_FALLBACK := torch>=2.2
BACKENDS_TORCH = $(if $(wildcard $(BACKENDS_TORCH_WHEEL)),$(BACKENDS_TORCH_WHEEL),$(BACKENDS_TORCH_FALLBACK))

$(BACKENDS_STAMP): pyproject.toml
	@test -f '$(BACKENDS_TORCH_WHEEL)' || echo "make backends: no CPU torch wheel at $(BACKENDS_TORCH_WHEEL): installing '$(BACKENDS_TORCH_FALLBACK)' from the package index (the CUDA build, about 3 GB to download)" >&2
	test -x $(BACKENDS)/bin/python || $(PYTHON) -m venv $(BACKENDS)
	$(BACKENDS)/bin/python -m pip install --quiet --upgrade pip
	$(BACKENDS)/bin/python -m pip install --quiet '$(BACKENDS_TORCH)' -e '.[backends]'
	touch $(BACKENDS_STAMP)

## backends: the virtual environment for Keras 3 on JAX and PyTorch, without TensorFlow
backends: $(BACKENDS_STAMP)

# The tests write Python's bytecode caches (__pycache__/, ignored by git and Docker), even
# where the environment says PYTHONDONTWRITEBYTECODE (this project's machines do): without
# them every process compiles h5feed from source again (about 0.1 s of CPU per worker start,
# about 1,000 starts in `make test`) and pytest rewrites every test module's asserts again in
# each of its workers (`make test-fast`: 61 s without them, 51 s with them warm, 60 s cold).
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

## test: lint, type-check, the Docker engine and the whole test suite (what CI runs)
# The Docker engine (../shared/ci/docker-engine.sh, shared with other checkouts on this machine)
# is prepared and started in a step of its own before pytest, its progress on the terminal and
# each part under its own limit (minutes on a fresh machine: packages, debootstrap); that step
# holds it while pytest runs (the container tests only connect) and gives it back afterwards.
# TEST_WORKERS: pytest workers (default 3, what CI runs on its 2 cores). At one per core the
# cores were about half idle (tests wait on processes starting, on timeouts, on Swarm's pace):
# 3 took pytest from 753-800 to about 600 s on 2 cores (docs/architecture/development.md).
# A test that only passes on a quiet machine fails here: fix it, do not lower this.
TEST_WORKERS ?= 3
test: $(STAMP) $(BACKENDS_STAMP)
	$(BIN)/ruff check h5feed tests tools
	$(BIN)/ruff format --check h5feed tests tools
	$(BIN)/mypy
	$(TEST_ENV) $(BIN)/python tests/support/docker_helpers.py -- $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

## test-fast: while working: ruff, then the in-process tier (no process, socket, ZeroMQ context
##            or Docker; under a guard that fails a test making one): under a minute on 2 cores
# Two xdist workers by default: each collects the whole tree (TensorFlow's import included, about
# 15 s of CPU), which pays on 2 idle cores (about 40 s of wall against 55 s in one process);
# on a machine others keep busy, FAST_WORKERS=0 costs less CPU. No mypy (minutes): `make test`.
FAST_WORKERS ?= 2
test-fast: $(STAMP)
	$(BIN)/ruff check h5feed tests tools
	$(TEST_ENV) $(BIN)/python -m pytest -m inprocess -n $(FAST_WORKERS) -q

## test-processes: the tier of real worker processes and sockets (most of `make test`'s time)
test-processes: $(STAMP) $(BACKENDS_STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -m processes -n 2 --dist loadgroup --durations=25

## test-containers: the Docker tier (compose and Swarm), with the engine started as `make test` does
test-containers: $(STAMP)
	$(TEST_ENV) $(BIN)/python tests/support/docker_helpers.py -- $(BIN)/python -m pytest -m containers -n 0 --durations=25

## test-bench: `h5feed bench` end to end (the bench tier)
test-bench: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -m bench -n 2 --dist loadgroup --durations=25

# A CPU-only torch wheel, where one lies on disk (PyPI serves only the large CUDA build):
# installed before the bench extra, which then keeps it. Override: make bench TORCH_WHEEL=...
TORCH_WHEEL ?= $(firstword $(wildcard /opt/wheels/torch-*+cpu-cp3*-manylinux*_x86_64.whl))
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(if $(TORCH_WHEEL),$(BIN)/python -m pip install --quiet '$(TORCH_WHEEL)')
	$(BIN)/python -m pip install --quiet -e '.[tf,bench]'
	touch $(BENCH_STAMP)

## bench: h5feed against tf.data, keras, PyTorch and Grain, and the consumer ceiling
##        (writes docs/bench/bench-Ncores.{json,md,png}; ~20 min on 2 cores)
bench: $(BENCH_STAMP)
	$(BIN)/h5feed bench

## docs: the documentation site from docs/ into site/ (open site/index.html); `make test`
##       builds it with --strict and runs the getting-started page's examples (tests/docs/test_docs.py)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## diagrams: docs/diagrams/*.svg from their Graphviz sources (needs `dot`: apt install graphviz);
##           the SVGs are committed, so building the site needs no Graphviz
diagrams:
	$(PYTHON) tools/docs/diagrams.py

clean:
	rm -rf site $(VENV) $(BACKENDS) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
