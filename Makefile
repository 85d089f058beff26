# Two commands for a fresh machine with Python >= 3.11:
#   make demo   run the main job: an agent killed, retried, approved and forked (examples/demo.py)
#   make test   ruff, ruff format --check, mypy (strict on the package) and the whole pytest suite
# Both create .venv when it is missing and install the package with its dev extra; the install
# is redone only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test

demo: $(INSTALLED)
	$(BIN)/python examples/demo.py

test: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e ".[dev]"
	touch $@
