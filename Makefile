# Thin wrapper: create .venv, install pinned dependencies, run Python entry points.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export RAY_ENABLE_UV_RUN_RUNTIME_ENV := 0
export TOKENIZERS_PARALLELISM := false
# No network here: keep Prefect from trying to send telemetry.
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: install demo test test-fast serve bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m flows.demo --out demo_out

test: $(STAMP)
	$(PY) -m pytest -q --timeout=900 --durations=15 tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

serve: $(STAMP)
	bash infra/serve.sh

bench: $(STAMP)
	$(PY) benchmarks/corpus.py
	$(PY) benchmarks/step.py
	$(PY) benchmarks/train.py

clean:
	rm -rf $(VENV) demo_out .pytest_cache
