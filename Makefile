# quantbench: the two commands a user needs are `make repro` and `make test`.
# Everything installs into .venv on first use; a second call installs nothing.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# DVC runs each stage's `python stages/...` through PATH: make it the project's interpreter.
export PATH := $(abspath $(VENV))/bin:$(PATH)
# Keep transformers and the hub client offline: nothing in the default pipeline downloads.
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

SETUP_STAMP := $(VENV)/.setup-done
DEV_STAMP := $(VENV)/.dev-done
PYTEST_ARGS ?=

.PHONY: help setup repro test test-fast lint format dag clean clean-all

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

setup: $(SETUP_STAMP)  ## install the pipeline's environment into .venv (once)

$(SETUP_STAMP): requirements.txt requirements-nodeps.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and alone, so nothing later can pull a CUDA build (see requirements.txt)
	$(PIP) install -q $$(grep -E '^torch==' requirements.txt)
	$(PIP) install -q -c constraints.txt -r requirements.txt
	$(PIP) install -q --no-deps -r requirements-nodeps.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	touch $@

$(DEV_STAMP): $(SETUP_STAMP) requirements-dev.txt
	$(PIP) install -q -c constraints.txt -r requirements-dev.txt
	touch $@

repro: setup  ## run the whole pipeline (dvc repro); a second run with nothing changed does nothing
	dvc repro
	@echo "outputs: models/ (weights, DVC-cached) and reports/ (JSON reports)"

test: $(DEV_STAMP)  ## run every test, slow and server ones included (what CI runs)
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: $(DEV_STAMP)  ## run only the fast unit tests
	$(PY) -m pytest -m "not slow and not server and not e2e" $(PYTEST_ARGS)

lint: $(DEV_STAMP)  ## ruff lint and format check
	$(VENV)/bin/ruff check src stages tests
	$(VENV)/bin/ruff format --check src stages tests

format: $(DEV_STAMP)  ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix src stages tests
	$(VENV)/bin/ruff format src stages tests

dag: setup  ## show the pipeline's stages
	dvc dag

clean:  ## remove pipeline outputs (keeps .venv and the DVC cache)
	rm -rf models reports/*.json reports/*/

clean-all: clean  ## also remove .venv, build/ and DVC's cache
	rm -rf $(VENV) build .dvc/cache .dvc/tmp
