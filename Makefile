# klamm: `make run` starts a broker on 127.0.0.1:9092 (data in ./klamm-data); `make test` runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test unit interop bench setup test-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/klamm serve --override log.dirs=./klamm-data

test-deps: $(STAMP)
	bash scripts/test-deps.sh

test: test-deps
	$(PY) -m pytest -q --durations=15 tests

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

interop: test-deps
	$(PY) -m pytest -q tests/interop

bench: test-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .cache klamm-data
