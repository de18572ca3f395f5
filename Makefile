# queuelog: `make run` starts the server on SQLite, `make test` runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?= queuelog.example.toml
PORT   ?= 8000
PY_DIRS := $(wildcard src tests bench examples)

.PHONY: run test lint typecheck pytest bench bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,postgres,otel,dev,bench]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/queuelog serve --config $(CONFIG) --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

# The tests run `bench --quick` too, so the bench extra (Huey, pgqueuer) is always installed.
# The PostgreSQL modes use fresh schemas on $$BENCH_POSTGRES_URL (default: 127.0.0.1:5432/test).
# Durability stays full; every load targets 127.0.0.1. Writes bench/results/latest.json.
bench: $(STAMP)
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
