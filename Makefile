# One virtual environment, made on demand; every target uses it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench clean conformance

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/jct serve

lint: $(STAMP)
	$(BIN)/ruff check server tests bench
	$(BIN)/ruff format --check server tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/claims.py

clean:
	rm -rf $(VENV) .jct .pytest_cache .mypy_cache .ruff_cache

# The official MCP conformance suite's applicable server scenarios against a fresh `jct serve`
# (installs Node 22 and the suite into .cache/node22 with npm on first use). Not part of `make test`.
conformance: $(STAMP)
	VENV_BIN=$(abspath $(BIN)) scripts/conformance.sh
