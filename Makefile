# `make demo` and `make test` work on a fresh machine: each creates .venv when it is missing and
# installs the project into it first. The stamp reinstalls only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray,plot]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sniper train

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Benchmarks compare against torch, which is never part of the default install.
bench: $(STAMP)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/sniper bench compile
	$(BIN)/sniper bench store
	$(BIN)/sniper bench scheduler
	$(BIN)/sniper bench rpc
	$(BIN)/sniper bench e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
