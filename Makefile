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
# The project's own test interpreter keeps one torch, whatever the newest release is: prov-trace declares
# torch>=2.10 (docs/compat.md); `make test-compat` runs the other releases.
TORCH_TEST ?= 2.13.0
PYTEST_ARGS ?=

.PHONY: demo test test-main test-311 test-compat bench clean venv venv311 browser

$(VENV)/.installed: pyproject.toml
	@if [ -z "$(PY_MAIN)" ]; then \
	  echo "note: no Python 3.12/3.13 found; using 3.11 ($(PY311)) for $(VENV). sys.monitoring needs 3.12+." >&2; \
	  $(PY311) -m venv $(VENV); \
	else \
	  $(PY_MAIN) -m venv $(VENV); \
	fi
	$(VENV)/bin/python -m pip install -q torch==$(TORCH_TEST)
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	@touch $@

$(VENV311)/.installed: pyproject.toml
	$(PY311) -m venv $(VENV311)
	$(VENV311)/bin/python -m pip install -q torch==$(TORCH_TEST)
	$(VENV311)/bin/python -m pip install -q -e '.[test]'
	@touch $@

venv: $(VENV)/.installed
venv311: $(VENV311)/.installed

demo: $(VENV)/.installed
	@mkdir -p out
	$(VENV)/bin/prov-trace run examples/reference_mlp.py:SimpleMLP -o out/prov-trace.msgpack --report out/provenance_audit.md

# The HTML report tests open pages in Debian's Chromium. Installing a browser is set-up, not a test:
# as root (CI) it is installed here when missing; elsewhere those tests skip and say how to install it.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the HTML report tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
	      || echo "note: chromium could not be installed; the browser tests will skip" >&2; \
	  else echo "note: chromium is not installed (apt-get install chromium); the browser tests will skip" >&2; fi; \
	fi

# On 3.12+ the main run is also the suite's own coverage run, under coverage.py's sys.monitoring
# core: the tests trace compiles in this process while coverage measures it (tests/test_inprocess.py
# checks both see their events). The summary covers prov_trace/; `coverage html` gives the detail.
# `make test` checks for the browser once, then runs test-main with BROWSER_DEP empty: a phony job before
# test-main inside its -j2 make let GNU make 4.3 start test-main only after test-311 had ended, in 2 of 6
# CI runs (2,196 s instead of ~1,430) and 7 of 20 in a toy Makefile of the same shape (0 of 30 without it).
BROWSER_DEP ?= browser
test-main: $(VENV)/.installed $(BROWSER_DEP)
	@if $(VENV)/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	  COVERAGE_CORE=sysmon $(VENV)/bin/python -m coverage run --source=prov_trace,tests -m pytest -q $(PYTEST_ARGS) \
	  && $(VENV)/bin/python -m coverage report --include='prov_trace/*' --skip-empty; \
	else \
	  $(VENV)/bin/python -m pytest -q $(PYTEST_ARGS); \
	fi

# 3.11 runs everything but the large-model tests (marked `heavy`), which the main run covers.
# (No pytest cache here: beside the main suite, two runs would write one .pytest_cache at once.)
test-311: $(VENV311)/.installed
	$(VENV311)/bin/python -m pytest -q -p no:cacheprovider -m "not heavy" $(PYTEST_ARGS)

# The suite on the main interpreter and, when this machine has one (CI does), on 3.11. Each suite keeps
# about one core busy (a load average of 1.0 through a run: one compile at a time), so with both venvs
# built they run side by side, which on CI's two cores takes the time of the longer one instead of the
# sum. Each has its own venv and temp dirs; make prints each suite's output whole when it ends. -k: a
# suite that fails never keeps the other from starting (a CI run once showed the 3.11 failure alone).
test: $(VENV)/.installed browser
	@if [ -n "$(PY311)" ] && [ "$(VENV)" != "$(VENV311)" ] && [ "$$($(VENV)/bin/python -c 'import sys;print(sys.version_info[:2]>=(3,12))')" = True ]; then \
	  $(MAKE) --no-print-directory $(VENV311)/.installed \
	  && $(MAKE) --no-print-directory -k -j2 --output-sync=target BROWSER_DEP= test-main test-311; \
	else echo "note: no Python 3.11 found; the 3.11 run is skipped" >&2; $(MAKE) --no-print-directory test-main; fi

# The end-to-end core (reference audit, Inductor cross-check, backward graph, graph break) on each
# extra torch release, in a venv per release under .compat/ (docs/compat.md). Needs only a python3
# and the Pythons it names; prints its wall time. RELEASES='2.12.1@3.12 ...' overrides the default set.
test-compat:
	python3 tests/compat/run_compat.py $(RELEASES)

bench: $(VENV)/.installed
	$(VENV)/bin/python bench/overhead.py

clean:
	rm -rf $(VENV) $(VENV311) out *.egg-info .compat
