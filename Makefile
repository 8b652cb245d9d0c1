# Two commands set up a fresh clone: `make lab` and `make test`. Everything else is a helper.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.labkit-installed
NODEPS := $(wildcard requirements-nodeps.txt)
PYTEST_ARGS ?=

.PHONY: help install lab test test-fast strip reproduce doctor

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml constraints.txt $(NODEPS) | $(BIN)/python
	$(BIN)/python -m pip install -c constraints.txt -e ".[dev]"
	@if [ -f requirements-nodeps.txt ]; then $(BIN)/python -m pip install --no-deps -r requirements-nodeps.txt; fi
	touch $@

install: $(STAMP)  ## create .venv and install labkit (editable; exact versions from constraints.txt) and the no-deps extras

lab: install  ## install, then start JupyterLab on 127.0.0.1 at notebooks/00_tour.ipynb
	$(BIN)/labkit lab

test: install  ## install, then run every test, notebooks and the browser test included (PYTEST_ARGS="-x tests/core" passes options)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: install  ## unit tests only (no notebooks, browser or slow tests); PYTEST_ARGS as for test
	$(BIN)/python -m pytest -m "not notebook and not browser and not slow" $(PYTEST_ARGS)

strip: install  ## remove outputs from every notebook before committing
	$(BIN)/nbstripout --keep-id notebooks/*.ipynb

reproduce: install  ## every system's bench at the small profile, claims table into BENCHMARKS.md
	$(BIN)/labkit reproduce --profile small --record

doctor: install  ## check this machine
	$(BIN)/labkit doctor
