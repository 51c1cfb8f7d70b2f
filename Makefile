# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test fuzz lint typecheck bench compare clean floors

RUNSTAMP := $(VENV)/.installed-run

# `make test`: every extra and the test tools.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77' wheel
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# `make run`: the core, which is all the embedded default needs (SQLite, console, echo).
$(RUNSTAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'setuptools>=77' wheel
	$(BIN)/pip install -q -e .
	touch $(RUNSTAMP)

run: $(RUNSTAMP)
	$(BIN)/tether run

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

# The property tests (Hypothesis marks them `hypothesis`) with 5,000 examples each, not 50.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -m hypothesis

bench: $(STAMP)
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/idle.py
	$(BIN)/python bench/latency.py

# Not slower than BASE? Both measured in turns in one run: make compare BASE=rev [BENCH=bench/telegram.py]
BENCH ?= bench/pipeline.py
compare: $(STAMP)
	$(BIN)/python bench/compare.py --base $(BASE) $(BENCH)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Every declared lower bound installed exactly (a fresh .venv-floors) under a smoke suite.
floors: $(STAMP)
	$(BIN)/python .ci/floors.py
