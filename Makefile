# The two commands: `make run` (the whole system) and `make test` (lint + the whole suite).
# `make test-fast` is the quick loop: lint + the suite less its slow, process-starting and
# browser tests (pyproject.toml markers).
# Both create/update the virtualenv in .venv from pyproject.toml first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: run test test-fast typecheck audit bench bench-broadcast bench-bot drill lint format stop-embedded migrate clean-venv

# A new venv of Python 3.11 comes with setuptools 65.5 (CVE-2024-6345, CVE-2025-47273): upgraded
# with pip.
$(INSTALLED): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip "setuptools>=78.1.1"
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	@touch $(INSTALLED)

run: $(INSTALLED)
	$(PY) -m config.run all

# The suite runs in xdist worker processes (each its own test database and Redis key prefix:
# tests/run_isolation.py); loadgroup keeps the tests of one xdist_group on one worker. Most
# tests wait (on servers, processes, windows), so more workers than cores pay, up to what the
# database gives: the process-starting tests take ~35 connections each (pools of web, Celery
# and uvicorn processes), the embedded PostgreSQL allows 300 (config/embedded.py).
PYTEST_WORKERS ?= 4
PYTEST_FAST_WORKERS ?= 4

test: lint audit
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

test-fast: lint
	$(PY) -m pytest -n $(PYTEST_FAST_WORKERS) --dist loadgroup \
		-m "not slow and not subprocess and not browser"

# pip-audit over the environment where its vulnerability database is reachable; elsewhere it
# says loudly that it could not run (REQUIRE_DEPENDENCY_AUDIT=1 makes that a failure).
audit: $(INSTALLED)
	$(PY) .ci/audit.py

# Not part of `make test`: several minutes of load against the project and its peers, then the
# support bot's broadcast rate (bench/README.md).
bench: $(INSTALLED)
	$(PY) -m bench.run $(BENCH_ARGS)
	$(PY) -m bench.broadcast

bench-broadcast: $(INSTALLED)
	$(PY) -m bench.broadcast

# Not part of `make test`: the support bot under a burst of 500 users writing at once through
# the webhook against the fake Bot API enforcing Telegram's limits, then the webhook updates a
# second of one web worker (bench/README.md). At Telegram's 20 messages a minute into the group
# the burst alone takes over an hour; BOT_BURST_ARGS="--time-scale 10" runs it in ~8 minutes.
bench-bot: $(INSTALLED)
	$(PY) -m bench.bot_burst $(BOT_BURST_ARGS)
	$(PY) -m bench.bot_burst --throughput

# Not part of `make test`: the whole system under load, faults and bad input, its invariants
# checked (docs/reliability.md). DRILL_ARGS="--quick" for a few hundred requests.
drill: $(INSTALLED)
	$(PY) -m drill.run $(DRILL_ARGS)

# mypy over the project's packages (pyproject.toml [tool.mypy]); .ci/run runs it before the tests.
typecheck: $(INSTALLED)
	$(PY) -m mypy

lint: $(INSTALLED)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(INSTALLED)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

migrate: $(INSTALLED)
	$(PY) manage.py migrate

stop-embedded: $(INSTALLED)
	$(PY) -m config.run stop-embedded

clean-venv:
	rm -rf $(VENV)
