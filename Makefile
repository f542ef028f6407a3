# Every target builds the virtualenv first (once, or again when pyproject.toml changes).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test lint bench venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,airflow]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)  ## generate a cluster history, ingest it on local Spark into ./lake, print it
	$(BIN)/offsetlake demo --lake lake --data demo-data

# The suite spends much of its time waiting on JVMs, servers and subprocesses: one worker per
# core (at least 2, at most 4), each test file whole on one worker (its fixtures built once).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -lt 2 ] && n=2; [ $$n -gt 4 ] && n=4; echo $$n)

test: $(STAMP)  ## the suite CI runs (tests needing ../shared skip with a reason when it is absent)
	$(BIN)/ruff check pipelines jobs tests benchmarks airflow_dags
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=30

lint: $(STAMP)
	$(BIN)/ruff check pipelines jobs tests benchmarks airflow_dags

bench: $(STAMP)  ## decode and ingest throughput against in-process baselines
	$(BIN)/python benchmarks/decode.py
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf lake demo-data .pytest_cache
