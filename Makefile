# Two commands for a fresh machine with Python >= 3.11:
#   make demo   run the main job: an agent killed, retried, approved and forked (examples/demo.py)
#   make test   ruff, ruff format --check, mypy (strict on the package) and the whole pytest suite
# Both create .venv when it is missing. The demo needs only the standard library, so `make demo`
# installs the package alone (seconds); `make test` adds the dev extra (linters, JupyterLab,
# moto, ...). Each install is redone only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
DEV := $(VENV)/.installed-dev

.PHONY: demo test

demo: $(BASE)
	$(BIN)/python examples/demo.py

test: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps -e .
	touch $@

$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e ".[dev]"
	touch $(BASE) $@
