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

test: $(STAMP)  ## the suite CI runs (tests needing ../shared skip with a reason when it is absent)
	$(BIN)/ruff check pipelines jobs tests benchmarks airflow_dags
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check pipelines jobs tests benchmarks airflow_dags

bench: $(STAMP)  ## decode and ingest throughput against in-process baselines
	$(BIN)/python benchmarks/decode.py
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf lake demo-data .pytest_cache
