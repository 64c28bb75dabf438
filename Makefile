# The README's commands: `make demo`, `make test`, `make lint` (what CI runs). Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Test processes (pytest-xdist), each given whole files: a file's module fixtures (a Ray cluster, the
# reference runs of the parallel layouts) are made once. Most tests wait on subprocesses, so two
# workers on 2 cores take about 0.8x the wall time of one.
TEST_WORKERS ?= 2
TORCH_INDEX ?=

.PHONY: setup test test-fast lint format demo bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned and installed first, from TORCH_INDEX when given: the pin fixes the version,
	# the index the build (README: Install).
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test-fast: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash demo/run.sh

bench: setup
	for b in dedup dedup_memory tokenize loader train_step checkpoint_hash replay init_estimate extract langid decontaminate filter paragraphs object_storage; do $(PY) -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) demo_out bench/results
