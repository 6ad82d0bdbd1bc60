# klamm: `make run` starts a broker on 127.0.0.1:9092 (data in ./klamm-data); `make test` runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test unit interop interop-cluster bench pipeline setup test-deps fuzz clean

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

# The client suites run twice: against one broker, then against a three-process cluster (RF=3). Test files run
# in TEST_WORKERS processes at once (pytest-xdist; a file's tests in one process, the Spark tests all in one:
# tests/conftest.py): most tests wait on brokers, clients and timers, so two cores carry more than two.
TEST_WORKERS ?= 2
test: test-deps
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=15 tests
	$(MAKE) interop-cluster

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

interop: test-deps
	$(PY) -m pytest -q tests/interop

# Every client's interop suite against a cluster of three klamm processes (tests/conftest.py, "cluster": node 1
# broker and controller, nodes 2 and 3 brokers; KLAMM_CLUSTER_KIND=quorum: all three broker and controller, a
# Raft quorum). The cluster tests proper (test_cluster_*) build their own clusters and ran above.
KLAMM_CLUSTER_KIND ?= cluster
interop-cluster: test-deps
	KLAMM_TEST_BROKER=$(KLAMM_CLUSTER_KIND) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=10 tests/interop \
		--ignore-glob='tests/interop/test_cluster_*'

bench: test-deps
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py $(BENCH_ARGS)
	$(PY) bench/spark.py $(SPARK_BENCH_ARGS)
	$(PY) bench/controller_failover.py
	$(PY) bench/security.py --rounds 3
	$(PY) bench/scale.py

# Coverage-guided fuzzing of the frame, SASL and request decoders (tests/fuzz/README.md): atheris runs
# tests/fuzz/harness.py from the captured client frames in tests/fuzz/corpus for FUZZ_SECONDS. Inputs that reach
# new code collect in .cache/fuzz/corpus (kept for the next run); a crash, or an input running past 10 s (a hang),
# is written to .cache/fuzz/ and ends the run with an error.
FUZZ_SECONDS ?= 600
fuzz: $(STAMP)
	$(PY) -m pip install -q -e '.[fuzz]'
	mkdir -p .cache/fuzz/corpus
	$(PY) tests/fuzz/atheris_main.py -max_total_time=$(FUZZ_SECONDS) -timeout=10 -max_len=8192 -print_final_stats=1 \
		-artifact_prefix=.cache/fuzz/ .cache/fuzz/corpus tests/fuzz/corpus

# The clickstream example (examples/clickstream): klamm -> Spark Structured Streaming -> klamm and Parquet, checked.
pipeline: $(STAMP)
	$(PY) -m pip install -q -e '.[spark]' matplotlib
	$(PY) examples/clickstream/pipeline.py

clean:
	rm -rf $(VENV) .cache klamm-data
