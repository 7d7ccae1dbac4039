# rewardstream: the two commands a new user needs are `make demo` and `make test`.
# Everything runs from a virtualenv in .venv; services and downloads live in $(RS_CACHE_DIR)
# (default ~/.cache/rewardstream), outside the repo.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint up down status clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## demo: start the local platform and run the main job (every service, then HumanEval graded in the sandbox)
demo: $(STAMP)
	$(BIN)/rewardstream up
	$(BIN)/rewardstream demo

## test: start the local platform, then lint, type-check and run every test (none may be skipped in CI)
# The integration suite mostly waits (brokers, deadlines, killed processes), so it runs two files at a time;
# everything else runs after it, one test at a time: the sandbox suites measure time and memory, and the two
# files below stop and start the services under the others. Both parts always run; either failing fails.
# The language tests need every toolchain family's rootfs and image: built once before them (first run: a few
# minutes of Debian downloads; later runs: a check).
ALONE := tests/integration/test_platform.py tests/integration/test_pipeline_cli.py
test: $(STAMP) lint
	$(BIN)/rewardstream up
	$(BIN)/rewardstream sandbox toolchains --build all --docker
	status=0; \
	$(BIN)/pytest -n 2 --dist loadfile tests/integration $(ALONE:%=--ignore=%) || status=$$?; \
	$(BIN)/pytest tests --ignore=tests/integration $(ALONE) || status=$$?; \
	exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

up: $(STAMP)
	$(BIN)/rewardstream up

down: $(STAMP)
	$(BIN)/rewardstream down

status: $(STAMP)
	$(BIN)/rewardstream status

clean-venv:
	rm -rf $(VENV)
