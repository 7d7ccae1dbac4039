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
test: $(STAMP) lint
	$(BIN)/rewardstream up
	$(BIN)/pytest

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
