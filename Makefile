# One virtual environment, made on demand; every target uses it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test lint typecheck unit bench clean conformance install uninstall

# `make install`: `jct` on the PATH, a link in $(PREFIX)/bin (default ~/.local/bin) to this checkout's
# .venv/bin/jct, so `claude mcp add jct-local -- jct serve --stdio` finds it. `make uninstall` removes it.
PREFIX ?= $(HOME)/.local

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The benchmark extra (matplotlib, pyinstrument, py-spy) on top of the test one, only for `make bench`.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)
	mkdir -p $(PREFIX)/bin
	ln -sfn $(abspath $(BIN))/jct $(PREFIX)/bin/jct
	@echo "jct -> $(PREFIX)/bin/jct"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "add $(PREFIX)/bin to your PATH";; esac

uninstall:
	rm -f $(PREFIX)/bin/jct

run: $(STAMP)
	$(BIN)/jct serve

lint: $(STAMP)
	$(BIN)/ruff check server tests bench deploy
	$(BIN)/ruff format --check server tests bench deploy
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Four workers on two cores: the suite waits on processes (servers, Claude Code, Chromium, leases running out)
# about as much as it computes (docs/development.md).
unit: $(STAMP)
	$(BIN)/python -m pytest -n 4 --dist loadgroup

# Lint first (seconds, and the commonest failure); then mypy beside pytest, whose workers leave a core idle
# often enough to take mypy's cold run (docs/development.md).
test: lint
	$(MAKE) --no-print-directory -j2 typecheck unit

# The whole suite (bench/suite.py, about 25 minutes on 2 cores): writes bench/RESULTS.md and bench/results/.
bench: $(BENCH_STAMP)
	$(BIN)/python bench/suite.py

clean:
	rm -rf $(VENV) .jct .pytest_cache .mypy_cache .ruff_cache

# The official MCP conformance suite's applicable server scenarios against a fresh `jct serve`
# (installs Node 22 and the suite into .cache/node22 with npm on first use). Not part of `make test`.
conformance: $(STAMP)
	VENV_BIN=$(abspath $(BIN)) scripts/conformance.sh

# The deployment, tested for real (deploy/podman-test.sh): the image built with podman from a
# debootstrapped base (no registry, no Docker engine), two replicas on PostgreSQL behind nginx,
# driven end to end with the MCP SDK, one replica stopped with SIGTERM mid-run. Needs root.
.PHONY: deploy-test
deploy-test: $(STAMP)
	deploy/podman-test.sh
