# Two commands for a fresh machine with Python >= 3.11:
#   make demo   run the main job: an agent killed, retried, approved and forked (examples/demo.py)
#   make test   ruff, ruff format --check, mypy (strict on the package) and the whole pytest suite
#   make test-fast   the fast set alone (-m "not slow", tests/conftest.py says which): minutes
# and, next, the explorer:
#   make lab    JupyterLab on notebooks/, with a demo store (notebooks/demo-store) to explore
# All create .venv when it is missing. The demo needs only the standard library, so `make demo`
# installs the package alone (seconds); `make test` adds the dev extra (linters, JupyterLab,
# moto, ...); `make lab` only what the notebooks use: the explore extra, JupyterLab and the
# providers' SDKs. Each install is redone only when pyproject.toml changes.
# `make lab LAB_ARGS=--no-browser` on a remote machine (any `jupyter lab` option works there).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
DEV := $(VENV)/.installed-dev
LAB := $(VENV)/.installed-lab
LAB_STORE ?= notebooks/demo-store
LAB_ARGS ?=
# JupyterLab refuses to start as root ("Running as root is not recommended") without this
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

# pytest-xdist, a worker per core; a file's tests on one worker (a notebook's cells share a
# kernel, a module's fixtures start once)
PARALLEL ?= -n auto --dist loadfile

.PHONY: demo test test-fast lab

demo: $(BASE)
	$(BIN)/python examples/demo.py
	@echo "Next: make lab writes this demo's runs to notebooks/demo-store, keeps them, adds a"
	@echo "20-branch fan-out of a model call, and opens them in JupyterLab with the notebooks."

test: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PARALLEL)

test-fast: $(DEV)
	$(BIN)/python -m pytest -m "not slow" $(PARALLEL)

lab: $(LAB)
	$(BIN)/python examples/demo_store.py $(LAB_STORE)
	@echo "Open 01-explore-a-run.ipynb first; kx.load(\"demo-store\") in a notebook reads the store."
	@if [ "$$(id -u)" = 0 ]; then echo "Running as root: JupyterLab gets --allow-root."; fi
	$(BIN)/python -m jupyterlab --ServerApp.root_dir=notebooks $(ROOT_ARGS) $(LAB_ARGS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps -e .
	touch $@

$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e ".[dev]"
	touch $(BASE) $@

$(LAB): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -e ".[lab]"
	touch $(BASE) $@
