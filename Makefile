# Thin wrapper: create .venv, install pinned dependencies, run Python entry points.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export RAY_ENABLE_UV_RUN_RUNTIME_ENV := 0
export TOKENIZERS_PARALLELISM := false
# No network here: keep `make serve`'s long-lived Prefect server from sending telemetry (the CLIs'
# private servers turn it off themselves, flows/runtime.py).
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: install demo test test-slow test-all serve bench electra-vs-mlm clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m cli.demo --out demo_out

# Two test processes (pytest-xdist), one test file each at a time: most tests wait on servers,
# subprocesses and clusters rather than computing, so two share 2 cores well.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --timeout=900 --durations=15

# `make test`: everything a change should be checked against; the tests marked slow (kills and
# reruns of whole builds and runs, clusters losing nodes, failing stores, soaks, multi-launch
# resumes, benchmark smoke runs) run with `make test-all`, or alone with `make test-slow`.
test: $(STAMP)
	$(PYTEST) -m "not slow" tests

test-slow: $(STAMP)
	$(PYTEST) -m slow tests

test-all: $(STAMP)
	$(PYTEST) tests

serve: $(STAMP)
	bash infra/serve.sh

bench: $(STAMP)
	$(PY) benchmarks/corpus/corpus.py
	$(PY) benchmarks/train/step.py
	$(PY) benchmarks/train/train.py

# ELECTRA vs MLM at equal training FLOPs on the real books and GLUE tasks (hours on 2 cores;
# rerun to resume). Extra flags: make electra-vs-mlm EVM_ARGS="--seeds 5".
EVM_DATA ?= ../shared/data
EVM_ARGS ?=
electra-vs-mlm: $(STAMP)
	test -f bench_out/books/manifest.json || $(PY) -m cli.build_corpus --source $(EVM_DATA)/corpus/gutenberg \
		--out bench_out/books --profile books --validation-fraction 0.05
	$(PY) benchmarks/evaluate/electra_vs_mlm.py --corpus bench_out/books --glue-dir $(EVM_DATA)/glue \
		--out bench_out/electra_vs_mlm $(EVM_ARGS)

clean:
	rm -rf $(VENV) demo_out .pytest_cache
