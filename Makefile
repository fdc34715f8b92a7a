# Two commands on a fresh machine:
#   make demo   create .venv, install, audit examples/reference_mlp.py:SimpleMLP -> out/provenance_audit.md
#   make test   create the venvs, install, run the test suite (on 3.12+ and, when present, 3.11)

SHELL := /bin/bash
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $$HOME/.pyenv)

# Newest-first preference: 3.12, then 3.13 (both run torch 2.13.0), else 3.11 with a note.
find_py = $(firstword $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python) $(shell command -v python$(1) 2>/dev/null))
PY_MAIN ?= $(or $(call find_py,3.12),$(call find_py,3.13))
PY311 ?= $(call find_py,3.11)

VENV := .venv
VENV311 := .venv311
PYTEST_ARGS ?=

.PHONY: demo test test-main test-311 bench clean venv venv311

$(VENV)/.installed: pyproject.toml
	@if [ -z "$(PY_MAIN)" ]; then \
	  echo "note: no Python 3.12/3.13 found; using 3.11 ($(PY311)) for $(VENV). sys.monitoring needs 3.12+." >&2; \
	  $(PY311) -m venv $(VENV); \
	else \
	  $(PY_MAIN) -m venv $(VENV); \
	fi
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	@touch $@

$(VENV311)/.installed: pyproject.toml
	$(PY311) -m venv $(VENV311)
	$(VENV311)/bin/python -m pip install -q -e '.[test]'
	@touch $@

venv: $(VENV)/.installed
venv311: $(VENV311)/.installed

demo: $(VENV)/.installed
	@mkdir -p out
	$(VENV)/bin/prov-trace run examples/reference_mlp.py:SimpleMLP -o out/prov-trace.msgpack --report out/provenance_audit.md

# On 3.12+ the main run is also the suite's own coverage run, under coverage.py's sys.monitoring
# core: the tests trace compiles in this process while coverage measures it (tests/test_inprocess.py
# checks both see their events). The summary covers prov_trace/; `coverage html` gives the detail.
test-main: $(VENV)/.installed
	@if $(VENV)/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	  COVERAGE_CORE=sysmon $(VENV)/bin/python -m coverage run --source=prov_trace,tests -m pytest -q $(PYTEST_ARGS) \
	  && $(VENV)/bin/python -m coverage report --include='prov_trace/*' --skip-empty; \
	else \
	  $(VENV)/bin/python -m pytest -q $(PYTEST_ARGS); \
	fi

# 3.11 runs everything but the large-model tests (marked `heavy`), which the main run covers.
test-311: $(VENV311)/.installed
	$(VENV311)/bin/python -m pytest -q -m "not heavy" $(PYTEST_ARGS)

# The suite on the main interpreter, then on 3.11 when this machine has one (CI does).
test: test-main
	@if [ -n "$(PY311)" ] && [ "$(VENV)" != "$(VENV311)" ] && [ "$$($(VENV)/bin/python -c 'import sys;print(sys.version_info[:2]>=(3,12))')" = True ]; then \
	  $(MAKE) --no-print-directory test-311; \
	else echo "note: no Python 3.11 found; the 3.11 run is skipped" >&2; fi

bench: $(VENV)/.installed
	$(VENV)/bin/python bench/overhead.py

clean:
	rm -rf $(VENV) $(VENV311) out *.egg-info
