# `make demo` and `make test` work on a fresh machine: each creates .venv when it is missing and
# installs the project into it first. The stamp reinstalls only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray,plot,profile,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sniper train

# A worker per core, each test file on one worker (its module fixtures, a trained job, made
# once). Bytecode is written: most tests start `sniper` processes, and each one compiled every
# module of the editable install again where PYTHONDONTWRITEBYTECODE is set (0.35 s a process).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n auto --dist loadfile

test: $(STAMP)
	$(PYTEST)

# The inner loop: everything but the files that run whole jobs as processes (tests/conftest.py).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow" -x -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# TorchRec, the peer a user would pick on one machine, needs torch 2.14.1 with FBGEMM's CPU
# build: an environment of its own. torchrec's own fbgemm-gpu dependency is the CUDA build,
# which clashes with the CPU one, hence --no-deps and its remaining needs by hand.
TORCHREC := .venv-torchrec
$(TORCHREC)/bin/python:
	$(PYTHON) -m venv $(TORCHREC)
	$(TORCHREC)/bin/python -m pip install --quiet torch==2.14.1 fbgemm-gpu-cpu==1.9.0 numpy
	$(TORCHREC)/bin/python -m pip install --quiet --no-deps torchrec==1.9.2
	$(TORCHREC)/bin/python -m pip install --quiet tensordict torchmetrics==1.0.3 tqdm pyre-extensions

# Benchmarks compare against torch and TorchRec, never part of the default install.
bench: $(STAMP) $(TORCHREC)/bin/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/sniper bench compile
	$(BIN)/sniper bench store
	$(BIN)/sniper bench store --peer torchrec
	$(BIN)/sniper bench memory
	$(BIN)/sniper bench scheduler
	$(BIN)/sniper bench rpc
	$(BIN)/sniper bench e2e
	$(BIN)/sniper bench e2e --peer torchrec

clean:
	rm -rf $(VENV) $(TORCHREC) .pytest_cache .mypy_cache .ruff_cache .hypothesis
